//! The scenarios, run in one process against one stack so every figure is
//! measured side by side on the same machine at the same time.
//!
//! One scenario a module, run in this order: `sequential`, `open_loop`
//! (with the proxies' cost), `closed_loop` (throughput), `sessions`, `interpreter_per_call`,
//! `auth`, `kube_auth`, `propagation`, `table_scale` — after `scheduling`,
//! the pure core's cost, and `pool_refill`, `tasks` and `artifacts`, which
//! start no shared stack (the first none at all, the others stacks of their
//! own; `tasks` runs on a cluster instead with `--kubeconfig`); then
//! `summary` derives the headline figures. `remote` is the cluster mode.
//! The rest is shared: the stack (`local`), the baselines in front of it
//! (`proxies`), extra gateways (`extra_gateway`), the report being built
//! (`context`), `/proc` readings (`procfs`) and small helpers
//! (`support`).

mod artifacts;
mod auth;
mod closed_loop;
mod context;
mod extra_gateway;
mod interpreter_per_call;
mod kube_auth;
mod kube_burst;
mod local;
mod open_loop;
mod pool_refill;
mod procfs;
mod propagation;
mod proxies;
mod remote;
mod scheduling;
mod sequential;
mod sessions;
mod soak;
mod summary;
mod support;
mod table_scale;
mod tasks;

use std::path::PathBuf;

use crate::report::Report;
use crate::{Args, Sizes};

/// The echo handler every path calls.
pub const ECHO_PY: &str = "def invoke(request):\n    return request\n";
/// The input of every invoke.
const INPUT: &str = r#"{"name": "bench"}"#;
/// [`INPUT`] as a request body.
const BODY: &[u8] = INPUT.as_bytes();
/// The groups that need no shared stack.
const STANDALONE: [&str; 4] = ["scheduling", "pool", "tasks", "artifacts"];
/// Open-loop requests in flight at most; more are recorded as dropped.
const MAX_OUTSTANDING: usize = 1024;

/// Runs every scenario.
pub async fn run(args: &Args, sizes: &Sizes) -> anyhow::Result<Report> {
    if args.gateway.is_some() || args.kubeconfig.is_some() {
        return remote::run(args, sizes).await;
    }
    let krt = args.krt.clone().unwrap_or_else(|| sibling("krt"));
    if args.soak {
        return soak::run(krt, args.duration, args.rate.unwrap_or(100.0)).await;
    }
    // Before the stack starts: a path that cannot be written fails at once.
    let trace = match &args.trace {
        Some(path) => Some(std::io::BufWriter::new(
            std::fs::File::create(path)
                .map_err(|e| anyhow::anyhow!("--trace {}: {e}", path.display()))?,
        )),
        None => None,
    };
    let mut ctx = context::Ctx::new(args, sizes);
    ctx.trace = trace;
    // The pure core needs no stack, the pool refill, the tasks and the
    // artifacts stacks of their own: `--only scheduling,pool,tasks,artifacts`
    // starts no shared one.
    if args.runs("scheduling") {
        scheduling::run(&mut ctx, sizes.scheduling);
    }
    if args.runs("pool") {
        pool_refill::run(&mut ctx, &krt, sizes.pool_sessions).await;
    }
    if args.runs("tasks") {
        tasks::run_local(&mut ctx, &krt, sizes).await;
    }
    if args.runs("artifacts") {
        artifacts::run(&mut ctx, &krt, args, sizes).await;
    }
    if !args.only.is_empty() && args.only.iter().all(|g| STANDALONE.contains(&g.as_str())) {
        ctx.bar.finish_and_clear();
        return Ok(ctx.report);
    }
    let local = local::Local::start(krt, args.gateway_threads, args.client_http1).await?;
    let proxies = if args.no_baselines {
        Vec::new()
    } else {
        proxies::start(&mut ctx, &local, args.install_baselines).await
    };

    if args.runs("sequential") {
        sequential::run(&mut ctx, &local, &proxies, sizes).await;
    }
    if args.runs("open-loop") {
        open_loop::run(&mut ctx, &local, &proxies, sizes).await;
    }
    if args.runs("closed-loop") {
        closed_loop::run(&mut ctx, &local, args.install_baselines, sizes).await;
    }
    if args.runs("sessions") {
        sessions::run(&mut ctx, &local, sizes).await?;
    }
    if args.runs("interpreter") {
        interpreter_per_call::run(&mut ctx, &local, sizes).await?;
    }
    if args.runs("auth") {
        auth::run(&mut ctx, &local, sizes).await?;
    }
    if args.runs("kube-auth") {
        kube_auth::run(&mut ctx, &local, sizes).await;
    }
    if args.runs("propagation") {
        propagation::run(&mut ctx, &local, sizes).await?;
    }
    if args.runs("table") {
        table_scale::run(&mut ctx, &local, sizes).await;
    }
    if args.runs("burst") {
        kube_burst::run(&mut ctx, &local, sizes.burst).await;
    }
    ctx.bar.finish_and_clear();

    summary::derive(&ctx.report.scenarios, &mut ctx.report.summary);
    // The baselines stop before the stack they proxy to.
    drop(proxies);
    drop(local);
    Ok(ctx.report)
}

/// The Markdown rendering of a report (a soak's has its timeline).
pub fn markdown(args: &Args, report: &Report) -> String {
    if args.soak {
        soak::markdown(report)
    } else {
        report.markdown()
    }
}

/// `name` next to this executable (where cargo puts `krt` too).
fn sibling(name: &str) -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.join(name)))
        .unwrap_or_else(|| PathBuf::from(name))
}
