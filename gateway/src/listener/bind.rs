//! Binding the gateway's listeners from its configuration: each listener's
//! settings and counters come from one [`Binder`], and the HTTPS acceptor
//! from the certificate files, reloaded when they rotate.

use std::sync::Arc;

use pingora::listeners::tls::{Acceptor, TlsSettings};

use super::{Connections, ListenerConfig, ListenerMetrics, PublicListener, Workers};
use crate::config::{HttpsListen, ListenConfig};
use crate::metrics::Metrics;
use kruntimes_process::listen::{Limits, Stats};

/// Binds listeners with the gateway's settings and counters. Each is bound
/// when asked, once: a taken or bad address fails the start, never a
/// listener's thread later.
pub struct Binder {
    config: ListenConfig,
    metrics: Arc<Metrics>,
    connections: Arc<Connections>,
}

impl Binder {
    /// A binder of `config`'s listeners, counted in `metrics`, their
    /// connections tracked in `connections`.
    pub fn new(config: ListenConfig, metrics: Arc<Metrics>, connections: Arc<Connections>) -> Self {
        Self {
            config,
            metrics,
            connections,
        }
    }

    /// A listener's settings and counters.
    fn parts(
        &self,
        name: &'static str,
        addr: &str,
        tls: Option<Arc<Acceptor>>,
    ) -> (ListenerConfig, Arc<Stats>, ListenerMetrics) {
        let stats = Arc::new(Stats::default());
        self.metrics.watch_listener(name, stats.clone());
        let counts = ListenerMetrics {
            open: self.metrics.open_connections.with_label_values(&[name]),
            header_timeouts: self
                .metrics
                .connections
                .with_label_values(&[name, "header_timeout"]),
        };
        let c = &self.config;
        let config = ListenerConfig {
            name,
            addr: addr.to_owned(),
            tls,
            limits: Limits {
                max_connections: c.max_connections,
                handshake: c.handshake_timeout,
            },
            header_timeout: c.header_timeout,
            idle_timeout: c.idle_timeout,
            shutdown_grace: c.shutdown_grace,
        };
        (config, stats, counts)
    }

    /// A listener serving every connection with `app` on its own threads.
    pub fn bind<A>(
        &self,
        name: &'static str,
        addr: &str,
        app: Arc<A>,
    ) -> crate::Result<PublicListener<A>> {
        let (config, stats, counts) = self.parts(name, addr, None);
        PublicListener::bind(config, app, self.connections.clone(), stats, counts)
    }

    /// A listener handing each connection to one of `workers`, served there
    /// with that worker's app in `apps`.
    pub fn bind_for<A>(
        &self,
        name: &'static str,
        addr: &str,
        tls: Option<Arc<Acceptor>>,
        workers: &Arc<Workers>,
        apps: &[Arc<A>],
    ) -> crate::Result<PublicListener<A>> {
        let (config, stats, counts) = self.parts(name, addr, tls);
        PublicListener::bind_for(
            config,
            workers.clone(),
            apps.to_vec(),
            self.connections.clone(),
            stats,
            counts,
        )
    }
}

/// The HTTPS acceptor of `https`'s certificate files (HTTP/2 and HTTP/1.1),
/// its certificate re-read when the files rotate (at least every
/// `reload`).
pub fn https_acceptor(
    https: &HttpsListen,
    reload: std::time::Duration,
) -> crate::Result<Arc<Acceptor>> {
    let (cert, key) = (&https.cert, &https.key);
    let mut tls =
        TlsSettings::intermediate(&cert.display().to_string(), &key.display().to_string())
            .map_err(|e| crate::Error::setup("https certificate", e))?;
    // Rotated certificate files take effect without a restart.
    let reloading = kruntimes_certs::ReloadingCert::new(cert, key).map_err(|e| {
        crate::Error::setup("https certificate", format!("load {}: {e}", cert.display()))
    })?;
    reloading.watch(reload);
    tls.set_cert_resolver(reloading);
    tls.enable_h2();
    Ok(Arc::new(tls.build()))
}
