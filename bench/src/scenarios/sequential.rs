//! The sequential comparison: one request at a time over every path
//! (direct, gateway to Python and Bash, each baseline), in interleaved
//! repetitions so drift on the machine is shared between paths.

use std::collections::BTreeMap;
use std::time::Duration;

use super::context::Ctx;
use super::local::Local;
use super::proxies::Proxy;
use crate::Sizes;
use crate::load::{self, Recorder};
use crate::paths::HttpTarget;

/// Records `direct-python`, `gateway-python`, `gateway-bash` and
/// `<proxy>-python`, each over `sizes.reps` repetitions.
pub(super) async fn run(ctx: &mut Ctx, local: &Local, proxies: &[Proxy], sizes: &Sizes) {
    ctx.bar.set_message("sequential");
    let mut paths: Vec<(String, &HttpTarget)> = vec![
        ("direct-python".into(), &local.direct),
        ("gateway-python".into(), &local.gateway),
        ("gateway-bash".into(), &local.gateway_sh),
    ];
    for p in proxies {
        paths.push((format!("{}-python", p.name), &p.target));
    }
    let mut merged: BTreeMap<String, (Recorder, Duration)> = BTreeMap::new();
    for _ in 0..sizes.reps {
        for (name, t) in &paths {
            let (rec, el) =
                load::sequential(sizes.warmup, sizes.requests, || t.call(), ctx.tick()).await;
            let e = merged
                .entry(name.clone())
                .or_insert_with(|| (Recorder::new(), Duration::ZERO));
            e.0.merge(&rec);
            e.1 += el;
        }
    }
    for (name, (rec, el)) in &merged {
        ctx.put(name, rec, *el);
    }
}
