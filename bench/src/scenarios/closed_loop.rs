//! Closed-loop throughput: 64 connections sending back to back for a fixed
//! time over the direct path, the gateway and each baseline, counting the
//! 200s per second. A function Run takes one invocation at a time (429
//! `Busy` beyond), so the request is the `sandbox` session's status read,
//! which its owner answers concurrently: the figure is the proxies', not a
//! handler's. The baselines here are a second set, in front of the
//! session's owner with its fencing headers.

use std::sync::Arc;

use serde_json::json;

use super::context::Ctx;
use super::local::{Local, fence, owner_address};
use super::proxies;
use crate::Sizes;
use crate::load;
use crate::paths::{self, HttpTarget};

/// Connections (each its own client), as the throughput figure.
pub(super) const CONNECTIONS: usize = 64;

/// Records `closed-direct`, `closed-gateway` and `closed-<proxy>`, and the
/// figures `closed_loop_rps_<path>` (200 answers per second; the scenario's
/// errors say whether the run was error-free).
pub(super) async fn run(ctx: &mut Ctx, local: &Local, install: bool, sizes: &Sizes) {
    if let Err(e) = measure(ctx, local, install, sizes).await {
        ctx.skip("closed-loop", e.to_string());
    }
}

async fn measure(ctx: &mut Ctx, local: &Local, install: bool, sizes: &Sizes) -> anyhow::Result<()> {
    ctx.bar.set_message("closed-loop");
    let sandbox = local.stack.wait_phase("sandbox", "Ready").await?;
    let sb = fence(&sandbox)?;
    let owner = owner_address(&local.stack, &sandbox)?;
    let status = |t: HttpTarget| t.session_status(&sb);
    let mut paths: Vec<(String, HttpTarget)> = vec![
        (
            "direct".into(),
            status(paths::direct(&local.pki, owner, &sb, b"")?),
        ),
        (
            "gateway".into(),
            status(paths::via_proxy(
                &local.pki,
                &local.stack.gateway,
                &sb,
                Some(&local.stack.token),
                b"",
            )?),
        ),
    ];
    let baselines = if ctx.baselines {
        proxies::start_for(ctx, local, owner, &sb, install, status).await
    } else {
        Vec::new()
    };
    for p in &baselines {
        paths.push((p.name.to_owned(), p.target.clone()));
    }
    for (name, target) in paths {
        ctx.bar.set_message(format!("closed-{name}"));
        let targets: Arc<Vec<HttpTarget>> = Arc::new(
            (0..CONNECTIONS)
                .map(|_| target.own_connection())
                .collect::<anyhow::Result<_>>()?,
        );
        // Every connection opened and warm before the clock starts.
        let warm = targets.clone();
        load::closed_loop(CONNECTIONS, sizes.closed_warmup, move |i| {
            let t = warm[i].clone();
            async move { t.call().await }
        })
        .await;
        let (rec, el) = load::closed_loop(CONNECTIONS, sizes.closed, move |i| {
            let t = targets[i].clone();
            async move { t.call().await }
        })
        .await;
        let s = ctx.put(&format!("closed-{name}"), &rec, el);
        let rps = s.ok as f64 / el.as_secs_f64().max(f64::MIN_POSITIVE);
        ctx.figure(&format!("closed_loop_rps_{name}"), json!(rps.round()));
    }
    drop(baselines);
    Ok(())
}
