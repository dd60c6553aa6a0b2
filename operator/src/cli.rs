//! Flags and entry point of `kruntimes-operator` (Kubernetes mode), shared
//! by the binary and `krt operator`.

use std::path::PathBuf;

use crate::cluster::workloads::{self, PodSettings};
use crate::cluster::{self, ClusterConfig};
use anyhow::Context as _;
use clap::Parser;
use kruntimes_certs::TlsFiles;

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
    /// Serving certificate of the watch (PEM).
    #[arg(long, env = "KRUNTIMES_OPERATOR_TLS_CERT")]
    pub tls_cert: PathBuf,
    /// Serving key of the watch (PEM).
    #[arg(long, env = "KRUNTIMES_OPERATOR_TLS_KEY")]
    pub tls_key: PathBuf,
    /// Client certificate CNs allowed to watch the ownership table.
    #[arg(
        long,
        env = "KRUNTIMES_OPERATOR_WATCH_CLIENTS",
        value_delimiter = ',',
        default_value = "kruntimes-gateway"
    )]
    pub watch_clients: Vec<String>,
    /// CA that gateway client certificates chain to (PEM).
    #[arg(long, env = "KRUNTIMES_OPERATOR_CLIENT_CA")]
    pub client_ca: PathBuf,
}

/// Runs the operator until SIGTERM or Ctrl-C.
pub async fn run(args: Args) -> anyhow::Result<()> {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    kruntimes_support::init_logging();
    kruntimes_support::confine::forbid_inspection()?;
    let client = kruntimes_support::kube::client(args.kubeconfig.as_deref()).await?;
    let ca_configmap = match &args.ca_configmap {
        Some(s) => Some(
            s.split_once('/')
                .map(|(ns, name)| (ns.to_owned(), name.to_owned()))
                .context("--ca-configmap must be namespace/name")?,
        ),
        None => None,
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
            watch_tls: TlsFiles {
                cert: args.tls_cert,
                key: args.tls_key,
                ca: args.client_ca,
            },
        },
        listener,
        kruntimes_support::shutdown_signal(),
    )
    .await
}
