//! Warm pools that refill, on `krt up`'s real runtimed processes: a burst
//! of session Runs (50; 10 with `--quick`) written at once against a pool
//! that keeps [`MIN_IDLE`] instances free, beside the same burst against a
//! pool that keeps none (each session waits for an instance started for
//! it) — the baseline, in the same run. Per session, the time from its
//! manifest written to `Ready` in `runs.json` (sampled every 10 ms), as
//! scenarios `pool-warm` and `pool-cold`; for the warm pool, how long it
//! had fewer than [`MIN_IDLE`] free instances from the burst until it
//! refilled, and the instances it started.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use kruntimes_testkit::{Options, Stack};
use serde_json::{Value, json};

use super::context::Ctx;
use crate::load::Recorder;

/// Free instances the warm pool keeps.
const MIN_IDLE: u32 = 5;
/// `runs.json` sampling period.
const SAMPLE: Duration = Duration::from_millis(10);
/// How long a burst may take to be Ready and the pool to refill.
const DEADLINE: Duration = Duration::from_secs(300);

/// One burst's outcome.
struct Burst {
    ready: Recorder,
    elapsed: Duration,
    /// Time with fewer than `MIN_IDLE` free instances (warm pool only).
    below_min_idle: Duration,
    /// Until the pool had `MIN_IDLE` free instances again.
    refilled: Option<Duration>,
    started: usize,
}

/// Records `pool-warm` and `pool-cold` and the `pool_*` figures, or skips
/// `pool` with the reason.
pub(super) async fn run(ctx: &mut Ctx, krt: &Path, sessions: usize) {
    ctx.bar.set_message("pool refill");
    let mut p50 = BTreeMap::new();
    for (name, min_idle) in [("pool-warm", MIN_IDLE), ("pool-cold", 0)] {
        match burst(krt, sessions, min_idle).await {
            Ok(b) => {
                let s = ctx.put(name, &b.ready, b.elapsed);
                p50.insert(name, s.p50_us as f64);
                let key = name.replace('-', "_");
                ctx.figure(&format!("{key}_ready_p50_ms"), json!(s.p50_us as f64 / 1e3));
                ctx.figure(&format!("{key}_ready_p99_ms"), json!(s.p99_us as f64 / 1e3));
                ctx.figure(&format!("{key}_instances_started"), json!(b.started));
                if min_idle > 0 {
                    ctx.figure(
                        "pool_warm_below_min_idle_seconds",
                        json!(b.below_min_idle.as_secs_f64()),
                    );
                    ctx.figure(
                        "pool_warm_refilled_seconds",
                        json!(b.refilled.map(|d| d.as_secs_f64())),
                    );
                }
            }
            Err(e) => ctx.skip(name, format!("{e:#}")),
        }
    }
    ctx.figure("pool_sessions", json!(sessions));
    ctx.figure("pool_min_idle", json!(MIN_IDLE));
    if let (Some(warm), Some(cold)) = (p50.get("pool-warm"), p50.get("pool-cold"))
        && *warm > 0.0
    {
        ctx.figure("pool_cold_vs_warm_p50_ratio", json!(cold / warm));
    }
}

fn sandbox(name: &str) -> String {
    format!(
        "apiVersion: kruntimes.io/v1alpha1\nkind: Run\nmetadata:\n  name: {name}\nspec:\n  runtime: bash\n  mode:\n    session:\n      queueSize: 4\n"
    )
}

/// What `runs.json` says: each Run's phase by name, and the free
/// instances (connected, not retiring, holding no Run).
fn read(stack: &Stack) -> anyhow::Result<(BTreeMap<String, String>, u32, usize)> {
    let v: Value = serde_json::from_slice(&std::fs::read(stack.state_dir().join("runs.json"))?)?;
    let phases = v["runs"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| {
            (
                r["name"].as_str().unwrap_or_default().to_owned(),
                r["phase"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    let pods = v["pods"].as_array().cloned().unwrap_or_default();
    let free = pods
        .iter()
        .filter(|p| p["connected"] == true && p["retiring"] != true && p["used"] == 0)
        .count();
    Ok((phases, u32::try_from(free).unwrap_or(u32::MAX), pods.len()))
}

async fn burst(krt: &Path, sessions: usize, min_idle: u32) -> anyhow::Result<Burst> {
    let max = sessions + MIN_IDLE as usize + 1;
    let krt = krt.to_path_buf();
    let stack = tokio::task::spawn_blocking(move || {
        Stack::start(
            &krt,
            Options {
                env: Vec::new(),
                runtimed: 0,
                max_runtimed: Some(max),
                runs: Vec::new(),
                extra_args: vec![
                    "--min-idle".into(),
                    min_idle.to_string(),
                    "--scale-down-delay-secs".into(),
                    "600".into(),
                    "--gateway-access-log".into(),
                    "false".into(),
                ],
            },
        )
    })
    .await??;
    // The warm pool fills before the burst.
    let deadline = Instant::now() + Duration::from_secs(60);
    while read(&stack)?.1 < min_idle {
        if Instant::now() > deadline {
            bail!("the pool did not reach {min_idle} free instances within 60 s");
        }
        tokio::time::sleep(SAMPLE).await;
    }
    let before = read(&stack)?.2;
    let runs = stack.runs_dir();
    let started = Instant::now();
    let mut written = BTreeMap::new();
    for i in 0..sessions {
        let name = format!("burst-{i:03}");
        let tmp = runs.join(format!(".{name}.tmp"));
        std::fs::write(&tmp, sandbox(&name))?;
        std::fs::rename(&tmp, runs.join(format!("{name}.yaml")))
            .context("write a session manifest")?;
        written.insert(name, Instant::now());
    }
    let mut ready = Recorder::new();
    let mut pending = written.clone();
    let mut below = Duration::ZERO;
    let mut refilled = None;
    let mut last = Instant::now();
    loop {
        tokio::time::sleep(SAMPLE).await;
        let now = Instant::now();
        let (phases, free, _) = read(&stack)?;
        if free < min_idle {
            below += now - last;
        }
        last = now;
        pending.retain(|name, at| {
            if phases.get(name).map(String::as_str) == Some("Ready") {
                ready.record(now - *at, &Ok(200));
                false
            } else {
                true
            }
        });
        if pending.is_empty() && refilled.is_none() && free >= min_idle {
            refilled = Some(started.elapsed());
        }
        if pending.is_empty() && refilled.is_some() {
            break;
        }
        if started.elapsed() > DEADLINE {
            bail!(
                "{} of {sessions} sessions not Ready, or the pool not refilled, within {DEADLINE:?}",
                pending.len()
            );
        }
    }
    let elapsed = started.elapsed();
    let after = read(&stack)?.2;
    drop(stack);
    Ok(Burst {
        ready,
        elapsed,
        below_min_idle: below,
        refilled,
        started: after.saturating_sub(before),
    })
}
