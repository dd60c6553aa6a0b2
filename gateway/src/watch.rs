//! Ownership watch clients: one to the control plane, and one to every
//! runtimed the control plane's assignments name (started and stopped as
//! assignments change). All feed the merged [`Table`].

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Instant;

use kruntimes_proto::watch::{SourceUpdate, watch_source_with};
use tokio::sync::Notify;
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity};

use crate::table::{Table, read, write};

/// TLS material for internal (mTLS) connections, read from its files at
/// every (re)connection: rotated files are used from the next one on.
#[derive(Clone)]
pub struct InternalTls {
    /// Internal CA (PEM file).
    pub ca: std::path::PathBuf,
    /// Client certificate (PEM file).
    pub cert: std::path::PathBuf,
    /// Client key (PEM file).
    pub key: std::path::PathBuf,
    /// Server name expected on the control plane's certificate.
    pub control_plane_name: String,
    /// Server name expected on runtimed certificates.
    pub runtimed_name: String,
}

impl InternalTls {
    /// The endpoint of `address`, with the files as they are now.
    fn endpoint(&self, address: &str, server_name: &str) -> Result<Endpoint, String> {
        let read = |p: &std::path::Path| {
            std::fs::read(p).map_err(|e| format!("read {}: {e}", p.display()))
        };
        let tls = ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(read(&self.ca)?))
            .identity(Identity::from_pem(read(&self.cert)?, read(&self.key)?))
            .domain_name(server_name);
        Endpoint::from_shared(format!("https://{address}"))
            .map_err(|e| format!("address {address}: {e}"))?
            .tls_config(tls)
            .map_err(|e| e.to_string())
            .map(|e| {
                e.connect_timeout(std::time::Duration::from_secs(2))
                    .tcp_nodelay(true)
            })
    }

    /// A maker of [`Self::endpoint`] for [`watch_source_with`].
    fn maker(
        &self,
        address: &str,
        server_name: &str,
    ) -> impl FnMut() -> Result<Endpoint, String> + Send + 'static {
        let (tls, address, name) = (self.clone(), address.to_owned(), server_name.to_owned());
        move || tls.endpoint(&address, &name)
    }
}

/// Runs the watches until the returned future is dropped.
pub async fn run(table: Arc<RwLock<Table>>, control_plane: String, tls: InternalTls) {
    let changed = Arc::new(Notify::new());
    // A bad address never heals; unreadable files may (the watch retries).
    if let Err(e) = Endpoint::from_shared(format!("https://{control_plane}")) {
        tracing::error!(address = %control_plane, error = %e, "invalid control plane address");
        return;
    }
    let cp = tls.maker(&control_plane, &tls.control_plane_name);
    let t = table.clone();
    let n = changed.clone();
    let cp_task = tokio::spawn(watch_source_with(
        cp,
        "kruntimes-gateway".into(),
        move |u| {
            let lost = matches!(u, SourceUpdate::Lost);
            write(&t).apply_control_plane(u, Instant::now());
            if !lost {
                n.notify_one();
            }
            true
        },
    ));
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
            if let Err(e) = Endpoint::from_shared(format!("https://{addr}")) {
                tracing::warn!(address = %addr, error = %e, "invalid runtimed address in assignment");
                continue;
            }
            let ep = tls.maker(&addr, &tls.runtimed_name);
            tracing::info!(address = %addr, "watching runtimed");
            let t = table.clone();
            let a = addr.clone();
            let task = tokio::spawn(watch_source_with(
                ep,
                "kruntimes-gateway".into(),
                move |u| {
                    write(&t).apply_runtimed(&a, u, Instant::now());
                    true
                },
            ));
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
