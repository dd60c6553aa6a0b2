//! `kruntimes-bench`: the latency and cost harness. It starts its own
//! embedded stack (or, with `--gateway`, targets an existing one), measures
//! the gateway path beside the direct path to the owner runtimed and beside
//! nginx and HAProxy in front of the same runtimed, the warm Python worker
//! beside an interpreter per call, the decision cache, Run propagation, the
//! ownership table's memory, the gateway's CPU and memory cost, task Runs,
//! and the throughput of artifacts beside the store's own client.
#![forbid(unsafe_code)]

pub mod baselines;
pub mod load;
pub mod paths;
pub mod report;
pub mod scenarios;
pub mod soak;

use std::path::PathBuf;

use clap::Parser;

/// Flags.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "kruntimes-bench",
    about = "Latency and cost harness for the kruntimes gateway"
)]
pub struct Args {
    /// Small sizes: finishes in under 3 minutes on 2 cores.
    #[arg(long)]
    pub quick: bool,
    /// The `krt` binary (default: next to this executable).
    #[arg(long)]
    pub krt: Option<PathBuf>,
    /// Worker threads of the stack's gateway (`krt up --gateway-threads`)
    /// and of bare Pingora. Two, `krt up`'s and the chart's default and
    /// what nginx and HAProxy get: with the gateway's one worker per
    /// thread, two measured ~12 % more closed-loop throughput on 2 cores
    /// than one, at the same CPU per request in the open loop
    /// (docs/benchmarks.md, "Worker threads").
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub gateway_threads: u16,
    /// Hold the harness's HTTPS clients to HTTP/1.1 (default: HTTP/2 where
    /// the server offers it, as curl and the Go SDK do; the Python SDK
    /// speaks HTTP/1.1). Recorded in the report's config.
    #[arg(long)]
    pub client_http1: bool,
    /// Existing gateway URL (cluster mode; needs --ca and --token and an --endpoint path).
    #[arg(long, requires_all = ["ca", "token", "endpoint"])]
    pub gateway: Option<String>,
    /// CA bundle of an existing gateway.
    #[arg(long)]
    pub ca: Option<PathBuf>,
    /// Bearer token for an existing gateway (or `KRUNTIMES_BENCH_TOKEN`,
    /// which keeps it off the command line).
    #[arg(long, env = "KRUNTIMES_BENCH_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Invoke path of an echo Run on an existing gateway (`/v1/namespaces/…:invoke`).
    #[arg(long)]
    pub endpoint: Option<String>,
    /// Cluster mode: reach the gateway URL's `HOST:PORT` at `ADDR` instead
    /// (`HOST:PORT:ADDR`, as curl's `--resolve`), e.g. a NodePort.
    #[arg(long, requires = "gateway")]
    pub resolve: Option<String>,
    /// Cluster mode: the owner runtimed's dataplane (`POD_IP:7443`), measured
    /// beside the gateway as the path without it (needs --internal-pki,
    /// --owner-pod-uid and --attempt).
    #[arg(long, requires_all = ["gateway", "internal_pki", "owner_pod_uid", "attempt"])]
    pub direct: Option<std::net::SocketAddr>,
    /// Directory with the gateway's internal identity (`ca.crt`, `tls.crt`,
    /// `tls.key` of its internal Secret), for --direct.
    #[arg(long)]
    pub internal_pki: Option<PathBuf>,
    /// The Run's owner Pod UID (`status.assignedPodUID`), for --direct.
    #[arg(long)]
    pub owner_pod_uid: Option<String>,
    /// The Run's attempt (`status.attempt`), for --direct.
    #[arg(long)]
    pub attempt: Option<u64>,
    /// Sequential requests per path and repetition.
    #[arg(long)]
    pub requests: Option<u64>,
    /// Repetitions of the sequential comparison (interleaved across paths).
    #[arg(long)]
    pub reps: Option<u64>,
    /// Open-loop rate, requests per second.
    #[arg(long)]
    pub rate: Option<f64>,
    /// Open-loop requests per path (default 10,000; `--quick` 600). The
    /// p99 of N requests is the N/100-th slowest: its 95 % interval (in the
    /// report) narrows with √N.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub open_requests: Option<u64>,
    /// Entries of the synthetic ownership table.
    #[arg(long)]
    pub table_entries: Option<u64>,
    /// Install nginx and HAProxy with apt-get when missing.
    #[arg(long)]
    pub install_baselines: bool,
    /// Skip the nginx and HAProxy baselines.
    #[arg(long)]
    pub no_baselines: bool,
    /// Write every figure as JSON.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Draw latency percentiles per path as SVG.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// No progress bar.
    #[arg(long)]
    pub no_progress: bool,
    /// Write every request of the open-loop comparison to FILE, one
    /// tab-separated line each: the path, its intended send time (seconds on
    /// CLOCK_MONOTONIC, the clock `perf record -k mono` stamps events with),
    /// its latency in µs and its status (`error` when none came). For lining
    /// a tail up with whatever else ran on the machine.
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
    /// Closed-loop seconds per path (default 10; `--quick` 3).
    #[arg(long)]
    pub closed_secs: Option<u64>,
    /// Run only these scenario groups (comma-separated): `sequential`,
    /// `open-loop`, `closed-loop`, `sessions`, `interpreter`, `auth`,
    /// `kube-auth`, `propagation`, `table`, `scheduling`, `pool`, `tasks`,
    /// `artifacts`, `burst`. Default: all of them.
    #[arg(long, value_delimiter = ',', value_parser = clap::builder::PossibleValuesParser::new(GROUPS))]
    pub only: Vec<String>,
    /// Task bursts: how many task Runs are created at once, one burst per
    /// size (default 100 and 1,000; `--quick` 10).
    #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub tasks: Vec<u64>,
    /// Tasks run one at a time, each kind (default 50 on `krt up` and 10
    /// on a cluster; `--quick` 5 and 3).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub task_samples: Option<u64>,
    /// A cluster's kubeconfig (admin): the `tasks` group runs there — task
    /// Runs through its API server, beside the same script as a Job and as
    /// a bare Pod per task — instead of on `krt up`. Alone, it is cluster
    /// mode for `tasks` only.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// The image of the Job and Pod baselines (default: the cluster's
    /// `python` Runtime's `spec.image`, the Runtime Pods' own).
    #[arg(long, requires = "kubeconfig")]
    pub task_image: Option<String>,
    /// The largest task burst also run as Jobs and as bare Pods on a
    /// cluster (a node holds 110 Pods at most).
    #[arg(long, default_value_t = 100)]
    pub task_baseline_max: u64,
    /// Artifacts: the size of the artifact exported and downloaded, MiB
    /// (default 256; `--quick` 16).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub artifact_mib: Option<u64>,
    /// Artifacts: repetitions of each upload and download (default 5;
    /// `--quick` 2).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=100))]
    pub artifact_reps: Option<u64>,
    /// Run the soak instead of the comparison: constant open-loop load on a
    /// function and a session Run with faults injected (see docs/benchmarks.md).
    #[arg(long)]
    pub soak: bool,
    /// How long the soak runs (`10m`, `90s`, …).
    #[arg(long, default_value = "10m", value_parser = humantime::parse_duration)]
    pub duration: std::time::Duration,
}

/// The scenario groups `--only` selects from, in the order they run.
pub const GROUPS: [&str; 14] = [
    "scheduling",
    "pool",
    "tasks",
    "artifacts",
    "sequential",
    "open-loop",
    "closed-loop",
    "sessions",
    "interpreter",
    "auth",
    "kube-auth",
    "propagation",
    "table",
    "burst",
];

impl Args {
    /// Whether scenario group `group` runs.
    pub fn runs(&self, group: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|g| g == group)
    }
}

/// Sizes derived from the flags.
#[derive(Debug, Clone)]
pub struct Sizes {
    /// Sequential requests per path per repetition.
    pub requests: u64,
    /// Warm-up requests (not recorded).
    pub warmup: u64,
    /// Repetitions.
    pub reps: u64,
    /// Open-loop rate.
    pub rate: f64,
    /// Open-loop requests per path.
    pub open_requests: u64,
    /// Interpreter-per-call samples.
    pub spawn: u64,
    /// Unique-token samples.
    pub auth_misses: u64,
    /// Requests over 10 tokens through the Kubernetes-auth gateway.
    pub kube_requests: u64,
    /// Propagation samples.
    pub propagation: u64,
    /// Synthetic table size.
    pub table_entries: u64,
    /// Session operations per small scenario.
    pub session: u64,
    /// Closed-loop time per path, after `closed_warmup`.
    pub closed: std::time::Duration,
    /// Closed-loop warm-up per path (not recorded).
    pub closed_warmup: std::time::Duration,
    /// Pending Runs and Pods of the pure scheduling pass.
    pub scheduling: (usize, usize),
    /// Runs of the burst on the API server.
    pub burst: usize,
    /// Sessions of the pool-refill burst.
    pub pool_sessions: usize,
    /// Task Runs created at once, one burst per size.
    pub task_bursts: Vec<usize>,
    /// Tasks one at a time on `krt up`.
    pub task_samples: usize,
    /// Tasks one at a time on a cluster, each kind.
    pub node_task_samples: usize,
    /// The artifact exported and downloaded, bytes.
    pub artifact_bytes: u64,
    /// Repetitions of each artifact upload and download.
    pub artifact_reps: usize,
}

impl Sizes {
    /// From the flags.
    pub fn from_args(a: &Args) -> Self {
        let q = a.quick;
        Self {
            requests: a.requests.unwrap_or(if q { 300 } else { 2000 }),
            warmup: if q { 50 } else { 200 },
            reps: a.reps.unwrap_or(if q { 1 } else { 3 }),
            rate: a.rate.unwrap_or(200.0),
            open_requests: a.open_requests.unwrap_or(if q { 600 } else { 10_000 }),
            spawn: if q { 20 } else { 100 },
            auth_misses: if q { 100 } else { 1000 },
            kube_requests: if q { 500 } else { 10_000 },
            propagation: if q { 5 } else { 20 },
            table_entries: a.table_entries.unwrap_or(if q { 20_000 } else { 100_000 }),
            session: if q { 50 } else { 300 },
            closed: std::time::Duration::from_secs(a.closed_secs.unwrap_or(if q { 3 } else { 10 })),
            closed_warmup: std::time::Duration::from_secs(if q { 1 } else { 2 }),
            scheduling: if q { (1000, 50) } else { (10_000, 500) },
            burst: if q { 100 } else { 1000 },
            pool_sessions: if q { 10 } else { 50 },
            task_bursts: if a.tasks.is_empty() {
                if q { vec![10] } else { vec![100, 1000] }
            } else {
                a.tasks.iter().map(|&n| n as usize).collect()
            },
            task_samples: a.task_samples.unwrap_or(if q { 5 } else { 50 }) as usize,
            node_task_samples: a.task_samples.unwrap_or(if q { 3 } else { 10 }) as usize,
            artifact_bytes: a.artifact_mib.unwrap_or(if q { 16 } else { 256 }) << 20,
            artifact_reps: a.artifact_reps.unwrap_or(if q { 2 } else { 5 }) as usize,
        }
    }
}

/// Runs the benchmark and prints the Markdown report.
pub async fn run(args: Args) -> anyhow::Result<report::Report> {
    let report = scenarios::run(&args, &Sizes::from_args(&args)).await?;
    println!("{}", scenarios::markdown(&args, &report));
    if let Some(p) = &args.json {
        std::fs::write(p, serde_json::to_vec_pretty(&report)?)?;
    }
    if let Some(p) = &args.plot {
        std::fs::write(
            p,
            report.svg(&[
                "direct-python",
                "gateway-python",
                "nginx-python",
                "haproxy-python",
                "gateway-bash",
                "open-direct",
                "open-gateway",
                "open-nginx",
                "open-haproxy",
                "auth-hit",
                "auth-miss",
                "auth-disabled",
                "session-exec-true",
                "session-write-4k",
                "session-read-4k",
            ]),
        )?;
    }
    Ok(report)
}
