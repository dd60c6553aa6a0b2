//! The kruntimes gateway: a Pingora HTTPS/HTTP proxy that authenticates
//! callers, authorizes them per Run through a bounded decision cache,
//! enforces size and concurrency limits, and forwards each request in one hop
//! (HTTP/1.1, mTLS, pooled) to the runtimed that owns the Run, as named by
//! the ownership table it watches.
//!
//! Its surface is small: flags ([`Args`]) validated into a [`Config`], and
//! [`run`]. Inside, by concern: [`admission`] (limits, target, authn/authz,
//! route), `auth` (the decision cache and its backends), `proxy` (the one
//! `ProxyHttp` and its upstream), `table` and `watch` (the ownership table
//! and the streams that feed it), `listener` (the public listeners and the
//! worker threads that replaced Pingora's own — behind that one module,
//! measured in docs/benchmarks.md), `rejection` (failures onto the public
//! error table), `client_faults` (what clients break, counted rather than
//! logged), `metrics` and `access_log`.
#![forbid(unsafe_code)]

mod access_log;
mod admission;
mod auth;
mod client_faults;
mod config;
mod error;
mod listener;
mod metrics;
mod metrics_service;
mod proxy;
mod rejection;
mod table;
mod watch;

pub use admission::Limits;
pub use auth::cache::CacheConfig;
pub use config::{
    Args, AuthConfig, AuthMode, Config, ConfigError, HttpsListen, InternalConfig, ListenConfig,
};
pub use error::{Error, Result};

use std::sync::{Arc, RwLock};

use async_trait::async_trait;
use pingora::apps::HttpServerOptions;
use pingora::connectors::ConnectorOptions;
use pingora::server::configuration::ServerConf;
use pingora::server::{Server, ShutdownWatch};
use pingora::services::background::{BackgroundService, background_service};

use crate::listener::{Binder, Connections, Workers, https_acceptor};
use crate::metrics::Metrics;
use crate::proxy::{Gateway, Upstream};
use crate::table::Table;
use crate::watch::InternalTls;

pub use kruntimes_process::init_logging;

static BUILD_COMMIT: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Sets the commit `GET /version` reports: the embedding binary's own
/// (`krt` sets the one it was built from). Without it, the gateway reports
/// `KRUNTIMES_GIT_COMMIT` from its environment (the images set it), or
/// "unknown".
pub fn set_build_commit(commit: &str) {
    let _ = BUILD_COMMIT.set(commit.to_owned());
}

fn build_commit() -> &'static str {
    BUILD_COMMIT.get_or_init(|| {
        std::env::var("KRUNTIMES_GIT_COMMIT")
            .ok()
            .filter(|c| !c.is_empty() && c.len() <= 64 && c.bytes().all(|b| b.is_ascii_hexdigit()))
            .unwrap_or_else(|| "unknown".to_owned())
    })
}

/// `GET /version`: this build (no secret, no configuration).
fn version_json() -> Vec<u8> {
    serde_json::json!({
        "component": "kruntimes-gateway",
        "version": env!("CARGO_PKG_VERSION"),
        "commit": build_commit(),
    })
    .to_string()
    .into_bytes()
}

struct WatchService {
    table: Arc<RwLock<Table>>,
    control_plane: String,
    tls: InternalTls,
}

#[async_trait]
impl BackgroundService for WatchService {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        tokio::select! {
            _ = watch::run(self.table.clone(), self.control_plane.clone(), self.tls.clone()) => {}
            _ = shutdown.changed() => {}
        }
    }
}

/// Pingora's server settings for `config`.
fn server_conf(config: &Config) -> ServerConf {
    ServerConf {
        threads: config.threads,
        work_stealing: config.work_stealing,
        // Pingora broadcasts the shutdown at SIGTERM, waits this grace (the
        // listeners accept on through it), then gives requests in flight 2 s.
        grace_period_seconds: Some(config.listen.shutdown_grace.as_secs()),
        graceful_shutdown_timeout_seconds: Some(2),
        // What every upstream connector Pingora builds trusts (instead of
        // the platform's roots): runtimed certificates chain to it.
        ca_file: Some(config.internal.ca.display().to_string()),
        // Every Pingora timeout of a second or more on tokio's timer wheel.
        // Pingora's own timer starts a clock thread at its first use that
        // wakes every 10 ms for the life of the process (~4 ms of CPU per
        // second on 2 vCPUs, idle or not). The idle timeout, the other user
        // of that clock, is the listeners' own (tokio's timer).
        fast_timeout_to_tokio_threshold_seconds: Some(0),
        ..ServerConf::default()
    }
}

/// The ownership watch's mTLS settings.
fn internal_tls(config: &Config) -> InternalTls {
    let i = &config.internal;
    InternalTls {
        ca: i.ca.clone(),
        cert: i.client_cert.clone(),
        key: i.client_key.clone(),
        control_plane_name: i.control_plane_server_name.clone(),
        runtimed_name: i.runtimed_server_name.clone(),
    }
}

/// Builds and runs the gateway until a signal stops it (SIGTERM after its
/// grace, SIGINT at once) or a setup error, then writes the log lines still
/// waiting.
pub fn run(config: Config) -> Result<()> {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    // The access log is written on the request path: buffered, off it.
    let faults = client_faults::ClientFaults::default();
    let log = kruntimes_process::init_buffered_logging(faults.clone());
    let served = serve(config, log.clone(), faults);
    // The last batch: the requests served while draining, or what was
    // logged before a setup error. A refused write is counted, not fatal.
    let _ = log.flush_to(&mut std::io::stderr());
    served
}

/// [`run`], with its log buffer and the client faults it counts.
fn serve(
    config: Config,
    log: kruntimes_process::logbuf::LogBuffer,
    faults: client_faults::ClientFaults,
) -> Result<()> {
    // Its memory holds the TLS keys and callers' tokens.
    kruntimes_process::confine::forbid_inspection()
        .map_err(|e| Error::setup("process confinement", e))?;
    let listen = &config.listen;
    let listeners = usize::from(listen.https.is_some())
        + usize::from(listen.http.is_some())
        + usize::from(listen.metrics.is_some());
    kruntimes_process::listen::check_bound_against_limit(
        "gateway",
        listen.max_connections,
        listeners,
        256,
        kruntimes_process::listen::raise_open_file_limit(),
    );
    let mut metrics = Metrics::new()?;
    metrics.faults = faults;
    let metrics = Arc::new(metrics);
    metrics.watch_log_drops(log.dropped());
    let table = Arc::new(RwLock::new(Table::new(config.staleness)));
    let connections = Arc::new(Connections::default());
    let binder = Binder::new(listen.clone(), metrics.clone(), connections.clone());
    // Metrics first: a gateway whose metrics port is taken fails before it
    // binds its public ports (`krt up` then picks another).
    let metrics_listener = match &listen.metrics {
        Some(addr) => {
            let app = Arc::new(metrics_service::MetricsApp {
                metrics: metrics.clone(),
                table: table.clone(),
                connections: connections.clone(),
            });
            Some(binder.bind("metrics", addr, app)?)
        }
        None => None,
    };
    // Then fail at start on unreadable files; later reads follow rotations.
    let internal = &config.internal;
    for p in [&internal.ca, &internal.client_cert, &internal.client_key] {
        error::read(p)?;
    }
    let auth = auth::setup::decision_cache(&config.auth, &config.cache, &metrics)?;
    let mut gateway = Gateway::new(
        table.clone(),
        auth,
        metrics,
        config.limits.clone(),
        Upstream::from_config(&config)?,
    );
    gateway.access_log = config.access_log.then(|| access_log::AccessLog::new(log));
    gateway.connections = Some(connections);
    let mut server = Server::new_with_opt_and_conf(None, server_conf(&config));
    let client = Upstream::connector_options(
        ConnectorOptions::from_server_conf(&server.configuration),
        &internal.ca,
        &internal.client_cert,
        &internal.client_key,
    )
    .map_err(|e| Error::setup("upstream connector", e))?;
    // The public listeners hand each connection to a worker, served there
    // with the worker's own proxy and upstream pool: one per thread, or
    // with work stealing a single one on every thread (docs/benchmarks.md,
    // "Worker threads").
    let (worker_count, worker_threads) = if config.work_stealing {
        (1, None)
    } else {
        (config.threads, Some(1))
    };
    let workers = Workers::new(worker_count);
    let proxies = proxy::build(
        &server.configuration,
        &gateway,
        &HttpServerOptions::default(),
        &client,
        worker_count,
    )?;
    let mut public = Vec::new();
    if let Some(https) = &listen.https {
        let tls = https_acceptor(https, listen.tls_reload)?;
        public.push(binder.bind_for("https", &https.addr, Some(tls), &workers, &proxies)?);
    }
    if let Some(addr) = &listen.http {
        public.push(binder.bind_for("http", addr, None, &workers, &proxies)?);
    }
    let watch = background_service(
        "ownership watch",
        WatchService {
            table,
            control_plane: internal.control_plane.clone(),
            tls: internal_tls(&config),
        },
    );
    for i in 0..workers.len() {
        server.add_service(workers.service(i, worker_threads));
    }
    for l in public {
        server.add_service(l);
    }
    server.add_service(watch);
    if let Some(m) = metrics_listener {
        server.add_service(m);
    }
    server.bootstrap();
    tracing::info!(
        https = ?listen.https.as_ref().map(|h| &h.addr),
        http = ?listen.http,
        metrics = ?listen.metrics,
        "gateway starting"
    );
    // Returns once a signal has shut the services down (Pingora's
    // `run_forever` would exit the process here, its last log lines unwritten).
    server.run(pingora::server::RunArgs::default());
    tracing::info!("gateway stopped");
    Ok(())
}
