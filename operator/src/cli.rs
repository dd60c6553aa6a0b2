//! Flags and entry point of `kruntimes-operator` (Kubernetes mode), shared
//! by the binary and `krt operator`.

use std::path::PathBuf;

use crate::cluster::certificates::{self, ManagedTls, PublicTls};
use crate::cluster::workloads::{self, PodSettings};
use crate::cluster::{self, ClusterConfig};
use anyhow::Context as _;
use clap::Parser;
use kruntimes_certs::TlsFiles;
use kruntimes_certs::managed::Lifetimes;

/// Operator flags (also readable from `KRUNTIMES_OPERATOR_*` variables).
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
        default_value_t = 3600
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

/// The managed-TLS settings of `args`, when `--internal-tls=managed`.
pub fn managed_tls(args: &Args) -> anyhow::Result<Option<ManagedTls>> {
    if args.internal_tls != InternalTls::Managed {
        return Ok(None);
    }
    let (namespace, configmap) = args
        .ca_configmap
        .as_deref()
        .and_then(|s| s.split_once('/'))
        .context("--internal-tls=managed needs --ca-configmap=namespace/name (where the CA bundle is published)")?;
    // A leaf must be renewable (its last third) long before its CA is.
    anyhow::ensure!(
        args.leaf_validity_days.max(1) * 3 <= args.ca_validity_days.max(1),
        "--leaf-validity-days ({}) must be at most a third of --ca-validity-days ({})",
        args.leaf_validity_days,
        args.ca_validity_days
    );
    Ok(Some(ManagedTls {
        namespace: namespace.to_owned(),
        public: match args.public_tls {
            PublicTlsArg::Managed => PublicTls::Managed,
            PublicTlsArg::Provided => PublicTls::Provided,
            PublicTlsArg::None => PublicTls::None,
        },
        public_ca_secret: args.public_ca_secret.clone(),
        gateway_secret: args.gateway_tls_secret.clone(),
        gateway_names: args.gateway_names.clone(),
        internal_prefix: args.internal_tls_prefix.clone(),
        runtimed_secret: args.internal_tls_secret.clone(),
        operator_names: args.watch_names.clone(),
        ca_configmap: configmap.to_owned(),
        lifetimes: Lifetimes {
            ca_days: args.ca_validity_days.max(1),
            leaf_days: args.leaf_validity_days.max(1),
        },
        owner_deployment: args.owner_deployment.clone(),
        keep_after_uninstall: args.keep_after_uninstall,
    }))
}

/// Runs [`certificates::ensure`] until it succeeds (backing off 1 s → 30 s),
/// then writes the watch's own material.
async fn first_certificates(
    client: &kube::Client,
    tls: &ManagedTls,
    dir: &std::path::Path,
) -> anyhow::Result<()> {
    let mut wait = std::time::Duration::from_secs(1);
    loop {
        match certificates::ensure(client, tls).await {
            Ok(done) => {
                tracing::info!(issued = done.issued.len(), "managed certificates ready");
                return certificates::write_own(client, tls, dir).await;
            }
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), retry_in_s = wait.as_secs(), "managed certificates not ready");
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(std::time::Duration::from_secs(30));
            }
        }
    }
}

/// Runs the operator until SIGTERM or Ctrl-C.
pub async fn run(args: Args) -> anyhow::Result<()> {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    kruntimes_process::init_logging();
    kruntimes_process::confine::forbid_inspection()?;
    let client = kruntimes_support::kube::client(args.kubeconfig.as_deref()).await?;
    let ca_configmap = match &args.ca_configmap {
        Some(s) => Some(
            s.split_once('/')
                .map(|(ns, name)| (ns.to_owned(), name.to_owned()))
                .context("--ca-configmap must be namespace/name")?,
        ),
        None => None,
    };
    let managed = managed_tls(&args)?;
    let watch_tls = match &managed {
        Some(tls) => {
            first_certificates(&client, tls, &args.managed_tls_dir).await?;
            let (client, tls, dir) = (client.clone(), tls.clone(), args.managed_tls_dir.clone());
            let every = std::time::Duration::from_secs(args.certificate_check_secs.max(1));
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(every).await;
                    match certificates::ensure(&client, &tls).await {
                        Ok(done) if !done.issued.is_empty() => {
                            tracing::info!(issued = ?done.issued, "managed certificates renewed");
                            if let Err(e) = certificates::write_own(&client, &tls, &dir).await {
                                tracing::warn!(error = %format!("{e:#}"), "watch material not rewritten");
                            }
                        }
                        Ok(_) => {}
                        Err(e) => {
                            tracing::warn!(error = %format!("{e:#}"), "managed certificates not checked")
                        }
                    }
                }
            });
            TlsFiles {
                cert: args.managed_tls_dir.join("tls.crt"),
                key: args.managed_tls_dir.join("tls.key"),
                ca: args.managed_tls_dir.join("ca.crt"),
            }
        }
        None => TlsFiles {
            cert: args.tls_cert.clone().context("--tls-cert is required")?,
            key: args.tls_key.clone().context("--tls-key is required")?,
            ca: args.client_ca.clone().context("--client-ca is required")?,
        },
    };
    let listener = tokio::net::TcpListener::bind(&args.watch_listen)
        .await
        .with_context(|| format!("listen on {}", args.watch_listen))?;
    if let Some(addr) = &args.metrics_listen {
        let l = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("listen on {addr}"))?;
        tokio::spawn(cluster::metrics::serve(l));
    }
    tracing::info!(watch = %listener.local_addr()?, "kruntimes-operator starting");
    cluster::run(
        client,
        ClusterConfig {
            gateway_url: args.gateway_url,
            ca_configmap,
            system_namespace: args.system_namespace,
            pods: PodSettings {
                runtimed_image: args.runtimed_image,
                internal_tls_secret: args.internal_tls_secret,
                service_account: args.runtime_service_account,
            },
            watch_clients: args.watch_clients,
            watch_tls,
        },
        listener,
        kruntimes_process::shutdown_signal(),
    )
    .await
}
