//! `krt up`'s flags, and the pool they describe once checked against each
//! other.

use std::path::PathBuf;
use std::time::Duration;

use kruntimes_operator::embedded::{InstancePool, Resources};

/// `krt up` options.
#[derive(Debug, Clone, clap::Args)]
pub struct UpArgs {
    /// A directory of Run manifests of your own, watched beside
    /// STATE_DIR/runs (where `krt apply`, `krt session create` and the SDKs
    /// write theirs); krt never writes into it.
    #[arg(long)]
    pub runs: Option<PathBuf>,
    /// Gateway HTTPS listen address.
    #[arg(long, default_value = "127.0.0.1:8443")]
    pub gateway_addr: String,
    /// Optional plain HTTP listener of the gateway.
    #[arg(long)]
    pub gateway_http_addr: Option<String>,
    /// runtimed instances started at once, and never fewer (the pool's
    /// floor; two: the README's two example Runs spread over them).
    #[arg(long, default_value_t = 2)]
    pub runtimed: usize,
    /// Free instances kept beside the busy ones: when a Run takes one (a
    /// sandbox takes a whole one), another starts.
    #[arg(long, default_value_t = 1)]
    pub min_idle: u32,
    /// Never more runtimed instances than this (equal to `--runtimed`: a
    /// fixed set).
    #[arg(long, default_value_t = 16)]
    pub max_runtimed: usize,
    /// How long instances beyond the need stay before they stop, seconds.
    #[arg(long, default_value_t = 60)]
    pub scale_down_delay_secs: u64,
    /// Loopback address the runtimed instances listen on: `127.0.0.1`, or
    /// `::1` for an IPv6 stack (their addresses are then `[::1]:PORT`).
    #[arg(long, default_value = "127.0.0.1")]
    pub runtimed_ip: std::net::IpAddr,
    /// `runs` capacity of each runtimed instance.
    #[arg(long, default_value_t = 8)]
    pub capacity: u32,
    /// Resources of each instance, which its Runs'
    /// `spec.resources.requests` are counted against, as
    /// `NAME=QUANTITY,...` (e.g. `cpu=2,memory=4Gi`); without it they are
    /// not counted.
    #[arg(long, value_parser = parse_resources)]
    pub resources: Option<Resources>,
    /// Lifetime of the generated client token, hours.
    #[arg(long, default_value_t = 24)]
    pub token_ttl_hours: u64,
    /// How long a lost runtimed may stay away before its Runs move, seconds.
    #[arg(long, default_value_t = 5)]
    pub owner_grace_secs: u64,
    /// Gateway worker threads, each serving the connections handed to it
    /// with its own upstream pool. Two measured best on 2 cores, where the
    /// runtimed instances and their workers share the cores with it
    /// (docs/benchmarks.md, "Worker threads").
    #[arg(long, default_value_t = 2)]
    pub gateway_threads: usize,
    /// Whether the gateway logs one line per invoke.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub gateway_access_log: bool,
    /// Gateway limit of requests in flight (503 `Overloaded` beyond).
    #[arg(long, default_value_t = 4096)]
    pub max_in_flight: usize,
    /// Authenticate and authorize callers against this Kubernetes cluster
    /// (TokenReview + SubjectAccessReview, as the gateway's own identity in
    /// this kubeconfig) instead of the embedded tokens and policy.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Extra flag passed to the gateway as is (repeatable), for example
    /// `--gateway-flag=--authz-allowed-ttl-secs=10`.
    #[arg(long = "gateway-flag", allow_hyphen_values = true)]
    pub gateway_flags: Vec<String>,
    /// Extra flag passed to every runtimed as is (repeatable), for example
    /// `--runtimed-flag=--max-connections=256`.
    #[arg(long = "runtimed-flag", allow_hyphen_values = true)]
    pub runtimed_flags: Vec<String>,
    /// Where task Runs' artifacts go: a directory (default
    /// STATE_DIR/artifacts), `s3://BUCKET[/PREFIX]` (with
    /// `--artifacts-endpoint`; credentials from
    /// `KRUNTIMES_ARTIFACT_ACCESS_KEY_ID` and
    /// `KRUNTIMES_ARTIFACT_SECRET_ACCESS_KEY`, read by runtimed only), or
    /// `off`.
    #[arg(long)]
    pub artifacts: Option<String>,
    /// The S3 endpoint of `--artifacts s3://…` (`http://` or `https://`;
    /// omitted: AWS S3).
    #[arg(long)]
    pub artifacts_endpoint: Option<String>,
    /// The S3 region of `--artifacts s3://…`.
    #[arg(long, default_value = "us-east-1")]
    pub artifacts_region: String,
    /// How long a Run's artifacts are kept after it ends, seconds (default:
    /// until the Run is deleted).
    #[arg(long)]
    pub artifacts_retain_secs: Option<u64>,
    /// Time between two sweeps of the artifact store (retention, and the
    /// artifacts of Runs that no longer exist), seconds.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..))]
    pub artifacts_sweep_secs: u64,
    /// How long a Run must be gone before the sweep deletes its
    /// artifacts, seconds.
    #[arg(long, default_value_t = 600)]
    pub artifacts_orphan_grace_secs: u64,
    /// Exit when the parent process exits (used by test harnesses).
    #[arg(long, hide = true)]
    pub exit_with_parent: bool,
}

/// `--resources`: `NAME=QUANTITY` pairs, comma-separated.
fn parse_resources(text: &str) -> Result<Resources, String> {
    let pairs = text
        .split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|pair| {
            pair.split_once('=')
                .map(|(n, q)| (n.trim(), q.trim()))
                .ok_or_else(|| {
                    format!("{pair:?} is not NAME=QUANTITY (for example cpu=2,memory=4Gi)")
                })
        })
        .collect::<Result<Vec<_>, _>>()?;
    kruntimes_api::quantity::resources_of(pairs, "--resources")
}

impl UpArgs {
    /// The artifact store `--artifacts` names (`None`: `off`), the
    /// directory one under `state` by default.
    pub(super) fn artifact_store(
        &self,
        state: &std::path::Path,
    ) -> anyhow::Result<Option<kruntimes_artifacts::StoreConfig>> {
        use kruntimes_artifacts::{S3Config, StoreConfig};
        let spec = self.artifacts.as_deref().map(str::trim);
        if self.artifacts_endpoint.is_some() && !spec.is_some_and(|s| s.starts_with("s3://")) {
            anyhow::bail!("--artifacts-endpoint needs --artifacts s3://BUCKET[/PREFIX]");
        }
        Ok(match spec {
            Some("off") => None,
            None | Some("") => Some(StoreConfig::Directory {
                path: state.join("artifacts"),
            }),
            Some(s) => match s.strip_prefix("s3://") {
                Some(rest) => {
                    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
                    if bucket.is_empty() {
                        anyhow::bail!("--artifacts {s:?} names no bucket (s3://BUCKET[/PREFIX])");
                    }
                    Some(StoreConfig::S3(S3Config {
                        endpoint: self.artifacts_endpoint.clone(),
                        bucket: bucket.to_owned(),
                        prefix: Some(prefix.trim_matches('/').to_owned()).filter(|p| !p.is_empty()),
                        region: Some(self.artifacts_region.clone()),
                        path_style: Some(true),
                    }))
                }
                None if s.contains("://") => {
                    anyhow::bail!("--artifacts {s:?}: only directories and s3:// stores")
                }
                None => {
                    let dir = std::path::PathBuf::from(s);
                    std::fs::create_dir_all(&dir)?;
                    Some(StoreConfig::Directory {
                        path: dir.canonicalize()?,
                    })
                }
            },
        })
    }

    /// The pool's rules, when it follows demand (`--max-runtimed` above
    /// `--runtimed`), or why the flags contradict each other.
    pub(super) fn pool(&self) -> anyhow::Result<Option<InstancePool>> {
        if self.max_runtimed < self.runtimed {
            anyhow::bail!(
                "--max-runtimed {} is below --runtimed {}: the pool can never be smaller than its floor",
                self.max_runtimed,
                self.runtimed
            );
        }
        if self.max_runtimed == self.runtimed {
            return Ok(None);
        }
        let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        Ok(Some(InstancePool {
            spec: kruntimes_operator::embedded::PoolSpec {
                min_replicas: count(self.runtimed),
                min_idle: self.min_idle,
                max_replicas: count(self.max_runtimed),
                scale_down_delay: Duration::from_secs(self.scale_down_delay_secs),
            },
            capacity: kruntimes_operator::embedded::Capacity {
                runs: self.capacity,
                resources: self.resources.clone().unwrap_or_default(),
            },
        }))
    }
}
