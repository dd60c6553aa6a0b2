//! Scheduling cost in the pure core: one decision pass
//! ([`kruntimes_core::pass::decide`]) over 10,000 Pending Runs and 500
//! Runtime Pods — the figure a control plane pays per Run, without the API
//! round trips. Sessions, function Runs, resource requests and affinity
//! terms are mixed so every plugin runs; the pass is repeated and the
//! median and best are reported, with the allocator's peak growth. Then the
//! same pass once its decisions are carried out and nothing changed (a
//! tick): every pool asleep, its waiting Runs given no cycle.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kruntimes_core::lifecycle::Life;
use kruntimes_core::pass::{self, PodFacts, RunFacts, Snapshot};
use kruntimes_core::scheduler::affinity::{
    Affinity, LabelSelector, RunAffinity, RunAffinityTerm, WeightedRunAffinityTerm,
};
use kruntimes_core::scheduler::{Capacity, Framework};
use kruntimes_core::{ModeKind, Resources};
use serde_json::json;

use super::context::Ctx;
use super::procfs::proc_usage;

/// Passes measured.
const PASSES: usize = 7;

/// Sets the `scheduling_*` figures for `runs` Pending Runs over `pods`
/// Pods (10,000 and 500; fewer with `--quick`).
pub(super) fn run(ctx: &mut Ctx, (runs, pods): (usize, usize)) {
    ctx.bar.set_message("scheduling");
    let snapshot = snapshot(runs, pods);
    let framework = Framework::default();
    let rss_before = proc_usage(std::process::id()).map_or(0, |u| u.1);
    let mut times: Vec<Duration> = Vec::new();
    let mut placed = 0;
    let mut cycles = 0;
    for _ in 0..PASSES {
        let t = Instant::now();
        let plan = pass::decide(&snapshot, &framework);
        times.push(t.elapsed());
        placed = plan.report.placed;
        cycles = plan.report.cycles;
        std::hint::black_box(plan);
    }
    let rss_after = proc_usage(std::process::id()).map_or(0, |u| u.1);
    times.sort();
    let per_run = |d: Duration| d.as_secs_f64() * 1e6 / runs as f64;
    // A quiet cluster's pass: the plans carried out until a pass changes
    // nothing (the second one still tries the Runs a pool turned away
    // before its last bind), then the same pass again and again.
    let mut settled = snapshot.clone();
    for _ in 0..4 {
        let plan = pass::decide(&settled, &framework);
        if plan.ops.is_empty() {
            break;
        }
        settled = settled.after(&plan);
    }
    let mut settled_times: Vec<Duration> = Vec::new();
    let mut skipped = 0;
    for _ in 0..PASSES {
        let t = Instant::now();
        let plan = pass::decide(&settled, &framework);
        settled_times.push(t.elapsed());
        skipped = plan.report.skipped;
        std::hint::black_box(plan);
    }
    settled_times.sort();
    ctx.figure("scheduling_settled_skipped", json!(skipped));
    ctx.figure(
        "scheduling_settled_us_per_run_median",
        json!(per_run(settled_times[PASSES / 2])),
    );
    ctx.figure("scheduling_runs", json!(runs));
    ctx.figure("scheduling_pods", json!(pods));
    ctx.figure("scheduling_cycles", json!(cycles));
    ctx.figure("scheduling_bound", json!(placed));
    ctx.figure(
        "scheduling_pass_ms_median",
        json!(times[PASSES / 2].as_secs_f64() * 1e3),
    );
    ctx.figure(
        "scheduling_us_per_run_median",
        json!(per_run(times[PASSES / 2])),
    );
    ctx.figure("scheduling_us_per_run_best", json!(per_run(times[0])));
    ctx.figure(
        "scheduling_rss_growth_mb",
        json!(rss_after.saturating_sub(rss_before) as f64 / 1024.0),
    );
}

/// `runs` Pending Runs over `pods` Pods in 5 pools of capacity 8 with
/// 4 CPUs each: every 10th Run a session, every 3rd asks 500m, every 7th
/// carries anti-affinity against its own app, every 11th a preferred
/// affinity; more Runs than slots, so both outcomes are exercised.
pub(super) fn snapshot(runs: usize, pods: usize) -> Snapshot {
    let pools = 5;
    let capacity = Capacity {
        runs: 8,
        resources: Resources::new().with("cpu", 4000),
    };
    let pods = (0..pods)
        .map(|i| PodFacts {
            name: format!("pod-{i:04}"),
            uid: format!("pod-uid-{i}"),
            pool: format!("ns/pool-{}", i % pools),
            ready: true,
            alive: true,
            capacity: capacity.clone(),
        })
        .collect();
    let selector = |app: usize| LabelSelector {
        match_labels: [("app".to_owned(), format!("app-{app}"))].into(),
        ..Default::default()
    };
    let runs = (0..runs)
        .map(|i| {
            let app = i % 50;
            let mut affinity = Affinity::default();
            if i % 7 == 0 {
                affinity.run_anti_affinity = Some(RunAffinity {
                    required: vec![RunAffinityTerm {
                        label_selector: selector(app),
                    }],
                    ..Default::default()
                });
            }
            if i % 11 == 0 {
                affinity.run_affinity = Some(RunAffinity {
                    preferred: vec![WeightedRunAffinityTerm {
                        weight: 50,
                        label_selector: selector((app + 1) % 50),
                    }],
                    ..Default::default()
                });
            }
            RunFacts {
                uid: format!("run-uid-{i}"),
                namespace: "ns".into(),
                name: format!("run-{i:05}"),
                runtime: format!("pool-{}", i % pools),
                labels: [("app".to_owned(), format!("app-{app}"))].into(),
                pool: Ok(format!("ns/pool-{}", i % pools)),
                mode: Ok(if i % 10 == 0 {
                    ModeKind::Session
                } else {
                    ModeKind::Function
                }),
                life: Life::default(),
                message: String::new(),
                max_retries: 3,
                termination: None,
                timeout: None,
                age: Duration::from_secs((i % 600) as u64),
                assigned_for: None,
                created: i as u64,
                owner: None,
                deleting: false,
                has_finalizer: true,
                backing_off: false,
                ttl_after_finished: None,
                finished_for: None,
                requests: if i % 3 == 0 {
                    Resources::new().with("cpu", 500)
                } else {
                    Resources::new()
                },
                priority: (i % 5) as i32,
                affinity,
            }
        })
        .collect();
    Snapshot {
        runs,
        pods,
        hold_placement: false,
        pools: BTreeMap::new(),
        memo: BTreeMap::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_synthetic_snapshot_binds_no_pod_beyond_its_capacity() {
        let s = snapshot(400, 20);
        let plan = pass::decide(&s, &Framework::default());
        assert!(plan.report.placed > 0 && plan.report.placed < 400);
        let mut per_pod: BTreeMap<String, u32> = BTreeMap::new();
        for op in &plan.ops {
            if let pass::Op::Status { bind: Some(b), .. } = op {
                *per_pod.entry(b.pod.clone()).or_default() += 1;
            }
        }
        assert!(per_pod.values().all(|n| *n <= 8), "{per_pod:?}");
        assert_eq!(per_pod.values().sum::<u32>() as u64, plan.report.placed);
        // Carried out, the next pass places nothing; the one after it
        // gives no waiting Run a cycle.
        let framework = Framework::default();
        let second = pass::decide(&s.after(&plan), &framework);
        assert_eq!(second.report.placed, 0);
        let quiet = s.after(&plan).after(&second);
        let third = pass::decide(&quiet, &framework);
        assert_eq!(third.report.cycles, 0);
        assert_eq!(third.report.skipped, 400 - plan.report.placed);
        assert!(third.ops.is_empty(), "{:?}", third.ops.first());
    }
}
