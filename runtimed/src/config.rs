//! runtimed's configuration: flags ([`Args`], each also read from a
//! `KRUNTIMES_RUNTIMED_*` variable), validated once into a typed
//! [`Config`] ([`Args::into_config`]); nothing past this module reads a
//! flag. Shared by the `runtimed` binary and `krt runtimed`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use kruntimes_process::listen::Limits;

use crate::dataplane::PeerPolicy;
use crate::function::EngineConfig;

/// Bound on loading a handler at registration.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// runtimed flags. Defaults are documented once, here.
#[derive(Debug, Clone, Parser)]
#[command(name = "runtimed", about = "kruntimes per-Pod daemon")]
pub struct Args {
    /// Instance (Pod) name, reported as X-Kruntimes-Served-By.
    #[arg(long, env = "KRUNTIMES_RUNTIMED_NAME")]
    pub name: String,
    /// Instance UID; a new random one per process start when omitted.
    #[arg(long, env = "KRUNTIMES_RUNTIMED_POD_UID")]
    pub pod_uid: Option<String>,
    /// Listen address for gRPC and the dataplane (one TLS port). Outside
    /// Kubernetes, a listening socket handed over by systemd's socket
    /// activation (`LISTEN_FDS=1`, descriptor 3; `krt up` starts runtimed
    /// so) is served instead, and must be bound to this address (any port
    /// when it names port 0).
    #[arg(
        long,
        env = "KRUNTIMES_RUNTIMED_LISTEN",
        default_value = "127.0.0.1:7443"
    )]
    pub listen: SocketAddr,
    /// Address published to the gateway (defaults to --listen).
    #[arg(long, env = "KRUNTIMES_RUNTIMED_ADVERTISE")]
    pub advertise: Option<String>,
    /// Serving certificate (PEM).
    #[arg(long, env = "KRUNTIMES_RUNTIMED_TLS_CERT")]
    pub tls_cert: PathBuf,
    /// Serving key (PEM).
    #[arg(long, env = "KRUNTIMES_RUNTIMED_TLS_KEY")]
    pub tls_key: PathBuf,
    /// Internal CA that client certificates must chain to.
    #[arg(long, env = "KRUNTIMES_RUNTIMED_CLIENT_CA")]
    pub client_ca: PathBuf,
    /// The serving certificate files are re-read when their directory
    /// changes (inotify) and at least this often, seconds: the backstop for
    /// file systems without change notifications. New handshakes get a
    /// rotated pair; connections are kept.
    #[arg(long, env = "KRUNTIMES_RUNTIMED_TLS_RELOAD_SECS", default_value_t = 60,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub tls_reload_secs: u64,
    /// Client CNs allowed on the dataplane.
    #[arg(
        long,
        env = "KRUNTIMES_RUNTIMED_DATAPLANE_CLIENTS",
        value_delimiter = ',',
        default_value = "kruntimes-gateway"
    )]
    pub dataplane_clients: Vec<String>,
    /// Client CNs allowed to call the `Agent` service (the control plane).
    #[arg(
        long,
        env = "KRUNTIMES_RUNTIMED_CONTROL_CLIENTS",
        value_delimiter = ',',
        default_value = "kruntimes-control-plane"
    )]
    pub control_clients: Vec<String>,
    /// Unix socket of this Pod's Runtime Server, which runs the user code.
    #[arg(long, env = "KRUNTIMES_RUNTIMED_RUNTIME_SERVER")]
    pub runtime_server: PathBuf,
    /// Ignored: the Runtime Server owns the Runs' working directories
    /// (accepted so older Pod specs keep starting).
    #[arg(long, env = "KRUNTIMES_RUNTIMED_WORK_ROOT", hide = true)]
    pub work_root: Option<PathBuf>,
    /// Default invocation timeout, seconds.
    #[arg(long, env = "KRUNTIMES_RUNTIMED_DEFAULT_TIMEOUT_SECS", default_value_t = 30,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub default_timeout_secs: u64,
    /// Maximum invocation timeout, seconds.
    #[arg(long, env = "KRUNTIMES_RUNTIMED_MAX_TIMEOUT_SECS", default_value_t = 300,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub max_timeout_secs: u64,
    /// Open connections to the TLS port at most; one more is closed at once.
    #[arg(long, env = "KRUNTIMES_RUNTIMED_MAX_CONNECTIONS", default_value_t = 1024,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub max_connections: usize,
    /// Bound on a connection's TLS handshake, milliseconds.
    #[arg(long, env = "KRUNTIMES_RUNTIMED_HANDSHAKE_TIMEOUT_MS", default_value_t = 10_000,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub handshake_timeout_ms: u64,
    /// Listen address of `GET /metrics` (plain HTTP; keep it off the
    /// public network).
    #[arg(long, env = "KRUNTIMES_RUNTIMED_METRICS_LISTEN")]
    pub metrics_listen: Option<SocketAddr>,
    /// Bound on reading an HTTP/1 request's headers, milliseconds.
    #[arg(long, env = "KRUNTIMES_RUNTIMED_HEADER_TIMEOUT_MS", default_value_t = 10_000,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub header_timeout_ms: u64,
    /// The built-in backend of this Pod's Runtime (`Runtime.spec.backend`);
    /// by default chosen from each Run's runtime name.
    #[arg(long, env = "KRUNTIMES_RUNTIMED_BACKEND")]
    pub backend: Option<kruntimes_proto::runtime::Backend>,
    /// Kubernetes mode: watch the Runs assigned to this Pod (by
    /// `--pod-uid`), register them and report their status.
    #[arg(long, env = "KRUNTIMES_RUNTIMED_KUBERNETES")]
    pub kubernetes: bool,
    /// Namespace of this Pod (Kubernetes mode).
    #[arg(long, env = "KRUNTIMES_RUNTIMED_POD_NAMESPACE")]
    pub pod_namespace: Option<String>,
    /// Kubeconfig (Kubernetes mode); in-cluster configuration when omitted.
    #[arg(long, env = "KRUNTIMES_RUNTIMED_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// The Runtime's artifact store, as JSON (`{"directory":{"path":…}}` or
    /// `{"s3":{"endpoint":…,"bucket":…,"prefix":…}}`); S3 credentials come
    /// only from `KRUNTIMES_ARTIFACT_ACCESS_KEY_ID` and
    /// `KRUNTIMES_ARTIFACT_SECRET_ACCESS_KEY` (or the Pod's own identity).
    /// Without it, tasks get no artifacts directory.
    #[arg(long, env = "KRUNTIMES_RUNTIMED_ARTIFACT_STORE")]
    pub artifact_store: Option<String>,
    /// How long an export of artifacts is tried (the store away) before the
    /// Run fails with `ArtifactExportFailed`, seconds.
    #[arg(long, env = "KRUNTIMES_RUNTIMED_ARTIFACT_EXPORT_TIMEOUT_SECS", default_value_t = 300,
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub artifact_export_timeout_secs: u64,
    /// Most files one export takes.
    #[arg(long, env = "KRUNTIMES_RUNTIMED_ARTIFACT_MAX_FILES", default_value_t = 1000,
          value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub artifact_max_files: u32,
    /// Largest artifact, bytes.
    #[arg(long, env = "KRUNTIMES_RUNTIMED_ARTIFACT_MAX_FILE_BYTES", default_value_t = 1 << 30)]
    pub artifact_max_file_bytes: u64,
    /// Largest sum of one export's artifacts, bytes.
    #[arg(long, env = "KRUNTIMES_RUNTIMED_ARTIFACT_MAX_TOTAL_BYTES", default_value_t = 4 << 30)]
    pub artifact_max_total_bytes: u64,
    /// How long the artifacts of this Runtime's Runs are kept after the
    /// Run ended, seconds (Kubernetes mode, applied by the sweep;
    /// `Runtime.spec.artifactStore.retainAfterRunSeconds`). Default: until
    /// the Run is deleted.
    #[arg(long, env = "KRUNTIMES_RUNTIMED_ARTIFACT_RETAIN_SECS")]
    pub artifact_retain_secs: Option<u64>,
    /// Time between two sweeps of the artifact store, seconds (Kubernetes
    /// mode; one runtimed of the Runtime sweeps: retention and orphans).
    #[arg(long, env = "KRUNTIMES_RUNTIMED_ARTIFACT_SWEEP_SECS", default_value_t = 60,
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub artifact_sweep_secs: u64,
    /// How long a Run UID found in the store must be unknown to the API
    /// server before its artifacts are deleted as an orphan, seconds.
    #[arg(long, env = "KRUNTIMES_RUNTIMED_ARTIFACT_ORPHAN_GRACE_SECS", default_value_t = 600,
          value_parser = clap::value_parser!(u64).range(0..=31_536_000))]
    pub artifact_orphan_grace_secs: u64,
    /// The Runtime this Pod belongs to (Kubernetes mode; the Pod's
    /// `kruntimes.io/runtime` label): which Pods it is elected among to
    /// sweep the artifact store, and whose retention it applies.
    #[arg(long, env = "KRUNTIMES_RUNTIMED_RUNTIME_NAME")]
    pub runtime_name: Option<String>,
    /// The operator's system namespace (Kubernetes mode), whose Runtimes
    /// serve the namespaces without one of the name: which Runs the sweep
    /// applies this Runtime's retention to. Unset: its own namespace's.
    #[arg(long, env = "KRUNTIMES_RUNTIMED_SYSTEM_NAMESPACE")]
    pub system_namespace: Option<String>,
}

/// Why the flags do not make a runtimed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// Kubernetes mode without its Pod's identity.
    #[error("--kubernetes needs --pod-uid and --pod-namespace (from the downward API)")]
    NoPodIdentity,
    /// Kubernetes mode with nothing to publish.
    #[error("--kubernetes needs --advertise or a fixed --listen port")]
    NoAdvertisedAddress,
    /// An address to publish that is not one.
    #[error("--advertise {0:?} is not HOST:PORT or [IPV6]:PORT")]
    BadAdvertise(String),
    /// The artifact store cannot be used.
    #[error("--artifact-store: {0}")]
    ArtifactStore(String),
    /// A default invocation timeout over the maximum.
    #[error("--default-timeout-secs ({default}) is over --max-timeout-secs ({max})")]
    DefaultOverMax {
        /// The default.
        default: u64,
        /// The maximum.
        max: u64,
    },
}

/// runtimed, validated: what [`crate::run`] builds from.
#[derive(Debug, Clone)]
pub struct Config {
    /// Instance (Pod) name.
    pub name: String,
    /// Instance UID (a new random one per start when unset).
    pub pod_uid: Option<String>,
    /// Where to listen.
    pub listen: SocketAddr,
    /// What to publish to the gateway (else the bound address).
    pub advertise: Option<String>,
    /// The serving certificate and the CA clients chain to.
    pub tls: TlsConfig,
    /// Who may call what.
    pub peers: PeerPolicy,
    /// The Runtime Server's socket.
    pub runtime_server: PathBuf,
    /// Invocation bounds and the backend.
    pub engine: EngineConfig,
    /// Connection bound and handshake deadline.
    pub limits: Limits,
    /// Bound on an HTTP/1 request's headers.
    pub header_timeout: Duration,
    /// Where metrics are served.
    pub metrics_listen: Option<SocketAddr>,
    /// Kubernetes mode, when on.
    pub kubernetes: Option<KubernetesConfig>,
    /// The Runtime's artifact store, when it has one.
    pub artifacts: Option<std::sync::Arc<crate::artifacts::Artifacts>>,
}

/// The serving certificate and the CA clients chain to.
#[derive(Debug, Clone)]
pub struct TlsConfig {
    /// Certificate (PEM).
    pub cert: PathBuf,
    /// Key (PEM).
    pub key: PathBuf,
    /// Client CA (PEM).
    pub client_ca: PathBuf,
    /// How often the files are re-read at the latest.
    pub reload: Duration,
}

/// Kubernetes mode: the Pod runtimed plays and how to reach the API.
#[derive(Debug, Clone)]
pub struct KubernetesConfig {
    /// The Pod's namespace.
    pub pod_namespace: String,
    /// Kubeconfig (else the in-cluster configuration).
    pub kubeconfig: Option<PathBuf>,
    /// The Pod's Runtime (`None`: this runtimed never sweeps the store).
    pub runtime: Option<String>,
    /// The operator's system namespace, when given.
    pub system_namespace: Option<String>,
}

impl Args {
    /// Validates the flags once into runtimed's [`Config`].
    pub fn into_config(self) -> Result<Config, ConfigError> {
        let kubernetes = if self.kubernetes {
            let (Some(pod_namespace), Some(_)) = (self.pod_namespace, &self.pod_uid) else {
                return Err(ConfigError::NoPodIdentity);
            };
            if self.advertise.is_none() && self.listen.port() == 0 {
                return Err(ConfigError::NoAdvertisedAddress);
            }
            Some(KubernetesConfig {
                pod_namespace,
                kubeconfig: self.kubeconfig,
                runtime: self.runtime_name.filter(|r| !r.is_empty()),
                system_namespace: self.system_namespace.filter(|n| !n.is_empty()),
            })
        } else {
            None
        };
        if self.default_timeout_secs > self.max_timeout_secs {
            return Err(ConfigError::DefaultOverMax {
                default: self.default_timeout_secs,
                max: self.max_timeout_secs,
            });
        }
        let artifacts = match self
            .artifact_store
            .as_deref()
            .filter(|s| !s.trim().is_empty())
        {
            None => None,
            Some(json) => {
                let store = kruntimes_artifacts::StoreConfig::parse(json)
                    .map_err(ConfigError::ArtifactStore)?;
                let credentials = kruntimes_artifacts::Credentials::from_env()
                    .map_err(ConfigError::ArtifactStore)?;
                let store = kruntimes_artifacts::Store::open(&store, credentials)
                    .map_err(|e| ConfigError::ArtifactStore(e.to_string()))?;
                Some(std::sync::Arc::new(crate::artifacts::Artifacts {
                    store,
                    limits: kruntimes_artifacts::Limits {
                        max_files: self.artifact_max_files,
                        max_file_bytes: self.artifact_max_file_bytes,
                        max_total_bytes: self.artifact_max_total_bytes,
                    },
                    deadline: Duration::from_secs(self.artifact_export_timeout_secs),
                    retain: self.artifact_retain_secs.map(Duration::from_secs),
                    sweep_every: Duration::from_secs(self.artifact_sweep_secs),
                    orphan_grace: Duration::from_secs(self.artifact_orphan_grace_secs),
                }))
            }
        };
        Ok(Config {
            name: self.name,
            pod_uid: self.pod_uid,
            listen: self.listen,
            advertise: self.advertise.as_deref().map(advertised).transpose()?,
            tls: TlsConfig {
                cert: self.tls_cert,
                key: self.tls_key,
                client_ca: self.client_ca,
                reload: Duration::from_secs(self.tls_reload_secs),
            },
            peers: PeerPolicy {
                dataplane_clients: self.dataplane_clients,
                control_clients: self.control_clients,
            },
            runtime_server: self.runtime_server,
            engine: EngineConfig {
                default_timeout: Duration::from_secs(self.default_timeout_secs),
                max_timeout: Duration::from_secs(self.max_timeout_secs),
                start_timeout: START_TIMEOUT,
                backend: self.backend,
            },
            limits: Limits {
                max_connections: self.max_connections,
                handshake: Duration::from_millis(self.handshake_timeout_ms),
            },
            header_timeout: Duration::from_millis(self.header_timeout_ms),
            metrics_listen: self.metrics_listen,
            kubernetes,
            artifacts,
        })
    }
}

/// The address to publish for `--advertise`: `HOST:PORT` or `[IPV6]:PORT`
/// as given, and a bare `IPV6:PORT` — what `$(POD_IP):7443` expands to on
/// an IPv6 cluster — with the brackets it needs.
pub fn advertised(raw: &str) -> Result<String, ConfigError> {
    if raw.parse::<SocketAddr>().is_ok() {
        return Ok(raw.to_owned());
    }
    if let Some((host, port)) = raw.rsplit_once(':')
        && let (Ok(ip), Ok(port)) = (host.parse::<std::net::Ipv6Addr>(), port.parse::<u16>())
    {
        return Ok(SocketAddr::from((ip, port)).to_string());
    }
    match raw.rsplit_once(':') {
        Some((host, port))
            if !host.is_empty() && !host.contains(':') && port.parse::<u16>().is_ok() =>
        {
            Ok(raw.to_owned())
        }
        _ => Err(ConfigError::BadAdvertise(raw.to_owned())),
    }
}

#[cfg(test)]
mod tests;
