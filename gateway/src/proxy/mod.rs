//! The Pingora proxy: one [`Gateway`] implementing [`ProxyHttp`].
//!
//! `request_filter` answers the health and version endpoints, reads the
//! invocation id, then runs [`Admission`] — limits, target, authentication
//! and authorization, route — answering its [`ApiError`] as typed JSON.
//! `upstream_peer` then names the owner ([`upstream`]),
//! `upstream_request_filter` strips the bearer token and adds fencing
//! headers, and `fail_to_proxy` turns upstream failures into 503/504
//! without ever retrying a dispatched request.

pub mod respond;
pub mod upstream;
pub mod websocket;

pub use upstream::Upstream;

use std::sync::{Arc, RwLock};
use std::time::Instant;

use async_trait::async_trait;
use bytes::Bytes;
use kruntimes_proto::api::{self, ApiError, SessionOp};
use pingora::ErrorType;
use pingora::apps::HttpServerOptions;
use pingora::connectors::ConnectorOptions;
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::prelude::HttpPeer;
use pingora::proxy::{FailToProxy, HttpProxy, ProxyHttp, ProxyServiceBuilder, Session};
use pingora::server::configuration::ServerConf;
use pingora::{Error, Result};

use crate::access_log::{self, AccessLog};
use crate::admission::{self, Admission, Facts, Limits};
use crate::auth::cache::DecisionCache;
use crate::client_faults;
use crate::listener::{Connections, InFlight};
use crate::metrics::Metrics;
use crate::rejection;
use crate::table::{self, Route, Table};
use upstream::Fencing;

/// The proxy. Clones share its state (table, caches, limits, metrics).
#[derive(Clone)]
pub struct Gateway {
    /// Admission of requests: limits, authentication, authorization, routes.
    pub admission: Admission,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Upstream settings.
    pub upstream: Upstream,
    /// Where every invoke is logged (`None`: not logged).
    pub access_log: Option<AccessLog>,
    /// The public listeners' open connections, whose requests are counted
    /// for their first-request deadline and idle timeout (`None` when
    /// Pingora's own listeners serve).
    pub connections: Option<Arc<Connections>>,
}

impl Gateway {
    /// Assembles the proxy; `auth` `None` disables authentication
    /// (benchmarks only).
    pub fn new(
        table: Arc<RwLock<Table>>,
        auth: Option<Arc<DecisionCache>>,
        metrics: Arc<Metrics>,
        limits: Limits,
        upstream: Upstream,
    ) -> Self {
        Self {
            admission: Admission::new(table, auth, limits, metrics.in_flight.clone()),
            metrics,
            upstream,
            access_log: None,
            connections: None,
        }
    }
}

/// Pingora's proxies for `gateway`, one per worker (each with its own
/// upstream connector and connection pool, sharing the gateway's state),
/// serving with `server` options and connecting upstream with `client` ones.
///
/// Pingora takes connector options only through its service builder, whose
/// service owns the proxy and runs Pingora's own listeners; the gateway's
/// listeners drive the proxy themselves (they bound handshakes and
/// connections first). So each proxy is moved out of a built service, a
/// proxy of the same gateway (sharing its state, with default options)
/// left in its place and dropped with the service. The gateway's upstream
/// then learns which client pair the connectors loaded.
pub fn build(
    conf: &Arc<ServerConf>,
    gateway: &Gateway,
    server: &HttpServerOptions,
    client: &ConnectorOptions,
    workers: usize,
) -> crate::Result<Vec<Arc<HttpProxy<Gateway>>>> {
    let upstream = gateway.upstream.clone();
    // In service before the connectors load their files: a rotation while
    // they load leaves every peer carrying its pair.
    let loaded = upstream.cert_key.current();
    let proxies = (0..workers.max(1))
        .map(|_| {
            let stand_in = pingora::proxy::http_proxy(conf, gateway.clone());
            let mut service = ProxyServiceBuilder::new(conf, gateway.clone())
                .server_options(server.clone())
                .client_options(client.clone())
                .build();
            service
                .app_logic_mut()
                .map(|built| Arc::new(std::mem::replace(built, stand_in)))
                .ok_or_else(|| {
                    crate::Error::setup("proxy", "Pingora built a proxy service without its proxy")
                })
        })
        .collect::<crate::Result<Vec<_>>>()?;
    upstream.connector_loaded(loaded);
    Ok(proxies)
}

/// Per-request state.
pub struct Ctx {
    invocation_id: String,
    route_label: &'static str,
    started: Instant,
    body_bytes: u64,
    facts: Facts,
    /// The client's frames of a session WebSocket, once upgraded.
    frames: Option<websocket::FrameReader>,
    /// The WebSocket was ended by the gateway: nothing more is forwarded.
    closed: bool,
    /// The request reached the owner's connection: a failure from here on
    /// may come after the owner ran it.
    dispatched: bool,
    /// Counts the request on its connection until the request ends.
    _in_flight: Option<InFlight>,
}

impl Ctx {
    fn route(&self) -> Result<&Route> {
        self.facts
            .route
            .as_ref()
            .ok_or_else(|| Error::explain(ErrorType::InternalError, "no route after admission"))
    }
}

impl Gateway {
    /// The client's bytes of a session WebSocket: every new message is an
    /// operation, authorized again (token expiry included) and held to the
    /// body limit on its own. One that may not pass is replaced by a Close
    /// frame to the owner, who answers the client with its code and reason.
    async fn websocket_body(&self, body: &mut Option<Bytes>, ctx: &mut Ctx) -> Result<()> {
        let Some(b) = body.as_ref() else {
            return Ok(());
        };
        if ctx.closed {
            *body = Some(Bytes::new());
            return Ok(());
        }
        let max = ctx.facts.max_body;
        let frames = ctx
            .frames
            .get_or_insert_with(|| websocket::FrameReader::new(max));
        let mut end = None;
        for ev in frames.feed(b) {
            let (offset, verdict) = match ev {
                websocket::Event::MessageStart { offset } => match &ctx.facts.websocket {
                    Some(auth) => (offset, auth.recheck().await.err()),
                    None => (offset, None),
                },
                websocket::Event::TooBig { offset } => {
                    (offset, Some(websocket::CloseReason::TooBig))
                }
                websocket::Event::Malformed { offset } => {
                    (offset, Some(websocket::CloseReason::Protocol))
                }
            };
            if let Some(reason) = verdict {
                end = Some((offset, reason));
                break;
            }
        }
        if let Some((offset, reason)) = end {
            tracing::info!(
                uid = %ctx.facts.uid,
                code = reason.code(),
                reason = reason.text(),
                "session websocket ended by the gateway"
            );
            let mut out = b.slice(..offset).to_vec();
            out.extend(websocket::close_frame(reason));
            *body = Some(Bytes::from(out));
            ctx.closed = true;
        }
        Ok(())
    }
}

/// Answers `rejection` and ends the request (`Ok(true)`).
async fn reject(session: &mut Session, ctx: &Ctx, rejection: &ApiError) -> Result<bool> {
    respond::reject(session, &ctx.invocation_id, rejection).await?;
    drain(session).await;
    Ok(true)
}

/// How long the gateway goes on reading a request body it answered early.
const DRAIN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// After an answer written before the request body was read (a 413 with
/// the body still arriving, a 401 to a large upload), reads and drops what
/// is left of it, for at most [`DRAIN_TIMEOUT`]: a client still sending —
/// HTTP/1.1 without `Expect`, or HTTP/2 — can then finish and read the
/// answer, instead of a reset connection or stream. A client that asked
/// `Expect: 100-continue` was never told to send: its connection is closed.
async fn drain(session: &mut Session) {
    let expects_continue = session
        .req_header()
        .headers
        .get(http::header::EXPECT)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    if expects_continue {
        session.set_keepalive(None);
        return;
    }
    session.set_total_drain_timeout(Some(DRAIN_TIMEOUT));
    if session.drain_request_body().await.is_err() {
        session.set_keepalive(None);
    }
}

#[async_trait]
impl ProxyHttp for Gateway {
    type CTX = Ctx;

    // Pingora makes the context once the request header is read, just
    // before the request filter: `started` is the request's arrival.
    fn new_ctx(&self) -> Self::CTX {
        Ctx {
            invocation_id: String::new(),
            route_label: "other",
            started: Instant::now(),
            body_bytes: 0,
            facts: Facts::default(),
            frames: None,
            closed: false,
            dispatched: false,
            _in_flight: None,
        }
    }

    async fn request_filter(&self, session: &mut Session, ctx: &mut Self::CTX) -> Result<bool> {
        if let Some(open) = &self.connections {
            let peer = session.client_addr().and_then(|a| a.as_inet());
            let local = session.server_addr().and_then(|a| a.as_inet());
            if let (Some(peer), Some(local)) = (peer, local) {
                ctx._in_flight = open.request(*peer, *local);
            }
        }
        match session.req_header().uri.path() {
            "/healthz" => {
                ctx.route_label = "healthz";
                respond::plain(session, 200, "text/plain", b"ok\n".to_vec()).await?;
                return Ok(true);
            }
            "/version" => {
                ctx.route_label = "version";
                respond::plain(session, 200, "application/json", crate::version_json()).await?;
                return Ok(true);
            }
            "/readyz" => {
                ctx.route_label = "readyz";
                let ready = table::read(self.admission.table()).control_plane_fresh(Instant::now());
                let (status, body) = if ready {
                    (200, "ready\n")
                } else {
                    (503, "ownership table not synced\n")
                };
                respond::plain(session, status, "text/plain", body.as_bytes().to_vec()).await?;
                return Ok(true);
            }
            // `/metrics` is served on `--metrics-listen` only.
            _ => {}
        }
        ctx.route_label = "invoke";
        ctx.invocation_id = match admission::limits::invocation_id(&session.req_header().headers) {
            Ok(id) => id,
            Err(e) => {
                // The caller's id cannot be echoed: the answer gets a fresh one.
                ctx.invocation_id = admission::limits::new_invocation_id();
                return reject(session, ctx, &e.into()).await;
            }
        };
        match self
            .admission
            .admit(session.req_header(), &mut ctx.facts)
            .await
        {
            Ok(()) => Ok(false),
            Err(rejection) => reject(session, ctx, &rejection).await,
        }
    }

    async fn upstream_peer(
        &self,
        _session: &mut Session,
        ctx: &mut Self::CTX,
    ) -> Result<Box<HttpPeer>> {
        let websocket = ctx.facts.session == Some(SessionOp::WebSocket);
        Ok(Box::new(self.upstream.peer(ctx.route()?, websocket)?))
    }

    async fn upstream_request_filter(
        &self,
        _session: &mut Session,
        upstream: &mut RequestHeader,
        ctx: &mut Self::CTX,
    ) -> Result<()> {
        Fencing {
            invocation_id: &ctx.invocation_id,
            uid: &ctx.facts.uid,
            route: ctx.route()?,
            subject: ctx.facts.subject(),
            token_expires: ctx.facts.websocket.as_ref().and_then(|w| w.expires_at),
        }
        .apply(upstream)
    }

    async fn request_body_filter(
        &self,
        _session: &mut Session,
        body: &mut Option<Bytes>,
        _end_of_stream: bool,
        ctx: &mut Self::CTX,
    ) -> Result<()> {
        if ctx.facts.session == Some(SessionOp::WebSocket) {
            // Boxed: its state (a decision-cache check per message) would
            // otherwise size, and be copied into, every body filter call.
            return Box::pin(self.websocket_body(body, ctx)).await;
        }
        if let Some(b) = body {
            ctx.body_bytes += b.len() as u64;
            if ctx.body_bytes > ctx.facts.max_body {
                // Chunked bodies without Content-Length are counted here; the
                // owner sees a reset stream and never invokes the handler.
                // Marked downstream so Pingora stops at once instead of
                // waiting for the owner to answer an unfinished request.
                return Err(Error::explain(
                    ErrorType::HTTPStatus(413),
                    "request body over the limit",
                )
                .into_down());
            }
        }
        Ok(())
    }

    async fn response_filter(
        &self,
        _session: &mut Session,
        resp: &mut ResponseHeader,
        ctx: &mut Self::CTX,
    ) -> Result<()> {
        resp.insert_header(
            api::HEADER_INVOCATION_ID,
            respond::invocation_id_value(&ctx.invocation_id)?,
        )?;
        Ok(())
    }

    fn error_while_proxy(
        &self,
        peer: &HttpPeer,
        _session: &mut Session,
        e: Box<Error>,
        ctx: &mut Self::CTX,
        _client_reused: bool,
    ) -> Box<Error> {
        // The outcome of a dispatched invocation is unknown: never retry.
        // Only what HTTP/2 says was not processed (GOAWAY past the stream,
        // REFUSED_STREAM: Pingora marks those retryable) did not run.
        ctx.dispatched = !matches!(e.retry, pingora::RetryType::Decided(true));
        let mut e = e.more_context(format!("owner {peer}"));
        e.set_retry(false);
        e
    }

    async fn fail_to_proxy(
        &self,
        session: &mut Session,
        e: &Error,
        ctx: &mut Self::CTX,
    ) -> FailToProxy {
        let (uid, invocation_id) = (&ctx.facts.uid, &ctx.invocation_id);
        match rejection::blame(e) {
            rejection::Blame::Client => {
                self.metrics.faults.count(client_faults::Kind::Request);
                tracing::debug!(%uid, %invocation_id, error = %e, "request broken off by the client");
            }
            rejection::Blame::Owner => {
                tracing::warn!(%uid, %invocation_id, error = %e, "request failed at the owner");
            }
            rejection::Blame::Gateway => {
                tracing::error!(%uid, %invocation_id, error = %e, "request failed");
            }
        }
        let status = match rejection::of_proxy_failure(e, ctx.dispatched) {
            Some(rejection) if session.response_written().is_none() => {
                if let Err(err) = respond::reject(session, &ctx.invocation_id, &rejection).await {
                    tracing::debug!(error = %err, "could not write error response");
                }
                if rejection.status() == 413 {
                    drain(session).await;
                }
                rejection.status()
            }
            _ => 0,
        };
        FailToProxy {
            error_code: status,
            can_reuse_downstream: false,
        }
    }

    /// Pingora's own line for a failed request: `fail_to_proxy` has logged
    /// it already, at the level its [`rejection::Blame`] earns.
    fn suppress_error_log(&self, _session: &Session, _ctx: &Self::CTX, _error: &Error) -> bool {
        true
    }

    async fn logging(&self, session: &mut Session, _e: Option<&Error>, ctx: &mut Self::CTX) {
        let code = session.response_written().map_or(0, |r| r.status.as_u16());
        let elapsed = ctx.started.elapsed();
        self.metrics.observe(ctx.route_label, code, elapsed);
        if let Some(log) = &self.access_log
            && ctx.route_label == "invoke"
        {
            let facts = &ctx.facts;
            log.record(&access_log::Entry {
                run_uid: &facts.uid,
                invocation_id: &ctx.invocation_id,
                subject: facts.subject().unwrap_or(""),
                owner: facts.route.as_ref().map_or("", |r| r.pod_name()),
                status: code,
                duration: elapsed,
            });
        }
    }
}
