//! The operator (Kubernetes mode), built from its [`Config`]: the client,
//! the internal TLS (files, or certificates it keeps and renews), the
//! listeners, then the loop ([`crate::cluster::run`]) until SIGTERM or
//! Ctrl-C.

use std::time::Duration;

use kruntimes_certs::TlsFiles;

use crate::cluster::certificates::{self, ManagedTls};
use crate::cluster::{self, ClusterConfig};
use crate::config::{Config, InternalTlsConfig};
use crate::error::{Error, Result};

/// Runs [`certificates::ensure`] until it succeeds (backing off 1 s → 30 s),
/// then writes the watch's own material.
async fn first_certificates(
    client: &kube::Client,
    tls: &ManagedTls,
    dir: &std::path::Path,
) -> Result<()> {
    let mut wait = Duration::from_secs(1);
    loop {
        match certificates::ensure(client, tls).await {
            Ok(done) => {
                tracing::info!(issued = done.issued.len(), "managed certificates ready");
                return certificates::write_own(client, tls, dir).await;
            }
            Err(e) => {
                tracing::warn!(error = %e, retry_in_s = wait.as_secs(), "managed certificates not ready");
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_secs(30));
            }
        }
    }
}

/// Checks the managed certificates every `every`, renewing what is due and
/// rewriting the watch's own material when it was.
fn keep_renewing(client: kube::Client, tls: ManagedTls, dir: std::path::PathBuf, every: Duration) {
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(every).await;
            match certificates::ensure(&client, &tls).await {
                Ok(done) if !done.issued.is_empty() => {
                    tracing::info!(issued = ?done.issued, "managed certificates renewed");
                    if let Err(e) = certificates::write_own(&client, &tls, &dir).await {
                        tracing::warn!(error = %e, "watch material not rewritten");
                    }
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "managed certificates not checked"),
            }
        }
    });
}

/// The watch's TLS files: as given, or the operator's own, written once
/// the managed certificates are ready (then kept renewed).
async fn watch_tls(client: &kube::Client, internal: &InternalTlsConfig) -> Result<TlsFiles> {
    match internal {
        InternalTlsConfig::Files(files) => Ok(files.clone()),
        InternalTlsConfig::Managed { tls, dir, check } => {
            first_certificates(client, tls, dir).await?;
            keep_renewing(client.clone(), (**tls).clone(), dir.clone(), *check);
            Ok(TlsFiles {
                cert: dir.join("tls.crt"),
                key: dir.join("tls.key"),
                ca: dir.join("ca.crt"),
            })
        }
    }
}

/// Binds `addr`.
async fn bind(addr: &str) -> Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| Error::Listen {
            addr: addr.to_owned(),
            source,
        })
}

/// Runs the operator until SIGTERM or Ctrl-C.
pub async fn run(config: Config) -> Result<()> {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    kruntimes_process::init_logging();
    kruntimes_process::confine::forbid_inspection()?;
    let client = kruntimes_support::kube::client(config.kubeconfig.as_deref()).await?;
    let watch_tls = watch_tls(&client, &config.internal_tls).await?;
    let listener = bind(&config.watch_listen).await?;
    if let Some(addr) = &config.metrics_listen {
        tokio::spawn(cluster::metrics::serve(bind(addr).await?));
    }
    tracing::info!(watch = %listener.local_addr()?, "kruntimes-operator starting");
    cluster::run(
        client,
        ClusterConfig {
            gateway_url: config.gateway_url,
            ca_configmap: config.ca_configmap,
            system_namespace: config.system_namespace,
            pods: config.pods,
            watch_clients: config.watch_clients,
            watch_tls,
            leader_election: config.leader_election,
        },
        listener,
        kruntimes_process::shutdown_signal(),
    )
    .await
}
