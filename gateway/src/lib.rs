//! The kruntimes gateway: a Pingora HTTPS/HTTP proxy that authenticates
//! callers, authorizes them per Run through a bounded decision cache,
//! enforces size and concurrency limits, and forwards each request in one hop
//! (HTTP/2, mTLS, pooled) to the runtimed that owns the Run, as named by the
//! ownership table it watches.
#![forbid(unsafe_code)]

pub mod access_log;
pub mod admission;
pub mod auth;
pub mod config;
pub mod listener;
pub mod metrics;
pub mod metrics_service;
pub mod proxy;
pub mod rejection;
pub mod table;
pub mod watch;

pub use config::Args;

use std::sync::{Arc, RwLock};
use std::time::Duration;

use anyhow::Context as _;
use async_trait::async_trait;
use pingora::apps::HttpServerOptions;
use pingora::connectors::ConnectorOptions;
use pingora::listeners::tls::TlsSettings;
use pingora::server::configuration::ServerConf;
use pingora::server::{Server, ShutdownWatch};
use pingora::services::background::{BackgroundService, background_service};

use crate::admission::Limits;
use crate::auth::cache::{CacheConfig, CacheMetrics, DecisionCache};
use crate::auth::jwt::JwtAuthenticator;
use crate::auth::kube::{
    ApiMetrics, KubeCalls, ServiceAccountJwtAuthenticator, SubjectAccessReviewAuthorizer,
    TokenReviewAuthenticator,
};
use crate::auth::policy::{Policy, PolicyAuthorizer};
use crate::auth::{Authenticator, Authorizer};
use crate::config::AuthMode;
use crate::metrics::Metrics;
use crate::proxy::{Gateway, Upstream};
use crate::table::Table;
use crate::watch::InternalTls;

pub use kruntimes_process::init_logging;

/// `GET /version`: this build (no secret, no configuration). The commit is
/// what `KRUNTIMES_GIT_COMMIT` said at build time (image builds set it).
pub fn version_json() -> Vec<u8> {
    serde_json::json!({
        "component": "kruntimes-gateway",
        "version": env!("CARGO_PKG_VERSION"),
        "commit": option_env!("KRUNTIMES_GIT_COMMIT").unwrap_or("unknown"),
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

fn read(path: &std::path::Path) -> anyhow::Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("read {}", path.display()))
}

fn cache_config(args: &Args) -> CacheConfig {
    CacheConfig {
        max_entries: args.auth_cache_entries,
        authn_max_ttl: Duration::from_secs(args.authn_cache_ttl_secs),
        rejected_ttl: Duration::from_secs(args.authz_denied_ttl_secs),
        allowed_ttl: Duration::from_secs(args.authz_allowed_ttl_secs),
        denied_ttl: Duration::from_secs(args.authz_denied_ttl_secs),
        max_concurrent_calls: args.auth_max_api_calls,
        max_call_wait: Duration::from_millis(args.auth_max_call_wait_ms),
        stale_if_error: Duration::from_secs(args.auth_stale_if_error_secs),
    }
}

/// A runtime of its own for API-server calls, alive for the whole process:
/// Pingora's per-thread runtimes never own those connections.
fn kube_runtime() -> anyhow::Result<tokio::runtime::Handle> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("kube-auth")
        .enable_all()
        .build()?;
    let handle = rt.handle().clone();
    std::thread::Builder::new()
        .name("kube-auth-runtime".into())
        .spawn(move || rt.block_on(std::future::pending::<()>()))?;
    Ok(handle)
}

fn kube_backends(
    args: &Args,
    metrics: &Metrics,
) -> anyhow::Result<(Arc<dyn Authenticator>, Arc<dyn Authorizer>)> {
    let runtime = kube_runtime()?;
    let kubeconfig = args.kubeconfig.clone();
    let client = runtime
        .block_on(async move { kruntimes_support::kube::client(kubeconfig.as_deref()).await })?;
    let calls = KubeCalls::new(
        client,
        runtime.clone(),
        Some(ApiMetrics {
            calls: metrics.auth_api_calls.clone(),
            latency: metrics.auth_api_latency.clone(),
        }),
        Duration::from_millis(args.kube_api_timeout_ms),
    );
    let token_review: Arc<dyn Authenticator> = Arc::new(TokenReviewAuthenticator::new(
        calls.clone(),
        args.token_audiences.clone(),
    ));
    let authn = if args.sa_jwt_local {
        let audiences = args.token_audiences.clone();
        let fallback = token_review.clone();
        let local = {
            let calls = calls.clone();
            runtime.block_on(async move {
                ServiceAccountJwtAuthenticator::discover(&calls, audiences, fallback).await
            })
        }
        .map_err(|e| anyhow::anyhow!("service-account key discovery: {e}"))?;
        local.refresh_every(calls.clone(), Duration::from_secs(300));
        tracing::warn!(
            "service-account tokens are verified locally: revocations are not seen before exp"
        );
        Arc::new(local) as Arc<dyn Authenticator>
    } else {
        token_review
    };
    Ok((authn, Arc::new(SubjectAccessReviewAuthorizer::new(calls))))
}

/// Builds the decision cache from the flags (`None` when auth is disabled).
fn build_auth(args: &Args, metrics: &Metrics) -> anyhow::Result<Option<Arc<DecisionCache>>> {
    let (authn, authz): (Arc<dyn Authenticator>, Arc<dyn Authorizer>) = match args.auth {
        AuthMode::None => {
            tracing::warn!("authentication is DISABLED; every caller may invoke every run");
            return Ok(None);
        }
        AuthMode::Jwt => {
            let key_path = args
                .jwt_public_key
                .as_ref()
                .context("--jwt-public-key is required with --auth jwt")?;
            let policy_path = args
                .policy
                .as_ref()
                .context("--policy is required with --auth jwt")?;
            let authn =
                JwtAuthenticator::new(&read(key_path)?, &args.jwt_issuer, &args.jwt_audience)
                    .context("load JWT public key")?;
            let policy: Policy =
                serde_yaml::from_slice(&read(policy_path)?).context("parse policy")?;
            (Arc::new(authn), Arc::new(PolicyAuthorizer(policy)))
        }
        AuthMode::Kubernetes => kube_backends(args, metrics)?,
    };
    Ok(Some(Arc::new(DecisionCache::new(
        authn,
        authz,
        cache_config(args),
        Some(CacheMetrics {
            lookups: metrics.auth_cache.clone(),
            decisions: metrics.auth_decisions.clone(),
        }),
    ))))
}

fn upstream(args: &Args) -> anyhow::Result<Upstream> {
    // Checked here for a clear error: Pingora's connector panics on a CA
    // bundle it cannot load.
    kruntimes_certs::check_ca_bundle(&args.internal_ca)?;
    let cert_key = proxy::upstream::client_cert(&args.client_cert, &args.client_key)
        .map_err(|e| anyhow::anyhow!("load {}: {e}", args.client_cert.display()))?;
    cert_key.watch(Duration::from_secs(args.tls_reload_secs.max(1)));
    Ok(Upstream {
        cert_key,
        connector_pair: Arc::default(),
        server_name: args.runtimed_server_name.clone(),
        connect_timeout: Duration::from_millis(args.connect_timeout_ms),
        default_timeout: Duration::from_secs(args.default_timeout_secs),
    })
}

/// Builds and runs the gateway until a signal stops it (SIGTERM after its
/// grace, SIGINT at once) or a setup error, then writes the log lines still
/// waiting.
pub fn run(args: Args) -> anyhow::Result<()> {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    // The access log is written on the request path: buffered, off it.
    let log = kruntimes_process::init_buffered_logging();
    let served = serve(args, log.clone());
    // The last batch: the requests served while draining, or what was
    // logged before a setup error. A refused write is counted, not fatal.
    let _ = log.flush_to(&mut std::io::stderr());
    served
}

/// [`run`], with its log buffer.
fn serve(args: Args, log: kruntimes_process::logbuf::LogBuffer) -> anyhow::Result<()> {
    // Its memory holds the TLS keys and callers' tokens.
    kruntimes_process::confine::forbid_inspection()?;
    if args.https_listen.is_none() && args.http_listen.is_none() {
        anyhow::bail!("at least one of --https-listen and --http-listen is required");
    }
    let listeners = usize::from(args.https_listen.is_some())
        + usize::from(args.http_listen.is_some())
        + usize::from(args.metrics_listen.is_some());
    kruntimes_process::listen::check_bound_against_limit(
        "gateway",
        args.max_connections,
        listeners,
        256,
        kruntimes_process::listen::raise_open_file_limit(),
    );
    let metrics = Arc::new(Metrics::new()?);
    metrics.watch_log_drops(log.dropped());
    let table = Arc::new(RwLock::new(Table::new(Duration::from_secs(
        args.staleness_secs,
    ))));
    let connections = Arc::new(listener::Connections::default());
    let limits = kruntimes_process::listen::Limits {
        max_connections: args.max_connections,
        handshake: Duration::from_millis(args.handshake_timeout_ms),
    };
    // A listener's settings and counters. Each listener is bound here,
    // once: a taken or bad address fails the start, never a listener's
    // thread later.
    let counters = metrics.clone();
    let parts = |name: &'static str, addr: &str, tls| {
        let stats = Arc::new(kruntimes_process::listen::Stats::default());
        counters.watch_listener(name, stats.clone());
        let counts = listener::ListenerMetrics {
            open: counters.open_connections.with_label_values(&[name]),
            header_timeouts: counters
                .connections
                .with_label_values(&[name, "header_timeout"]),
        };
        let config = listener::ListenerConfig {
            name,
            addr: addr.to_owned(),
            tls,
            limits,
            header_timeout: Duration::from_millis(args.header_timeout_ms),
            idle_timeout: Duration::from_secs(args.idle_timeout_secs),
            shutdown_grace: Duration::from_secs(args.shutdown_grace_secs),
        };
        (config, stats, counts)
    };
    // Metrics first: a gateway whose metrics port is taken fails before it
    // binds its public ports (`krt up` then picks another).
    let metrics_listener = match &args.metrics_listen {
        Some(addr) => {
            let (config, stats, counts) = parts("metrics", addr, None);
            let app = Arc::new(metrics_service::MetricsApp {
                metrics: metrics.clone(),
                table: table.clone(),
                connections: connections.clone(),
            });
            let l = listener::PublicListener::bind(config, app, connections.clone(), stats, counts)
                .with_context(|| format!("cannot listen for metrics on {addr}"))?;
            Some(l)
        }
        None => None,
    };
    let auth = build_auth(&args, &metrics)?;
    let mut gateway = Gateway::new(
        table.clone(),
        auth,
        metrics,
        Limits {
            max_body_bytes: args.max_body_bytes,
            max_session_body_bytes: args.max_session_body_bytes,
            max_header_bytes: args.max_header_bytes,
            max_in_flight: args.max_in_flight,
            route_settle: Duration::from_millis(args.route_settle_ms),
        },
        upstream(&args)?,
    );
    gateway.access_log = args.access_log.then(|| access_log::AccessLog::new(log));
    gateway.connections = Some(connections.clone());
    let conf = ServerConf {
        threads: args.threads,
        work_stealing: args.work_stealing,
        // Pingora broadcasts the shutdown at SIGTERM, waits this grace (the
        // listeners accept on through it), then gives requests in flight 2 s.
        grace_period_seconds: Some(args.shutdown_grace_secs),
        graceful_shutdown_timeout_seconds: Some(2),
        // What every upstream connector Pingora builds trusts (instead of
        // the platform's roots): runtimed certificates chain to it.
        ca_file: Some(args.internal_ca.display().to_string()),
        // Every Pingora timeout of a second or more on tokio's timer wheel.
        // Pingora's own timer starts a clock thread at its first use that
        // wakes every 10 ms for the life of the process (~4 ms of CPU per
        // second on 2 vCPUs, idle or not). The idle timeout, the other user
        // of that clock, is the listeners' own (tokio's timer).
        fast_timeout_to_tokio_threshold_seconds: Some(0),
        ..ServerConf::default()
    };
    let mut server = Server::new_with_opt_and_conf(None, conf);
    let options = HttpServerOptions::default();
    let client = Upstream::connector_options(
        ConnectorOptions::from_server_conf(&server.configuration),
        &args.internal_ca,
        &args.client_cert,
        &args.client_key,
    )
    .map_err(|e| anyhow::anyhow!(e))?;
    // The public listeners hand each connection to a worker, served there
    // with the worker's own proxy and upstream pool: one per thread, or
    // with work stealing a single one on every thread (docs/benchmarks.md,
    // "Worker threads").
    let (worker_count, worker_threads) = if args.work_stealing {
        (1, None)
    } else {
        (args.threads, Some(1))
    };
    let workers = listener::Workers::new(worker_count);
    let proxies = proxy::build(
        &server.configuration,
        &gateway,
        &options,
        &client,
        worker_count,
    )?;
    let mut listeners = Vec::new();
    let mut add = |name: &'static str, addr: &str, tls| -> anyhow::Result<()> {
        let (config, stats, counts) = parts(name, addr, tls);
        listeners.push(listener::PublicListener::bind_for(
            config,
            workers.clone(),
            proxies.clone(),
            connections.clone(),
            stats,
            counts,
        )?);
        Ok(())
    };
    if let Some(addr) = &args.https_listen {
        let cert = args
            .tls_cert
            .as_ref()
            .context("--tls-cert is required with --https-listen")?;
        let key = args
            .tls_key
            .as_ref()
            .context("--tls-key is required with --https-listen")?;
        let mut tls =
            TlsSettings::intermediate(&cert.display().to_string(), &key.display().to_string())?;
        // Rotated certificate files take effect without a restart.
        let reloading = kruntimes_certs::ReloadingCert::new(cert, key)
            .map_err(|e| anyhow::anyhow!("load {}: {e}", cert.display()))?;
        reloading.watch(Duration::from_secs(args.tls_reload_secs.max(1)));
        tls.set_cert_resolver(reloading);
        tls.enable_h2();
        add("https", addr, Some(Arc::new(tls.build())))?;
    }
    if let Some(addr) = &args.http_listen {
        add("http", addr, None)?;
    }
    // Fail at start on unreadable files; later reads follow rotations.
    for p in [&args.internal_ca, &args.client_cert, &args.client_key] {
        read(p)?;
    }
    let tls = InternalTls {
        ca: args.internal_ca.clone(),
        cert: args.client_cert.clone(),
        key: args.client_key.clone(),
        control_plane_name: args.control_plane_server_name.clone(),
        runtimed_name: args.runtimed_server_name.clone(),
    };
    let watch = background_service(
        "ownership watch",
        WatchService {
            table,
            control_plane: args.control_plane.clone(),
            tls,
        },
    );
    for i in 0..workers.len() {
        server.add_service(workers.service(i, worker_threads));
    }
    for l in listeners {
        server.add_service(l);
    }
    server.add_service(watch);
    if let Some(m) = metrics_listener {
        server.add_service(m);
    }
    server.bootstrap();
    tracing::info!(https = ?args.https_listen, http = ?args.http_listen, metrics = ?args.metrics_listen, "gateway starting");
    // Returns once a signal has shut the services down (Pingora's
    // `run_forever` would exit the process here, its last log lines unwritten).
    server.run(pingora::server::RunArgs::default());
    tracing::info!("gateway stopped");
    Ok(())
}
