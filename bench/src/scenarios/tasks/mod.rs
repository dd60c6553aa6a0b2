//! Task Runs (`spec.mode.task`): a trivial Python script ([`SCRIPT`]) run
//! once on a warm Pod, measured per task from its creation to its terminal
//! status seen by the client, with the timeline split into its parts
//! ([`timeline`]).
//!
//! On `krt up` ([`embedded`], a stack of its own with `krt up`'s
//! defaults): `task-python`, one task at a time, interleaved with
//! `spawn-python-c`, the same script as a `python3 -c` spawned per task
//! ([`spawn`]); then each burst of `--tasks` sizes created in one apply
//! (`tasks-N`), beside the same number spawned 16 at a time
//! (`spawn-tasks-N`). On a cluster (`--kubeconfig`, [`kube`]): the same as
//! a task Run, a Job and a bare Pod per task, one at a time
//! (`node-task-{run,job,pod}`) and in bursts (`node-tasks-N-{run,job,pod}`;
//! Jobs and Pods up to `--task-baseline-max`), with API-server writes per
//! task ([`writes`]).
//!
//! Every series is a scenario of the report (its rate is tasks per second
//! over first creation → last terminal status), and each part of its
//! timeline another (`…-schedule`, `…-start`, `…-exit`, `…-observe`).

mod cpu;
mod embedded;
mod kube;
mod spawn;
mod timeline;
mod watch;
mod writes;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::json;

use self::kube::{Cluster, Kind};
use self::timeline::{PARTS, Recorded, SCRIPT, Seen};
use super::context::Ctx;
use crate::Sizes;
use crate::report::Report;

/// How long a burst may take before what has not ended counts as failed.
const BURST_WITHIN: Duration = Duration::from_secs(600);
/// How long one task may take.
const ONE_WITHIN: Duration = Duration::from_secs(120);

/// Records one series: its total as scenario `name`, each part as
/// `name-PART`; returns its figures.
fn put(report: &mut Report, name: &str, seen: &[Seen], gave_up: f64) -> Recorded {
    let r = timeline::record(seen, gave_up);
    let span = Duration::from_secs_f64(r.span);
    report
        .scenarios
        .insert(name.to_owned(), r.total.summary(span));
    for (part, rec) in PARTS.iter().zip(&r.parts) {
        if !rec.is_empty() {
            report
                .scenarios
                .insert(format!("{name}-{part}"), rec.summary(span));
        }
    }
    r
}

fn ms(us: u64) -> f64 {
    us as f64 / 1e3
}

/// Sets `{key}_p50_ms`, `_p99_ms`, `_max_ms`, `_per_sec`, `_failed` and
/// `_out_of_order` of `r`.
fn figures(report: &mut Report, key: &str, r: &Recorded) {
    let s = r.total.summary(Duration::from_secs_f64(r.span));
    for (k, v) in [
        ("p50_ms", json!(ms(s.p50_us))),
        ("p99_ms", json!(ms(s.p99_us))),
        ("max_ms", json!(ms(s.max_us))),
        ("per_sec", json!(r.per_sec())),
        ("failed", json!(r.failed)),
        ("out_of_order", json!(r.out_of_order)),
    ] {
        report.summary.insert(format!("{key}_{k}"), v);
    }
}

/// A series' median, ms.
fn p50(r: &Recorded) -> f64 {
    ms(r.total.summary(Duration::ZERO).p50_us)
}

/// A series' p99, ms.
fn p99(r: &Recorded) -> f64 {
    ms(r.total.summary(Duration::ZERO).p99_us)
}

/// What `python3` on `PATH` is: the interpreter both the Runtime Server
/// of `krt up` and the baseline start (a shell shim such as pyenv's costs
/// hundreds of milliseconds a start, which would swamp both).
fn describe_python() -> String {
    let found = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|d| d.join("python3"))
            .find(|p| p.is_file())
    });
    match found {
        Some(p) => {
            let mut head = [0u8; 2];
            let script = std::fs::File::open(&p)
                .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut head))
                .is_ok_and(|()| &head == b"#!");
            let real = std::fs::canonicalize(&p).unwrap_or_else(|_| p.clone());
            format!(
                "{} ({}{})",
                p.display(),
                real.display(),
                if script { ", a script" } else { "" }
            )
        }
        None => "python3 not on PATH".into(),
    }
}

/// Records the `krt up` series and figures, or skips `tasks` with the
/// reason.
pub(super) async fn run_local(ctx: &mut Ctx, krt: &Path, sizes: &Sizes) {
    ctx.bar.set_message("tasks");
    if let Err(e) = local(ctx, krt, sizes).await {
        ctx.skip("tasks", format!("{e:#}"));
    }
}

async fn local(ctx: &mut Ctx, krt: &Path, sizes: &Sizes) -> anyhow::Result<()> {
    let report = &mut ctx.report;
    report.config.insert("task_script".into(), json!(SCRIPT));
    report
        .config
        .insert("task_python".into(), json!(describe_python()));
    let python = "python3";
    let mut stack = embedded::Local::start(krt).await?;
    // Unrecorded: the first task and spawn read the interpreter from disk.
    let warm = ["warm-0".to_owned()];
    stack.burst(&warm, ONE_WITHIN).await?;
    stack.delete(&warm).await?;
    spawn::single(python).await;

    let (mut tasks, mut spawns) = (Vec::new(), Vec::new());
    let names: Vec<String> = (0..sizes.task_samples)
        .map(|i| format!("one-{i:04}"))
        .collect();
    let before = stack.cpu()?;
    for name in &names {
        spawns.push(spawn::single(python).await);
        tasks.extend(
            stack
                .burst(std::slice::from_ref(name), ONE_WITHIN)
                .await?
                .seen,
        );
    }
    let gave_up = timeline::now();
    // The baseline's interpreters are the bench's children, the tasks'
    // the Runtime Servers'.
    report.summary.insert(
        "task_python_cpu_ms_per_task".into(),
        stack.cpu()?.per_task_ms(&before, names.len()),
    );
    stack.delete(&names).await?;
    let task = put(report, "task-python", &tasks, gave_up);
    let base = put(report, "spawn-python-c", &spawns, gave_up);
    figures(report, "task_python", &task);
    figures(report, "spawn_python_c", &base);
    report.summary.insert(
        "task_python_added_p50_ms".into(),
        json!(p50(&task) - p50(&base)),
    );
    report.summary.insert(
        "task_python_added_p99_ms".into(),
        json!(p99(&task) - p99(&base)),
    );

    for &n in &sizes.task_bursts {
        let names: Vec<String> = (0..n).map(|i| format!("burst{n}-{i:04}")).collect();
        let before = stack.cpu()?;
        let followed = stack.burst(&names, BURST_WITHIN).await?;
        let gave_up = timeline::now();
        let used = stack.cpu()?.per_task_ms(&before, n);
        stack.delete(&names).await?;
        let before = cpu::sample(None, &Default::default());
        let spawned = spawn::burst(python, n, BURST_WITHIN).await;
        let spawn_gave_up = timeline::now();
        let spawn_used = cpu::sample(None, &Default::default()).per_task_ms(&before, n);
        report
            .summary
            .insert(format!("tasks_{n}_cpu_ms_per_task"), used);
        report
            .summary
            .insert(format!("spawn_tasks_{n}_cpu_ms_per_task"), spawn_used);
        let task = put(report, &format!("tasks-{n}"), &followed.seen, gave_up);
        let base = put(report, &format!("spawn-tasks-{n}"), &spawned, spawn_gave_up);
        figures(report, &format!("tasks_{n}"), &task);
        figures(report, &format!("spawn_tasks_{n}"), &base);
        report.summary.insert(
            format!("tasks_{n}_runtimed_instances_peak"),
            json!(followed.instances),
        );
        if base.per_sec() > 0.0 {
            report.summary.insert(
                format!("tasks_{n}_vs_spawn_per_sec_ratio"),
                json!(task.per_sec() / base.per_sec()),
            );
        }
    }
    Ok(())
}

/// Where the cluster part runs, from the flags.
pub(super) struct ClusterArgs {
    /// The cluster's kubeconfig.
    pub kubeconfig: PathBuf,
    /// The baselines' image (default: the `python` Runtime's).
    pub image: Option<String>,
    /// The largest burst also run as Jobs and as Pods.
    pub baseline_max: usize,
}

/// Records the cluster series and figures into `report`, or skips `tasks`
/// with the reason.
pub(super) async fn run_cluster(report: &mut Report, args: &ClusterArgs, sizes: &Sizes) {
    let result = async {
        let cluster = Cluster::connect(&args.kubeconfig, args.image.clone()).await?;
        let r = on_cluster(report, &cluster, args, sizes).await;
        // The namespace goes whatever happened.
        let removed = cluster.remove().await;
        r.and(removed)
    }
    .await;
    if let Err(e) = result {
        report.skipped.insert("tasks".into(), format!("{e:#}"));
    }
}

async fn on_cluster(
    report: &mut Report,
    cluster: &Cluster,
    args: &ClusterArgs,
    sizes: &Sizes,
) -> anyhow::Result<()> {
    report.config.insert("task_script".into(), json!(SCRIPT));
    report
        .config
        .insert("task_image".into(), json!(cluster.image()));
    report.summary.insert(
        "node_background_writes_per_sec".into(),
        json!(cluster.background_writes_per_sec()),
    );
    const KINDS: [Kind; 3] = [Kind::Run, Kind::Job, Kind::Pod];
    // One at a time, the three kinds in turn.
    let mut one: [(Vec<Seen>, f64, writes::Writes); 3] = Default::default();
    for i in 0..sizes.node_task_samples {
        for (k, kind) in KINDS.iter().enumerate() {
            let id = format!("one-{}-{i:03}", kind.name());
            let b = cluster.burst(*kind, &id, 1, ONE_WITHIN).await?;
            let (seen, gave_up, writes) = &mut one[k];
            seen.extend(b.seen);
            *gave_up = b.gave_up;
            for (r, w) in b.writes.0 {
                *writes.0.entry(r).or_default() += w;
            }
        }
    }
    let mut medians = [0.0; 3];
    for (k, kind) in KINDS.iter().enumerate() {
        let (seen, gave_up, writes) = &one[k];
        let name = kind.name();
        let r = put(report, &format!("node-task-{name}"), seen, *gave_up);
        figures(report, &format!("node_task_{name}"), &r);
        medians[k] = p50(&r);
        let n = seen.len().max(1) as f64;
        report.summary.insert(
            format!("node_task_{name}_writes_per_task"),
            json!(writes.of(kind.resources()) / n),
        );
        report.summary.insert(
            format!("node_task_{name}_all_writes_per_task"),
            json!(writes.total() / n),
        );
        report.summary.insert(
            format!("node_task_{name}_writes_per_task_by_kind"),
            json!(writes.per_task(kind.resources(), seen.len())),
        );
    }
    if medians[0] > 0.0 {
        report.summary.insert(
            "node_task_job_vs_run_p50_ratio".into(),
            json!(medians[1] / medians[0]),
        );
        report.summary.insert(
            "node_task_pod_vs_run_p50_ratio".into(),
            json!(medians[2] / medians[0]),
        );
    }

    for &n in &sizes.task_bursts {
        let mut runs_p50 = 0.0;
        for kind in KINDS {
            if kind != Kind::Run && n > args.baseline_max {
                continue;
            }
            let name = kind.name();
            let b = cluster
                .burst(kind, &format!("burst{n}-{name}"), n, BURST_WITHIN)
                .await?;
            let key = format!("node_tasks_{n}_{name}");
            let r = put(
                report,
                &format!("node-tasks-{n}-{name}"),
                &b.seen,
                b.gave_up,
            );
            figures(report, &key, &r);
            report.summary.insert(
                format!("{key}_writes_per_task"),
                json!(b.writes.of(kind.resources()) / n as f64),
            );
            report.summary.insert(
                format!("{key}_all_writes_per_task"),
                json!(b.writes.total() / n as f64),
            );
            report.summary.insert(
                format!("{key}_writes_per_task_by_kind"),
                json!(b.writes.per_task(kind.resources(), n)),
            );
            if kind == Kind::Run {
                runs_p50 = p50(&r);
            } else if runs_p50 > 0.0 {
                report
                    .summary
                    .insert(format!("{key}_vs_run_p50_ratio"), json!(p50(&r) / runs_p50));
            }
        }
    }
    Ok(())
}
