//! Propagation: from a Run file appearing in the stack's watched directory
//! to the first 200 from its endpoint, one Run at a time; and from the Run's
//! Ready status to its first 200 (a Ready Run must be routable).

use std::time::{Duration, Instant};

use kruntimes_testkit::function_run;
use serde_json::json;

use super::context::Ctx;
use super::local::{Local, fence};
use super::{BODY, ECHO_PY};
use crate::Sizes;
use crate::load::{Outcome, Recorder};
use crate::paths::{self, Fence};

/// How long one Run may take to become invocable.
const DEADLINE: Duration = Duration::from_secs(30);

/// Records `propagation` and the figures `propagation_p50_ms` and
/// `propagation_p99_ms`.
pub(super) async fn run(ctx: &mut Ctx, local: &Local, sizes: &Sizes) -> anyhow::Result<()> {
    ctx.bar.set_message("propagation");
    let mut rec = Recorder::new();
    let start = Instant::now();
    for i in 0..sizes.propagation {
        let name = format!("prop-{i}");
        let file = format!("{name}.yaml");
        let yaml = function_run(&name, "python", "main.invoke", "main.py", ECHO_PY, "");
        let t0 = Instant::now();
        local.stack.add_run(&file, &yaml)?;
        let outcome = first_ok(local, &name, t0).await?;
        rec.record(t0.elapsed(), &outcome);
        local.stack.remove_run(&file)?;
        // Runs arrive one at a time here, not as a burst: let runtimed
        // replace the spare interpreter the registration used.
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let prop = ctx.put("propagation", &rec, start.elapsed());
    ctx.figure("propagation_p50_ms", json!(prop.p50_us as f64 / 1000.0));
    ctx.figure("propagation_p99_ms", json!(prop.p99_us as f64 / 1000.0));
    ready_to_first_200(ctx, local, sizes).await
}

/// Records `ready-to-first-200`: a new Run, waited for as the docs tell a
/// client to (until `runs.json` says Ready), then invoked at once; the time
/// from the Ready status being seen to the first 200, and every answer
/// before it that was not a 200 (`ready_to_first_200_not_ok`, expected 0:
/// a Ready Run is routable). Figures `ready_to_first_200_p50_ms`, `_p99_ms`.
async fn ready_to_first_200(ctx: &mut Ctx, local: &Local, sizes: &Sizes) -> anyhow::Result<()> {
    ctx.bar.set_message("ready-to-first-200");
    let mut rec = Recorder::new();
    let mut not_ok = 0u64;
    let start = Instant::now();
    for i in 0..sizes.propagation {
        let name = format!("ready-{i}");
        let file = format!("{name}.yaml");
        let yaml = function_run(&name, "python", "main.invoke", "main.py", ECHO_PY, "");
        local.stack.add_run(&file, &yaml)?;
        let run = ready_status(local, &name).await?;
        let ready = Instant::now();
        let target = paths::via_proxy(
            &local.pki,
            &local.stack.gateway,
            &fence(&run)?,
            Some(&local.stack.token),
            BODY,
        )?;
        let mut first: Option<Outcome> = None;
        loop {
            let out = target.call().await;
            if out == Ok(200) {
                rec.record(ready.elapsed(), first.as_ref().unwrap_or(&out));
                break;
            }
            not_ok += 1;
            first.get_or_insert(out);
            if ready.elapsed() > DEADLINE {
                rec.record(ready.elapsed(), &Err("no 200 within 30 s of Ready".into()));
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        local.stack.remove_run(&file)?;
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let s = ctx.put("ready-to-first-200", &rec, start.elapsed());
    ctx.figure("ready_to_first_200_p50_ms", json!(s.p50_us as f64 / 1000.0));
    ctx.figure("ready_to_first_200_p99_ms", json!(s.p99_us as f64 / 1000.0));
    ctx.figure("ready_to_first_200_not_ok", json!(not_ok));
    Ok(())
}

/// Polls `runs.json` every millisecond until Run `name` is Ready (the
/// window between its status and the gateway's table is milliseconds wide).
async fn ready_status(local: &Local, name: &str) -> anyhow::Result<serde_json::Value> {
    let t0 = Instant::now();
    loop {
        if let Some(r) = local.stack.run(name)
            && r["phase"] == "Ready"
        {
            return Ok(r);
        }
        anyhow::ensure!(t0.elapsed() < DEADLINE, "{name} not Ready within 30 s");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Polls every 2 ms, from `t0`, until Run `name` has a UID and answers 200
/// through the gateway (a fresh client each time, as a new caller would).
async fn first_ok(local: &Local, name: &str, t0: Instant) -> anyhow::Result<Outcome> {
    loop {
        if t0.elapsed() > DEADLINE {
            return Ok(Err("not invocable within 30 s".to_owned()));
        }
        if let Some(r) = local.stack.run(name) {
            let f = fence(&r).unwrap_or_else(|_| unassigned(&r));
            if !f.uid.is_empty() {
                let t = paths::via_proxy(
                    &local.pki,
                    &local.stack.gateway,
                    &f,
                    Some(&local.stack.token),
                    BODY,
                )?;
                if t.call().await == Ok(200) {
                    return Ok(Ok(200));
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// The fence of a Run not assigned yet: its UID (maybe empty) in the
/// default namespace and Runtime; enough to build its path.
fn unassigned(run: &serde_json::Value) -> Fence {
    Fence {
        uid: run["uid"].as_str().unwrap_or_default().to_owned(),
        pod_uid: String::new(),
        attempt: 0,
        namespace: "default".into(),
        runtime: "python".into(),
    }
}
