//! The Pingora proxy: one [`Gateway`] implementing [`ProxyHttp`].
//!
//! `request_filter` does everything that decides whether a request may leave
//! the gateway — invocation id, header and body-size limits, the global
//! in-flight limit, authentication, the route lookup and authorization —
//! answering typed JSON errors itself. `upstream_peer` then names the owner
//! (HTTP/2 over mTLS, pooled by Pingora), `upstream_request_filter` strips
//! the bearer token and adds fencing headers, and `fail_to_proxy` turns
//! upstream failures into 503/504 without ever retrying a dispatched request.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use kruntimes_proto::api::{self, ApiPath, ErrorBody, ErrorCode, SessionOp};
use pingora::ErrorType;
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::prelude::HttpPeer;
use pingora::protocols::ALPN;
use pingora::protocols::tls::CaType;
use pingora::proxy::{FailToProxy, ProxyHttp, Session};
use pingora::utils::tls::CertKey;
use pingora::{Error, Result};

use crate::auth::cache::{DecisionCache, Outcome};
use crate::auth::{Target, Verb};
use crate::metrics::Metrics;
use crate::rejection::Rejection;
use crate::table::{Route, Table};
use kruntimes_proto::ownership::v1::Mode;

/// Request limits.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Largest request body of invokes (413 beyond).
    pub max_body_bytes: u64,
    /// Largest request body of session operations (a base64 32 MiB file).
    pub max_session_body_bytes: u64,
    /// Largest total of header names and values (431 beyond).
    pub max_header_bytes: usize,
    /// Requests in flight at once (503 `Overloaded` beyond).
    pub max_in_flight: usize,
}

/// Upstream (gateway → runtimed) connection settings.
pub struct Upstream {
    /// Internal CA that runtimed certificates chain to.
    pub ca: Arc<CaType>,
    /// The gateway's client certificate and key.
    pub cert_key: Arc<CertKey>,
    /// TLS server name of runtimed certificates.
    pub server_name: String,
    /// Bound on connecting to an owner.
    pub connect_timeout: Duration,
    /// Invocation timeout assumed when the table has none.
    pub default_timeout: Duration,
}

/// The proxy.
pub struct Gateway {
    /// Merged ownership table.
    pub table: Arc<RwLock<Table>>,
    /// Decision cache; `None` disables authentication (benchmarks only).
    pub auth: Option<Arc<DecisionCache>>,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Limits.
    pub limits: Limits,
    /// Upstream settings.
    pub upstream: Upstream,
    /// Whether every invoke is logged.
    pub access_log: bool,
    in_flight: Arc<AtomicUsize>,
}

impl Gateway {
    /// Assembles the proxy.
    pub fn new(
        table: Arc<RwLock<Table>>,
        auth: Option<Arc<DecisionCache>>,
        metrics: Arc<Metrics>,
        limits: Limits,
        upstream: Upstream,
    ) -> Self {
        Self {
            table,
            auth,
            metrics,
            limits,
            upstream,
            access_log: true,
            in_flight: Arc::new(AtomicUsize::new(0)),
        }
    }
}

/// Releases an in-flight slot when the request ends.
pub struct InFlight {
    counter: Arc<AtomicUsize>,
    gauge: prometheus::IntGauge,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.counter.fetch_sub(1, Ordering::AcqRel);
        self.gauge.dec();
    }
}

/// Per-request state.
pub struct Ctx {
    invocation_id: String,
    route_label: &'static str,
    started: Instant,
    route: Option<Route>,
    uid: String,
    subject: Option<String>,
    body_bytes: u64,
    max_body: u64,
    session: Option<SessionOp>,
    _in_flight: Option<InFlight>,
}

fn bearer(req: &RequestHeader) -> Option<&str> {
    let v = req
        .headers
        .get(http::header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    let (scheme, token) = v.split_once(' ')?;
    (scheme.eq_ignore_ascii_case("bearer") && !token.trim().is_empty()).then(|| token.trim())
}

fn header_bytes(req: &RequestHeader) -> usize {
    req.headers
        .iter()
        .map(|(k, v)| k.as_str().len() + v.len())
        .sum::<usize>()
        + req.uri.path_and_query().map_or(0, |pq| pq.as_str().len())
}

/// Writes a typed JSON error response.
async fn respond(session: &mut Session, ctx: &Ctx, rejection: &Rejection) -> Result<()> {
    let code = rejection.code;
    let body = ErrorBody::new(code, rejection.message.as_ref(), Some(&ctx.invocation_id)).to_json();
    let mut resp = ResponseHeader::build(code.status(), Some(5))?;
    resp.insert_header(http::header::CONTENT_TYPE, "application/json")?;
    resp.insert_header(http::header::CONTENT_LENGTH, body.len().to_string())?;
    resp.insert_header(api::HEADER_INVOCATION_ID, ctx.invocation_id.as_str())?;
    if let Some(secs) = code.retry_after_secs() {
        resp.insert_header(http::header::RETRY_AFTER, secs.to_string())?;
    }
    if matches!(
        code,
        ErrorCode::PayloadTooLarge | ErrorCode::HeadersTooLarge
    ) {
        // The unread body makes the connection unusable for another request.
        session.set_keepalive(None);
    }
    session.write_response_header(Box::new(resp), false).await?;
    session
        .write_response_body(Some(Bytes::from(body)), true)
        .await
}

async fn respond_plain(
    session: &mut Session,
    status: u16,
    content_type: &str,
    body: Vec<u8>,
) -> Result<()> {
    let mut resp = ResponseHeader::build(status, Some(3))?;
    resp.insert_header(http::header::CONTENT_TYPE, content_type)?;
    resp.insert_header(http::header::CONTENT_LENGTH, body.len().to_string())?;
    session.write_response_header(Box::new(resp), false).await?;
    session
        .write_response_body(Some(Bytes::from(body)), true)
        .await
}

impl Gateway {
    /// Checks everything before the request may leave; the rejection is
    /// answered by the caller.
    async fn admit(
        &self,
        session: &mut Session,
        ctx: &mut Ctx,
    ) -> std::result::Result<(), Rejection> {
        let req = session.req_header();
        if header_bytes(req) > self.limits.max_header_bytes {
            return Err(Rejection::new(
                ErrorCode::HeadersTooLarge,
                "request headers exceed the limit",
            ));
        }
        let path = req.uri.path().to_owned();
        let (namespace, runtime, uid) = match api::parse_path(&path)? {
            ApiPath::Invoke {
                namespace,
                runtime,
                uid,
            } => (namespace.to_owned(), runtime.to_owned(), uid.to_owned()),
            ApiPath::Session {
                namespace,
                runtime,
                uid,
                op,
            } => {
                ctx.session = Some(op);
                (namespace.to_owned(), runtime.to_owned(), uid.to_owned())
            }
            _ => return Err(Rejection::not_a_run_route()),
        };
        ctx.uid = uid.clone();
        let (method, verb) = match ctx.session {
            None => (http::Method::POST, Verb::Invoke),
            Some(SessionOp::Execute | SessionOp::Stream) => (http::Method::POST, Verb::Session),
            Some(_) => (http::Method::GET, Verb::Session),
        };
        if req.method != method {
            return Err(Rejection::method_not_allowed(&method));
        }
        ctx.max_body = if ctx.session.is_some() {
            self.limits.max_session_body_bytes
        } else {
            self.limits.max_body_bytes
        };
        let content_length = req
            .headers
            .get(http::header::CONTENT_LENGTH)
            .map(|v| v.to_str().ok().and_then(|s| s.parse::<u64>().ok()));
        match content_length {
            Some(None) => {
                return Err(Rejection::new(
                    ErrorCode::BadRequest,
                    "invalid content-length",
                ));
            }
            Some(Some(n)) if n > ctx.max_body => {
                return Err(Rejection::new(
                    ErrorCode::PayloadTooLarge,
                    format!("body exceeds {} bytes", ctx.max_body),
                ));
            }
            _ => {}
        }
        let token = bearer(req).map(str::to_owned);
        let previous = self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.metrics.in_flight.inc();
        ctx._in_flight = Some(InFlight {
            counter: self.in_flight.clone(),
            gauge: self.metrics.in_flight.clone(),
        });
        if previous >= self.limits.max_in_flight {
            return Err(Rejection::new(
                ErrorCode::Overloaded,
                "gateway is at its in-flight limit",
            ));
        }
        if self.auth.is_some() && token.is_none() {
            return Err(Rejection::missing_token());
        }
        let routed = {
            let table = self.table.read().unwrap_or_else(|p| p.into_inner());
            table
                .route(&namespace, &runtime, &uid, Instant::now())
                .map_err(|e| (e, table.run_name(&namespace, &runtime, &uid)))
        };
        if let (Some(auth), Some(token)) = (&self.auth, token.as_deref()) {
            // Authorization names the Run, which only the table knows: an
            // unknown UID is answered 404 once the caller is authenticated.
            let run_name = match &routed {
                Ok(r) => Some(r.run_name.clone()),
                Err((_, name)) => name.clone(),
            };
            let outcome = match run_name {
                Some(name) => {
                    let target = Target {
                        namespace: namespace.clone(),
                        name,
                        uid: uid.clone(),
                        verb,
                    };
                    auth.check(token, &target).await?
                }
                None => match auth.authenticate(token).await? {
                    Ok(_) => return Err(Rejection::unknown_run()),
                    Err(why) => Outcome::Unauthenticated(why),
                },
            };
            match outcome {
                Outcome::Allowed(id) => ctx.subject = Some(id.subject.clone()),
                Outcome::Denied(id) => {
                    return Err(Rejection::forbidden(&id.subject, verb, &namespace));
                }
                Outcome::Unauthenticated(why) => return Err(Rejection::unauthenticated(&why)),
            }
        }
        match routed {
            Ok(r) => {
                let want = if ctx.session.is_some() {
                    Mode::Session
                } else {
                    Mode::Function
                };
                if r.mode != want as i32 {
                    return Err(Rejection::wrong_mode(&uid, ctx.session.is_some()));
                }
                ctx.route = Some(r);
                Ok(())
            }
            Err((e, _)) => Err(e.into()),
        }
    }
}

#[async_trait]
impl ProxyHttp for Gateway {
    type CTX = Ctx;

    fn new_ctx(&self) -> Self::CTX {
        Ctx {
            invocation_id: String::new(),
            route_label: "other",
            started: Instant::now(),
            route: None,
            uid: String::new(),
            subject: None,
            body_bytes: 0,
            max_body: 0,
            session: None,
            _in_flight: None,
        }
    }

    async fn request_filter(&self, session: &mut Session, ctx: &mut Self::CTX) -> Result<bool> {
        ctx.started = Instant::now();
        let path = session.req_header().uri.path().to_owned();
        match path.as_str() {
            "/healthz" => {
                ctx.route_label = "healthz";
                respond_plain(session, 200, "text/plain", b"ok\n".to_vec()).await?;
                return Ok(true);
            }
            "/readyz" => {
                ctx.route_label = "readyz";
                let ready = self
                    .table
                    .read()
                    .unwrap_or_else(|p| p.into_inner())
                    .control_plane_fresh(Instant::now());
                let (status, body) = if ready {
                    (200, "ready\n")
                } else {
                    (503, "ownership table not synced\n")
                };
                respond_plain(session, status, "text/plain", body.as_bytes().to_vec()).await?;
                return Ok(true);
            }
            "/metrics" => {
                ctx.route_label = "metrics";
                let n = self.table.read().unwrap_or_else(|p| p.into_inner()).len();
                self.metrics
                    .table_entries
                    .with_label_values(&["control-plane"])
                    .set(n as i64);
                let body = self.metrics.render();
                respond_plain(session, 200, "text/plain; version=0.0.4", body).await?;
                return Ok(true);
            }
            _ => {}
        }
        ctx.route_label = "invoke";
        let supplied = session
            .req_header()
            .headers
            .get(api::HEADER_INVOCATION_ID)
            .map(|v| v.to_str().map(str::to_owned));
        ctx.invocation_id = match supplied {
            Some(Ok(id)) if api::valid_invocation_id(&id) => id,
            None => uuid::Uuid::new_v4().to_string(),
            Some(_) => {
                ctx.invocation_id = uuid::Uuid::new_v4().to_string();
                let rejection = Rejection::new(
                    ErrorCode::InvalidInvocationId,
                    "invocation id must be 1-128 visible ASCII bytes",
                );
                respond(session, ctx, &rejection).await?;
                return Ok(true);
            }
        };
        if let Err(rejection) = self.admit(session, ctx).await {
            respond(session, ctx, &rejection).await?;
            return Ok(true);
        }
        Ok(false)
    }

    async fn upstream_peer(
        &self,
        _session: &mut Session,
        ctx: &mut Self::CTX,
    ) -> Result<Box<HttpPeer>> {
        let route = ctx
            .route
            .as_ref()
            .ok_or_else(|| Error::explain(ErrorType::InternalError, "no route after admission"))?;
        let addr: SocketAddr = route.address.parse().map_err(|_| {
            Error::explain(
                ErrorType::ConnectError,
                "owner address is not a socket address",
            )
        })?;
        let mut peer = HttpPeer::new(addr, true, self.upstream.server_name.clone());
        let websocket = ctx.session == Some(SessionOp::WebSocket);
        peer.client_cert_key = Some(self.upstream.cert_key.clone());
        let o = &mut peer.options;
        // WebSockets upgrade an HTTP/1.1 connection; everything else is
        // multiplexed over pooled HTTP/2.
        o.alpn = if websocket { ALPN::H1 } else { ALPN::H2 };
        o.ca = Some(self.upstream.ca.clone());
        o.connection_timeout = Some(self.upstream.connect_timeout);
        o.total_connection_timeout = Some(self.upstream.connect_timeout * 2);
        // runtimed enforces the invocation deadline and answers 504 itself;
        // this is the backstop for an owner that stops answering.
        let timeout = route.timeout.unwrap_or(self.upstream.default_timeout);
        o.read_timeout = if websocket {
            // A session socket may idle between operations; runtimed's idle
            // timeout bounds it.
            None
        } else {
            Some(timeout + Duration::from_secs(5))
        };
        o.write_timeout = Some(Duration::from_secs(10));
        o.idle_timeout = Some(Duration::from_secs(90));
        o.max_h2_streams = 128;
        Ok(Box::new(peer))
    }

    async fn upstream_request_filter(
        &self,
        _session: &mut Session,
        upstream: &mut RequestHeader,
        ctx: &mut Self::CTX,
    ) -> Result<()> {
        let Some(route) = ctx.route.as_ref() else {
            return Err(Error::explain(
                ErrorType::InternalError,
                "no route after admission",
            ));
        };
        // The bearer token never goes past the gateway, and callers cannot
        // forge the fencing headers.
        upstream.remove_header(&http::header::AUTHORIZATION);
        let spoofable: Vec<_> = upstream
            .headers
            .keys()
            .filter(|k| k.as_str().starts_with("x-kruntimes-"))
            .cloned()
            .collect();
        for k in spoofable {
            upstream.remove_header(&k);
        }
        upstream.insert_header(api::HEADER_INVOCATION_ID, ctx.invocation_id.as_str())?;
        upstream.insert_header(api::HEADER_RUN_UID, ctx.uid.as_str())?;
        upstream.insert_header(api::HEADER_OWNER_POD_UID, route.pod_uid.as_str())?;
        upstream.insert_header(api::HEADER_ATTEMPT, route.attempt.to_string())?;
        upstream.insert_header(api::HEADER_HOP, api::HOP_GATEWAY)?;
        if let Some(s) = &ctx.subject {
            upstream.insert_header(api::HEADER_SUBJECT, s.as_str())?;
        }
        Ok(())
    }

    async fn request_body_filter(
        &self,
        _session: &mut Session,
        body: &mut Option<Bytes>,
        _end_of_stream: bool,
        ctx: &mut Self::CTX,
    ) -> Result<()> {
        if let Some(b) = body {
            ctx.body_bytes += b.len() as u64;
            if ctx.body_bytes > ctx.max_body {
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
        resp.insert_header(api::HEADER_INVOCATION_ID, ctx.invocation_id.as_str())?;
        Ok(())
    }

    fn error_while_proxy(
        &self,
        peer: &HttpPeer,
        _session: &mut Session,
        e: Box<Error>,
        _ctx: &mut Self::CTX,
        _client_reused: bool,
    ) -> Box<Error> {
        // The outcome of a dispatched invocation is unknown: never retry.
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
        use ErrorType::*;
        let code = match e.etype() {
            HTTPStatus(413) => Some(ErrorCode::PayloadTooLarge),
            ReadTimedout | WriteTimedout => Some(ErrorCode::DeadlineExceeded),
            ConnectTimedout | ConnectRefused | ConnectNoRoute | ConnectError
            | TLSHandshakeFailure | TLSHandshakeTimedout | InvalidCert | HandshakeError => {
                Some(ErrorCode::OwnerUnavailable)
            }
            _ => match e.esource() {
                pingora::ErrorSource::Upstream => Some(ErrorCode::OwnerUnavailable),
                pingora::ErrorSource::Downstream => match e.etype() {
                    WriteError | ReadError | ConnectionClosed => None,
                    _ => Some(ErrorCode::BadRequest),
                },
                _ => Some(ErrorCode::Internal),
            },
        };
        tracing::warn!(
            uid = %ctx.uid,
            invocation_id = %ctx.invocation_id,
            error = %e,
            "request failed"
        );
        let status = match code {
            Some(code) if session.response_written().is_none() => {
                let message = match code {
                    ErrorCode::OwnerUnavailable => "owner is unreachable",
                    ErrorCode::DeadlineExceeded => "owner did not answer before the deadline",
                    ErrorCode::PayloadTooLarge => "request body over the limit",
                    _ => "request failed",
                };
                if let Err(err) = respond(session, ctx, &Rejection::new(code, message)).await {
                    tracing::debug!(error = %err, "could not write error response");
                }
                code.status()
            }
            _ => 0,
        };
        FailToProxy {
            error_code: status,
            can_reuse_downstream: false,
        }
    }

    async fn logging(&self, session: &mut Session, _e: Option<&Error>, ctx: &mut Self::CTX) {
        let code = session.response_written().map_or(0, |r| r.status.as_u16());
        let elapsed = ctx.started.elapsed();
        self.metrics
            .requests
            .with_label_values(&[ctx.route_label, &code.to_string()])
            .inc();
        self.metrics
            .latency
            .with_label_values(&[ctx.route_label])
            .observe(elapsed.as_secs_f64());
        if self.access_log && ctx.route_label == "invoke" {
            tracing::info!(
                run_uid = %ctx.uid,
                invocation_id = %ctx.invocation_id,
                subject = ctx.subject.as_deref().unwrap_or(""),
                owner = ctx.route.as_ref().map_or("", |r| r.pod_name.as_str()),
                status = code,
                duration_us = elapsed.as_micros() as u64,
                "invoke"
            );
        }
    }
}
