//! One TLS port for everything runtimed serves: gRPC (`Agent`,
//! `OwnershipTable`) and the dataplane (HTTP/1.1, and HTTP/2). Clients must present a
//! certificate from the internal CA; the peer's common name then decides what
//! it may call.
//!
//! The port holds under abuse ([`kruntimes_process::listen`]): accept errors
//! never end the loop, connections are bounded, a TLS handshake has a
//! deadline, and so do the request headers of an HTTP/1 connection.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::routing::any;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::service::TowerToHyperService;
use kruntimes_process::listen::{self, Limits, Listener, Stats};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt;

use super::agent::AgentService;
use super::dispatch::{self, Dataplane};
use super::peer::{PeerIdentity, PeerPolicy};
use crate::host::Host;
use crate::local::LocalPod;

/// What [`serve`] needs.
pub struct ServeConfig {
    /// Bound listener.
    pub listener: TcpListener,
    /// Its bounds.
    pub limits: Limits,
    /// Bound on reading an HTTP/1 request's headers.
    pub header_timeout: std::time::Duration,
    /// Where the port counts what it refused.
    pub stats: Arc<Stats>,
    /// TLS server configuration (with client verification).
    pub tls: rustls::ServerConfig,
    /// Client identity policy.
    pub policy: PeerPolicy,
}

/// Builds the router: the gRPC services and the `/v1/…` dataplane.
pub fn router(dp: Dataplane) -> Router {
    let host = Host {
        engine: dp.engine.clone(),
        sessions: dp.sessions.clone(),
        tasks: dp.tasks.clone(),
    };
    let grpc = tonic::service::Routes::new(AgentService::new(host, dp.policy.clone()))
        .add_service(dp.pod.publisher().service())
        .into_axum_router();
    Router::new()
        .route("/v1/{*rest}", any(dispatch::dispatch))
        .with_state(dp)
        .merge(grpc)
}

/// Serves `pod`'s Runs until `shutdown` resolves.
pub async fn serve(
    pod: Arc<LocalPod>,
    host: Host,
    cfg: ServeConfig,
    shutdown: impl std::future::Future<Output = ()>,
) -> std::io::Result<()> {
    let app = router(Dataplane {
        pod,
        engine: host.engine,
        sessions: host.sessions,
        tasks: host.tasks,
        policy: Arc::new(cfg.policy),
    });
    let acceptor = TlsAcceptor::from(Arc::new(cfg.tls));
    let listener = Listener::with_stats(cfg.listener, "runtimed", cfg.limits, cfg.stats.clone());
    let stats = listener.stats();
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = &mut shutdown => return Ok(()),
        };
        let acceptor = acceptor.clone();
        let app = app.clone();
        let stats = stats.clone();
        let bounds = (cfg.limits, cfg.header_timeout);
        tokio::spawn(async move {
            let remote = accepted.remote;
            let _slot = accepted.slot;
            if let Err(e) = connection(acceptor, accepted.stream, remote, app, bounds, &stats).await
            {
                tracing::debug!(%remote, error = %e, "connection ended with error");
            }
        });
    }
}

async fn connection(
    acceptor: TlsAcceptor,
    tcp: tokio::net::TcpStream,
    remote: SocketAddr,
    app: Router,
    (limits, header_timeout): (Limits, std::time::Duration),
    stats: &Stats,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let tls = listen::handshake(limits, stats, acceptor.accept(tcp)).await?;
    let common_name = tls
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first())
        .and_then(|c| kruntimes_certs::peer_common_name(c.as_ref()));
    let identity = PeerIdentity { common_name };
    tracing::trace!(%remote, peer = ?identity.common_name, "accepted connection");
    let svc = app.map_request(move |mut req: axum::http::Request<hyper::body::Incoming>| {
        req.extensions_mut().insert(identity.clone());
        req
    });
    let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(header_timeout);
    builder
        .serve_connection_with_upgrades(TokioIo::new(tls), TowerToHyperService::new(svc))
        .await
}
