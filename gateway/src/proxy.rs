//! The Pingora proxy: one [`Gateway`] implementing [`ProxyHttp`].
//!
//! `request_filter` answers the health and metrics endpoints, reads the
//! invocation id, then runs [`Admission`] — limits, target, authentication
//! and authorization, route — answering its [`Rejection`] as typed JSON.
//! `upstream_peer` then names the owner (HTTP/2 over mTLS, pooled by
//! Pingora), `upstream_request_filter` strips the bearer token and adds
//! fencing headers, and `fail_to_proxy` turns upstream failures into
//! 503/504 without ever retrying a dispatched request.

use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use kruntimes_proto::api::{self, ErrorBody, ErrorCode, SessionOp};
use pingora::ErrorType;
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::prelude::HttpPeer;
use pingora::protocols::ALPN;
use pingora::protocols::tls::CaType;
use pingora::proxy::{FailToProxy, ProxyHttp, Session};
use pingora::utils::tls::CertKey;
use pingora::{Error, Result};

use crate::admission::{self, Admission, Facts, Limits};
use crate::auth::cache::DecisionCache;
use crate::metrics::Metrics;
use crate::rejection::Rejection;
use crate::table::{self, Route, Table};

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
    /// Admission of requests: limits, authentication, authorization, routes.
    pub admission: Admission,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Upstream settings.
    pub upstream: Upstream,
    /// Whether every invoke is logged.
    pub access_log: bool,
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
            access_log: true,
        }
    }
}

/// Per-request state.
pub struct Ctx {
    invocation_id: String,
    route_label: &'static str,
    started: Instant,
    body_bytes: u64,
    facts: Facts,
}

impl Ctx {
    fn route(&self) -> Result<&Route> {
        self.facts
            .route
            .as_ref()
            .ok_or_else(|| Error::explain(ErrorType::InternalError, "no route after admission"))
    }
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

/// Answers `rejection` and ends the request (`Ok(true)`).
async fn reject(session: &mut Session, ctx: &Ctx, rejection: &Rejection) -> Result<bool> {
    respond(session, ctx, rejection).await?;
    Ok(true)
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

#[async_trait]
impl ProxyHttp for Gateway {
    type CTX = Ctx;

    fn new_ctx(&self) -> Self::CTX {
        Ctx {
            invocation_id: String::new(),
            route_label: "other",
            started: Instant::now(),
            body_bytes: 0,
            facts: Facts::default(),
        }
    }

    async fn request_filter(&self, session: &mut Session, ctx: &mut Self::CTX) -> Result<bool> {
        ctx.started = Instant::now();
        match session.req_header().uri.path() {
            "/healthz" => {
                ctx.route_label = "healthz";
                respond_plain(session, 200, "text/plain", b"ok\n".to_vec()).await?;
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
                respond_plain(session, status, "text/plain", body.as_bytes().to_vec()).await?;
                return Ok(true);
            }
            "/metrics" => {
                ctx.route_label = "metrics";
                let n = table::read(self.admission.table()).len();
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
        let route = ctx.route()?;
        let addr: SocketAddr = route.address.parse().map_err(|_| {
            Error::explain(
                ErrorType::ConnectError,
                "owner address is not a socket address",
            )
        })?;
        let mut peer = HttpPeer::new(addr, true, self.upstream.server_name.clone());
        let websocket = ctx.facts.session == Some(SessionOp::WebSocket);
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
        let route = ctx.route()?;
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
        upstream.insert_header(api::HEADER_RUN_UID, ctx.facts.uid.as_str())?;
        upstream.insert_header(api::HEADER_OWNER_POD_UID, route.pod_uid.as_str())?;
        upstream.insert_header(api::HEADER_ATTEMPT, route.attempt.to_string())?;
        upstream.insert_header(api::HEADER_HOP, api::HOP_GATEWAY)?;
        if let Some(s) = &ctx.facts.subject {
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
            uid = %ctx.facts.uid,
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
            let facts = &ctx.facts;
            tracing::info!(
                run_uid = %facts.uid,
                invocation_id = %ctx.invocation_id,
                subject = facts.subject.as_deref().unwrap_or(""),
                owner = facts.route.as_ref().map_or("", |r| r.pod_name.as_str()),
                status = code,
                duration_us = elapsed.as_micros() as u64,
                "invoke"
            );
        }
    }
}
