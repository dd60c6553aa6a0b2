//! The operator's configuration (Kubernetes mode): flags ([`Args`], each
//! also read from a `KRUNTIMES_OPERATOR_*` variable), validated once into a
//! typed [`Config`] ([`Args::into_config`]); nothing past this module reads
//! a flag. Shared by the binary and `krt operator`.

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use kruntimes_certs::TlsFiles;
use kruntimes_certs::managed::Lifetimes;

use crate::cluster::certificates::{ManagedTls, PublicTls};
use crate::cluster::leader::LeaderElection;
use crate::cluster::workloads::{self, PodSettings};

/// Operator flags. Defaults are documented once, here.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "kruntimes-operator",
    about = "kruntimes operator (Kubernetes mode)"
)]
pub struct Args {
    /// Kubeconfig; in-cluster configuration when omitted.
    #[arg(long, env = "KRUNTIMES_OPERATOR_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Public base URL of the gateway, e.g. https://kruntimes-gateway.kruntimes-system.svc
    #[arg(long, env = "KRUNTIMES_OPERATOR_GATEWAY_URL")]
    pub gateway_url: String,
    /// ConfigMap `namespace/name` whose `ca.crt` is published as
    /// `status.endpoint.caBundle`.
    #[arg(long, env = "KRUNTIMES_OPERATOR_CA_CONFIGMAP")]
    pub ca_configmap: Option<String>,
    /// Namespace of shared Runtimes.
    #[arg(
        long,
        env = "KRUNTIMES_OPERATOR_SYSTEM_NAMESPACE",
        default_value = "kruntimes-system"
    )]
    pub system_namespace: String,
    /// Image of the `runtimed` container of every Runtime Pod (its
    /// entrypoint must be `runtimed`); the Runtime Server's image is each
    /// Runtime's `spec.image`. Defaults to runtimed of the operator's version.
    #[arg(
        long,
        env = "KRUNTIMES_OPERATOR_RUNTIMED_IMAGE",
        default_value = workloads::DEFAULT_RUNTIMED_IMAGE
    )]
    pub runtimed_image: String,
    /// Secret with the internal TLS material mounted into Runtime Pods.
    #[arg(
        long,
        env = "KRUNTIMES_OPERATOR_INTERNAL_TLS_SECRET",
        default_value = "kruntimes-runtimed-tls"
    )]
    pub internal_tls_secret: String,
    /// ServiceAccount of Runtime Pods.
    #[arg(
        long,
        env = "KRUNTIMES_OPERATOR_RUNTIME_SERVICE_ACCOUNT",
        default_value = "kruntimes-runtime"
    )]
    pub runtime_service_account: String,
    /// Listen address of the ownership watch (gRPC, mTLS).
    #[arg(
        long,
        env = "KRUNTIMES_OPERATOR_WATCH_LISTEN",
        default_value = "0.0.0.0:7444"
    )]
    pub watch_listen: String,
    /// Listen address of `GET /metrics` (plain HTTP; keep it off the
    /// public network).
    #[arg(long, env = "KRUNTIMES_OPERATOR_METRICS_LISTEN")]
    pub metrics_listen: Option<String>,
    /// Serving certificate of the watch (PEM); with `--internal-tls=managed`
    /// the operator issues its own.
    #[arg(
        long,
        env = "KRUNTIMES_OPERATOR_TLS_CERT",
        required_if_eq("internal_tls", "files")
    )]
    pub tls_cert: Option<PathBuf>,
    /// Serving key of the watch (PEM).
    #[arg(
        long,
        env = "KRUNTIMES_OPERATOR_TLS_KEY",
        required_if_eq("internal_tls", "files")
    )]
    pub tls_key: Option<PathBuf>,
    /// Client certificate CNs allowed to watch the ownership table.
    #[arg(
        long,
        env = "KRUNTIMES_OPERATOR_WATCH_CLIENTS",
        value_delimiter = ',',
        default_value = "kruntimes-gateway"
    )]
    pub watch_clients: Vec<String>,
    /// CA that gateway client certificates chain to (PEM).
    #[arg(
        long,
        env = "KRUNTIMES_OPERATOR_CLIENT_CA",
        required_if_eq("internal_tls", "files")
    )]
    pub client_ca: Option<PathBuf>,
    /// Internal TLS: `files` — the watch's material from `--tls-cert`,
    /// `--tls-key`, `--client-ca`, every Secret made by someone else;
    /// `managed` — the operator keeps the internal CA and every component's
    /// certificate in Secrets of `--ca-configmap`'s namespace (created when
    /// missing, renewed in the last third of their lifetime) and serves the
    /// watch with its own.
    #[arg(
        long,
        env = "KRUNTIMES_OPERATOR_INTERNAL_TLS",
        value_enum,
        default_value = "files"
    )]
    pub internal_tls: InternalTls,
    /// With `--internal-tls=managed`: `managed` issues the public CA and the
    /// gateway's serving certificate too; `provided` only publishes the
    /// `ca.crt` of `--gateway-tls-secret` (an existing Secret, cert-manager);
    /// `none` for a plain-HTTP gateway.
    #[arg(
        long,
        env = "KRUNTIMES_OPERATOR_PUBLIC_TLS",
        value_enum,
        default_value = "managed"
    )]
    pub public_tls: PublicTlsArg,
    /// Secret of the public CA (managed public TLS).
    #[arg(
        long,
        env = "KRUNTIMES_OPERATOR_PUBLIC_CA_SECRET",
        default_value = "kruntimes-public-ca"
    )]
    pub public_ca_secret: String,
    /// Secret (`kubernetes.io/tls`) of the gateway's serving certificate.
    #[arg(
        long,
        env = "KRUNTIMES_OPERATOR_GATEWAY_TLS_SECRET",
        default_value = "kruntimes-gateway-tls"
    )]
    pub gateway_tls_secret: String,
    /// Names (DNS or IP) of the gateway's serving certificate.
    #[arg(long, env = "KRUNTIMES_OPERATOR_GATEWAY_NAMES", value_delimiter = ',')]
    pub gateway_names: Vec<String>,
    /// Prefix of the internal Secrets: `-ca`, `-gateway` (the gateway's
    /// client certificate), `-operator` (the watch's).
    #[arg(
        long,
        env = "KRUNTIMES_OPERATOR_INTERNAL_TLS_PREFIX",
        default_value = "kruntimes-internal"
    )]
    pub internal_tls_prefix: String,
    /// A Deployment in the operator's namespace (its own) that owns the
    /// Secrets and the ConfigMap of managed TLS, so they are removed with the
    /// installation; runtimed's Secrets in other namespaces are owned by
    /// their Runtimes. Unset: they outlive the operator.
    #[arg(long, env = "KRUNTIMES_OPERATOR_OWNER_DEPLOYMENT")]
    pub owner_deployment: Option<String>,
    /// With --owner-deployment: own nothing instead — the owner references
    /// to that Deployment (and to Runtimes) are removed, so the CAs and
    /// certificates outlive an uninstall.
    #[arg(
        long,
        env = "KRUNTIMES_OPERATOR_KEEP_AFTER_UNINSTALL",
        requires = "owner_deployment"
    )]
    pub keep_after_uninstall: bool,
    /// Extra DNS names of the watch's serving certificate (its Service).
    #[arg(long, env = "KRUNTIMES_OPERATOR_WATCH_NAMES", value_delimiter = ',')]
    pub watch_names: Vec<String>,
    /// Where the operator writes its own watch material (managed TLS).
    #[arg(
        long,
        env = "KRUNTIMES_OPERATOR_MANAGED_TLS_DIR",
        default_value = "/tmp/kruntimes-operator-tls"
    )]
    pub managed_tls_dir: PathBuf,
    /// How often managed certificates are checked, seconds.
    #[arg(
        long,
        env = "KRUNTIMES_OPERATOR_CERTIFICATE_CHECK_SECS",
        default_value_t = 3600,
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    pub certificate_check_secs: u64,
    /// Validity of issued leaf certificates, days.
    #[arg(
        long,
        env = "KRUNTIMES_OPERATOR_LEAF_VALIDITY_DAYS",
        default_value_t = 90,
        value_parser = clap::value_parser!(i64).range(1..=36500)
    )]
    pub leaf_validity_days: i64,
    /// Validity of issued CAs, days.
    #[arg(
        long,
        env = "KRUNTIMES_OPERATOR_CA_VALIDITY_DAYS",
        default_value_t = 3650,
        value_parser = clap::value_parser!(i64).range(1..=36500)
    )]
    pub ca_validity_days: i64,
    /// Elect one leader among the operator's replicas on the Lease
    /// `kruntimes-operator` of the system namespace: only the leader decides
    /// and writes; every replica serves the ownership watch.
    #[arg(long, env = "KRUNTIMES_OPERATOR_LEADER_ELECTION")]
    pub leader_election: bool,
    /// This replica's identity in the election (default: `$POD_NAME`, else
    /// the host name).
    #[arg(long, env = "KRUNTIMES_OPERATOR_LEADER_IDENTITY")]
    pub leader_identity: Option<String>,
    /// How long the leader's Lease lasts after its last renewal, seconds:
    /// how long a failover takes at most.
    #[arg(
        long,
        env = "KRUNTIMES_OPERATOR_LEASE_DURATION_SECS",
        default_value_t = 15,
        value_parser = clap::value_parser!(u64).range(3..=300)
    )]
    pub lease_duration_secs: u64,
}

/// Where the operator's internal TLS comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum InternalTls {
    /// Files someone else provides.
    Files,
    /// Secrets the operator keeps.
    Managed,
}

/// Who issues the gateway's serving certificate (managed internal TLS).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PublicTlsArg {
    /// The operator.
    Managed,
    /// Someone else; its `ca.crt` is published.
    Provided,
    /// No public TLS (a plain-HTTP gateway).
    None,
}

/// Why the flags do not make an operator.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// `--ca-configmap` is not `namespace/name`.
    #[error("--ca-configmap must be namespace/name")]
    BadCaConfigMap,
    /// Managed TLS with nowhere to publish the CA bundle.
    #[error(
        "--internal-tls=managed needs --ca-configmap=namespace/name (where the CA bundle is published)"
    )]
    ManagedWithoutConfigMap,
    /// Leaves that could not be renewed long before their CA.
    #[error("--leaf-validity-days ({leaf}) must be at most a third of --ca-validity-days ({ca})")]
    LeafOutlivesCa {
        /// Leaf validity, days.
        leaf: i64,
        /// CA validity, days.
        ca: i64,
    },
    /// Files TLS without its files.
    #[error("{0} is required with --internal-tls=files")]
    Missing(&'static str),
}

/// The operator, validated: what [`crate::run`] builds from.
#[derive(Debug, Clone)]
pub struct Config {
    /// Kubeconfig (else the in-cluster configuration).
    pub kubeconfig: Option<PathBuf>,
    /// Public base URL of the gateway.
    pub gateway_url: String,
    /// The ConfigMap whose `ca.crt` is published, as `(namespace, name)`.
    pub ca_configmap: Option<(String, String)>,
    /// Namespace of shared Runtimes.
    pub system_namespace: String,
    /// What Runtime Pods are rendered with.
    pub pods: PodSettings,
    /// Where the ownership watch listens.
    pub watch_listen: String,
    /// Client CNs allowed to watch.
    pub watch_clients: Vec<String>,
    /// Where metrics are served.
    pub metrics_listen: Option<String>,
    /// Where the internal TLS comes from.
    pub internal_tls: InternalTlsConfig,
    /// The leader election, when replicas elect one.
    pub leader_election: Option<LeaderElection>,
}

/// Where the operator's internal TLS comes from.
#[derive(Debug, Clone)]
pub enum InternalTlsConfig {
    /// Files someone else provides: the watch's serving pair and client CA.
    Files(TlsFiles),
    /// Secrets the operator keeps, its own material written to `dir` and
    /// checked every `check`.
    Managed {
        /// What it keeps (boxed: the larger variant by far).
        tls: Box<ManagedTls>,
        /// Where its own watch material is written.
        dir: PathBuf,
        /// How often the certificates are checked.
        check: Duration,
    },
}

impl Config {
    /// The managed-TLS settings, when `--internal-tls=managed`.
    pub fn managed_tls(&self) -> Option<&ManagedTls> {
        match &self.internal_tls {
            InternalTlsConfig::Managed { tls, .. } => Some(tls),
            InternalTlsConfig::Files(_) => None,
        }
    }
}

impl Args {
    /// Validates the flags once into the operator's [`Config`].
    pub fn into_config(self) -> Result<Config, ConfigError> {
        let ca_configmap = match &self.ca_configmap {
            Some(s) => Some(
                s.split_once('/')
                    .filter(|(ns, name)| !ns.is_empty() && !name.is_empty())
                    .map(|(ns, name)| (ns.to_owned(), name.to_owned()))
                    .ok_or(ConfigError::BadCaConfigMap)?,
            ),
            None => None,
        };
        let internal_tls = match self.internal_tls {
            InternalTls::Managed => {
                let (namespace, configmap) = ca_configmap
                    .clone()
                    .ok_or(ConfigError::ManagedWithoutConfigMap)?;
                // A leaf must be renewable (its last third) long before its
                // CA is.
                if self.leaf_validity_days * 3 > self.ca_validity_days {
                    return Err(ConfigError::LeafOutlivesCa {
                        leaf: self.leaf_validity_days,
                        ca: self.ca_validity_days,
                    });
                }
                InternalTlsConfig::Managed {
                    tls: Box::new(ManagedTls {
                        namespace,
                        public: match self.public_tls {
                            PublicTlsArg::Managed => PublicTls::Managed,
                            PublicTlsArg::Provided => PublicTls::Provided,
                            PublicTlsArg::None => PublicTls::None,
                        },
                        public_ca_secret: self.public_ca_secret,
                        gateway_secret: self.gateway_tls_secret,
                        gateway_names: self.gateway_names,
                        internal_prefix: self.internal_tls_prefix,
                        runtimed_secret: self.internal_tls_secret.clone(),
                        operator_names: self.watch_names,
                        ca_configmap: configmap,
                        lifetimes: Lifetimes {
                            ca_days: self.ca_validity_days,
                            leaf_days: self.leaf_validity_days,
                        },
                        owner_deployment: self.owner_deployment.clone(),
                        keep_after_uninstall: self.keep_after_uninstall,
                    }),
                    dir: self.managed_tls_dir,
                    check: Duration::from_secs(self.certificate_check_secs),
                }
            }
            InternalTls::Files => InternalTlsConfig::Files(TlsFiles {
                cert: self.tls_cert.ok_or(ConfigError::Missing("--tls-cert"))?,
                key: self.tls_key.ok_or(ConfigError::Missing("--tls-key"))?,
                ca: self.client_ca.ok_or(ConfigError::Missing("--client-ca"))?,
            }),
        };
        Ok(Config {
            kubeconfig: self.kubeconfig,
            gateway_url: self.gateway_url,
            ca_configmap,
            pods: PodSettings {
                runtimed_image: self.runtimed_image,
                internal_tls_secret: self.internal_tls_secret,
                service_account: self.runtime_service_account,
                system_namespace: self.system_namespace.clone(),
            },
            system_namespace: self.system_namespace,
            watch_listen: self.watch_listen,
            watch_clients: self.watch_clients,
            metrics_listen: self.metrics_listen,
            internal_tls,
            leader_election: self.leader_election.then(|| LeaderElection {
                identity: self
                    .leader_identity
                    .unwrap_or_else(crate::cluster::leader::default_identity),
                lease_duration: Duration::from_secs(self.lease_duration_secs),
                owner_deployment: self.owner_deployment.clone(),
            }),
        })
    }
}

#[cfg(test)]
mod tests;
