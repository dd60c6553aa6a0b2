//! The open-loop comparison at a fixed rate (coordinated-omission
//! corrected) over the direct path, the gateway and each baseline, with the
//! CPU and memory each proxy spent on it.

use std::sync::Arc;

use serde_json::json;

use super::MAX_OUTSTANDING;
use super::context::Ctx;
use super::local::Local;
use super::procfs::{proc_usage, tree_cpu};
use super::proxies::Proxy;
use crate::Sizes;
use crate::load;
use crate::paths::HttpTarget;

/// Records `open-direct`, `open-gateway` and `open-<proxy>`, and the figures
/// `gateway_cpu_ms_per_10k`, `gateway_peak_rss_mb` and
/// `<proxy>_cpu_ms_per_10k`.
pub(super) async fn run(ctx: &mut Ctx, local: &Local, proxies: &[Proxy], sizes: &Sizes) {
    let mut paths: Vec<(String, HttpTarget, Option<u32>)> = vec![
        ("open-direct".into(), local.direct.clone(), None),
        (
            "open-gateway".into(),
            local.gateway.clone(),
            Some(local.gateway_pid),
        ),
    ];
    for p in proxies {
        paths.push((
            format!("open-{}", p.name),
            p.target.clone(),
            Some(p.baseline.pid()),
        ));
    }
    for (name, target, pid) in paths {
        ctx.bar.set_message(name.clone());
        let before = proc_usage(local.gateway_pid);
        let cpu_before = pid.and_then(tree_cpu);
        let (rec, el) = open_loop(ctx, target, sizes).await;
        let per_10k = |cpu_ms: f64| cpu_ms * 10_000.0 / sizes.open_requests as f64;
        if name == "open-gateway" {
            // The gateway alone (no children), and its peak memory.
            if let (Some(b), Some(a)) = (before, proc_usage(local.gateway_pid)) {
                let cpu_ms = (a.0 - b.0).as_secs_f64() * 1000.0;
                ctx.figure("gateway_cpu_ms_per_10k", round1(per_10k(cpu_ms)));
                ctx.figure("gateway_peak_rss_mb", round1(a.2 as f64 / 1024.0));
            }
        } else if let (Some(pid), Some(b)) = (pid, cpu_before)
            && let Some(a) = tree_cpu(pid)
        {
            let key = format!("{}_cpu_ms_per_10k", name.trim_start_matches("open-"));
            ctx.figure(&key, round1(per_10k((a - b).as_secs_f64() * 1000.0)));
        }
        ctx.put(&name, &rec, el);
    }
}

/// `sizes.open_requests` requests to `target` at `sizes.rate`.
async fn open_loop(
    ctx: &Ctx,
    target: HttpTarget,
    sizes: &Sizes,
) -> (load::Recorder, std::time::Duration) {
    let target = Arc::new(target);
    load::open_loop(
        sizes.rate,
        sizes.open_requests,
        MAX_OUTSTANDING,
        move || {
            let t = target.clone();
            async move { t.call().await }
        },
        ctx.tick(),
    )
    .await
}

/// A figure rounded to one decimal.
fn round1(v: f64) -> serde_json::Value {
    json!((v * 10.0).round() / 10.0)
}
