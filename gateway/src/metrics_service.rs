//! The gateway's metrics on a listener of their own (`--metrics-listen`),
//! plain HTTP: `GET /metrics` in the Prometheus text format, anything else
//! 404. The listener is bound at start and bounded like the public ones
//! ([`crate::listener`]: connection bound, first-request deadline). The public listeners never serve metrics, so callers of Run
//! endpoints see neither the gateway's counters nor its routing table size.

use std::sync::{Arc, RwLock};

use async_trait::async_trait;
use http::Response;
use pingora::apps::http_app::ServeHttp;
use pingora::protocols::http::ServerSession;

use crate::listener::Connections;
use crate::metrics::Metrics;
use crate::table::{self, Table};

/// Serves `GET /metrics`.
pub struct MetricsApp {
    /// The gateway's metrics.
    pub metrics: Arc<Metrics>,
    /// The ownership table, whose size is sampled at each scrape.
    pub table: Arc<RwLock<Table>>,
    /// Its connections' requests are counted (first-request deadline, idle
    /// timeout), as the proxy counts the public listeners'.
    pub connections: Arc<Connections>,
}

fn reply(status: u16, content_type: &str, body: Vec<u8>) -> Response<Vec<u8>> {
    let mut r = Response::new(body);
    *r.status_mut() = http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::OK);
    if let Ok(v) = http::HeaderValue::from_str(content_type) {
        r.headers_mut().insert(http::header::CONTENT_TYPE, v);
    }
    let len = r.body().len();
    r.headers_mut()
        .insert(http::header::CONTENT_LENGTH, http::HeaderValue::from(len));
    r
}

#[async_trait]
impl ServeHttp for MetricsApp {
    async fn response(&self, session: &mut ServerSession) -> Response<Vec<u8>> {
        // In flight until the answer is built; Pingora writes it after, and
        // those writes keep the connection from the idle timeout (up to the
        // next-request deadline, on this HTTP/1.1 listener).
        let _in_flight = match (
            session.client_addr().and_then(|a| a.as_inet()),
            session.server_addr().and_then(|a| a.as_inet()),
        ) {
            (Some(peer), Some(local)) => self.connections.request(*peer, *local),
            _ => None,
        };
        let req = session.req_header();
        if req.uri.path() != "/metrics" {
            return reply(404, "text/plain", b"not found\n".to_vec());
        }
        if req.method != http::Method::GET {
            return reply(405, "text/plain", b"method not allowed\n".to_vec());
        }
        let n = table::read(&self.table).len();
        self.metrics
            .table_entries
            .with_label_values(&["control-plane"])
            .set(n as i64);
        reply(200, "text/plain; version=0.0.4", self.metrics.render())
    }
}
