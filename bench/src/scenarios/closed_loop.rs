//! Closed-loop throughput: 64 connections sending back to back for a fixed
//! time over the direct path, the gateway and each baseline, counting the
//! 200s per second. A function Run takes one invocation at a time (429
//! `Busy` beyond), so the request is the `sandbox` session's status read,
//! which its owner answers concurrently: the figure is the proxies', not a
//! handler's. The baselines here are a second set, in front of the
//! session's owner with its fencing headers.
//!
//! Every path's connections are opened and warmed first; then the paths
//! take turns, in rounds (each path's time split over [`ROUNDS`], the order
//! rotated each round), so a busy moment on the machine is shared between
//! the paths rather than charged to whichever ran then.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use super::context::Ctx;
use super::local::{Local, fence, owner_address};
use super::proxies;
use crate::Sizes;
use crate::load::{self, Recorder};
use crate::paths::{self, HttpTarget};

/// Connections (each its own client), as the throughput figure.
pub(super) const CONNECTIONS: usize = 64;

/// Rounds each path's time is split over, the paths taking turns in an
/// order rotated each round (at most one round per second of the path's
/// time).
const ROUNDS: u32 = 5;

/// One path's connections and what its rounds added up to.
struct Run {
    name: String,
    targets: Arc<Vec<HttpTarget>>,
    rec: Recorder,
    elapsed: Duration,
}

/// Every connection of a path sending back to back for `time`.
async fn round(targets: Arc<Vec<HttpTarget>>, time: Duration) -> (Recorder, Duration) {
    load::closed_loop(CONNECTIONS, time, move |i| {
        let t = targets[i].clone();
        async move { t.call().await }
    })
    .await
}

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
    let mut runs: Vec<Run> = Vec::with_capacity(paths.len());
    for (name, target) in paths {
        ctx.bar.set_message(format!("closed-{name} (warm-up)"));
        let targets: Arc<Vec<HttpTarget>> = Arc::new(
            (0..CONNECTIONS)
                .map(|_| target.own_connection())
                .collect::<anyhow::Result<_>>()?,
        );
        // Every connection opened and warm before the clock starts.
        round(targets.clone(), sizes.closed_warmup).await;
        runs.push(Run {
            name,
            targets,
            rec: Recorder::new(),
            elapsed: Duration::ZERO,
        });
    }
    let rounds = ROUNDS
        .min(u32::try_from(sizes.closed.as_secs()).unwrap_or(u32::MAX))
        .max(1);
    for r in 0..rounds as usize {
        for i in load::rotation(runs.len(), r) {
            let run = &mut runs[i];
            ctx.bar
                .set_message(format!("closed-{} (round {})", run.name, r + 1));
            let (rec, el) = round(run.targets.clone(), sizes.closed / rounds).await;
            run.rec.merge(&rec);
            run.elapsed += el;
        }
    }
    for run in &runs {
        let s = ctx.put(&format!("closed-{}", run.name), &run.rec, run.elapsed);
        let rps = s.ok as f64 / run.elapsed.as_secs_f64().max(f64::MIN_POSITIVE);
        ctx.figure(&format!("closed_loop_rps_{}", run.name), json!(rps.round()));
    }
    drop(baselines);
    Ok(())
}
