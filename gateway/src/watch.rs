//! Ownership watch clients: one to the control plane, and one to every
//! runtimed the control plane's assignments name (started and stopped as
//! assignments change). All feed the merged [`Table`].

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Instant;

use kruntimes_proto::watch::{SourceUpdate, watch_source};
use tokio::sync::Notify;
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity};

use crate::table::{Table, read, write};

/// TLS material for internal (mTLS) connections.
#[derive(Clone)]
pub struct InternalTls {
    /// Internal CA (PEM).
    pub ca_pem: Vec<u8>,
    /// Client certificate (PEM).
    pub cert_pem: Vec<u8>,
    /// Client key (PEM).
    pub key_pem: Vec<u8>,
    /// Server name expected on the control plane's certificate.
    pub control_plane_name: String,
    /// Server name expected on runtimed certificates.
    pub runtimed_name: String,
}

impl InternalTls {
    fn endpoint(&self, address: &str, server_name: &str) -> Option<Endpoint> {
        let tls = ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(&self.ca_pem))
            .identity(Identity::from_pem(&self.cert_pem, &self.key_pem))
            .domain_name(server_name);
        Endpoint::from_shared(format!("https://{address}"))
            .ok()?
            .tls_config(tls)
            .ok()
            .map(|e| {
                e.connect_timeout(std::time::Duration::from_secs(2))
                    .tcp_nodelay(true)
            })
    }
}

/// Runs the watches until the returned future is dropped.
pub async fn run(table: Arc<RwLock<Table>>, control_plane: String, tls: InternalTls) {
    let changed = Arc::new(Notify::new());
    let Some(cp) = tls.endpoint(&control_plane, &tls.control_plane_name) else {
        tracing::error!(address = %control_plane, "invalid control plane address");
        return;
    };
    let t = table.clone();
    let n = changed.clone();
    let cp_task = tokio::spawn(watch_source(cp, "kruntimes-gateway".into(), move |u| {
        let lost = matches!(u, SourceUpdate::Lost);
        write(&t).apply_control_plane(u, Instant::now());
        if !lost {
            n.notify_one();
        }
        true
    }));
    let _guard = AbortOnDrop(vec![cp_task]);
    let mut runtimed: HashMap<String, AbortOnDrop> = HashMap::new();
    loop {
        changed.notified().await;
        let wanted = read(&table).owner_addresses();
        runtimed.retain(|addr, _| {
            let keep = wanted.contains(addr);
            if !keep {
                write(&table).remove_runtimed(addr);
                tracing::info!(address = %addr, "stopped watching runtimed");
            }
            keep
        });
        for addr in wanted {
            if runtimed.contains_key(&addr) {
                continue;
            }
            let Some(ep) = tls.endpoint(&addr, &tls.runtimed_name) else {
                tracing::warn!(address = %addr, "invalid runtimed address in assignment");
                continue;
            };
            tracing::info!(address = %addr, "watching runtimed");
            let t = table.clone();
            let a = addr.clone();
            let task = tokio::spawn(watch_source(ep, "kruntimes-gateway".into(), move |u| {
                write(&t).apply_runtimed(&a, u, Instant::now());
                true
            }));
            runtimed.insert(addr, AbortOnDrop(vec![task]));
        }
    }
}

struct AbortOnDrop(Vec<tokio::task::JoinHandle<()>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        for t in &self.0 {
            t.abort();
        }
    }
}
