//! Faults a client causes — a malformed HTTP/2 frame, a TLS or HTTP/2
//! handshake that breaks off, a request it abandons — are counted in
//! `kruntimes_gateway_client_faults_total{kind}`, never logged at WARN or
//! ERROR: anyone who can open a connection could otherwise fill the log or
//! page an operator. The gateway logs the requests such a fault ends at
//! DEBUG itself; Pingora and h2 log some faults at ERROR or WARN: those
//! events [`ClientFaults`] names to the log layer
//! ([`kruntimes_process::quiet`]), which drops them, and counts them here.
//! h2's warnings are all taken for clients': the gateway's own gRPC
//! streams (the ownership watch) use h2 as well, and their failures show
//! in the watch's own lines, not h2's.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tracing::Level;

/// What kind of client fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// An HTTP/2 protocol error: a bad frame, a broken handshake.
    Http2,
    /// An HTTP/1 request that could not be read (malformed, cut short).
    Http1,
    /// A TLS handshake that failed or timed out.
    Tls,
    /// A request whose client went away or broke the stream while it was
    /// being answered.
    Request,
}

impl Kind {
    /// Every kind, in the order of [`Kind::label`]'s counters.
    pub const ALL: [Kind; 4] = [Kind::Http2, Kind::Http1, Kind::Tls, Kind::Request];

    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Kind::Http2 => "http2",
            Kind::Http1 => "http1",
            Kind::Tls => "tls",
            Kind::Request => "request",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Which library log event is a client fault. Pure.
pub fn classify(target: &str, message: &str) -> Option<Kind> {
    if target == "h2" || target.starts_with("h2::") {
        // h2 logs at WARN only what its peer did wrong.
        return Some(Kind::Http2);
    }
    if target.starts_with("pingora_core::apps") {
        if message.starts_with("H2 handshake error") {
            return Some(Kind::Http2);
        }
        if message.starts_with("HTTP server fails to read from downstream") {
            return Some(Kind::Http1);
        }
    }
    if target.starts_with("pingora_core::services::listening")
        && message.starts_with("Downstream handshake")
    {
        return Some(Kind::Tls);
    }
    if target.starts_with("pingora_proxy") {
        if message.starts_with("Fail to proxy: Downstream") {
            return Some(Kind::Http1);
        }
        if message.starts_with("failed to send error response to downstream") {
            return Some(Kind::Request);
        }
    }
    None
}

/// Counts of client faults by kind, shared by the log layer and the
/// metrics.
#[derive(Debug, Clone, Default)]
pub struct ClientFaults {
    counts: Arc<[AtomicU64; 4]>,
}

impl ClientFaults {
    /// Counts one fault of `kind`.
    pub fn count(&self, kind: Kind) {
        self.counts[kind.index()].fetch_add(1, Ordering::Relaxed);
    }

    /// Faults of `kind` so far.
    pub fn get(&self, kind: Kind) -> u64 {
        self.counts[kind.index()].load(Ordering::Relaxed)
    }
}

impl kruntimes_process::quiet::Quiet for ClientFaults {
    fn quiet(&self, target: &str, _level: Level, message: &str) -> bool {
        let Some(kind) = classify(target, message) else {
            return false;
        };
        self.count(kind);
        true
    }
}

#[cfg(test)]
mod tests {
    use kruntimes_process::quiet::Quiet;

    use super::*;

    #[test]
    fn the_library_lines_a_client_can_cause_are_client_faults() {
        let cases = [
            (
                "h2::proto::ping_pong",
                "recv PING ack that we never sent",
                Some(Kind::Http2),
            ),
            (
                "h2::codec::framed_read",
                "connection error PROTOCOL_ERROR",
                Some(Kind::Http2),
            ),
            (
                "pingora_core::apps",
                "H2 handshake error  HandshakeError context: while h2 handshaking",
                Some(Kind::Http2),
            ),
            (
                "pingora_core::apps::http_app",
                "HTTP server fails to read from downstream: ReadError",
                Some(Kind::Http1),
            ),
            (
                "pingora_core::services::listening",
                "Downstream handshake error from 10.0.0.1:5000: TLSHandshakeFailure",
                Some(Kind::Tls),
            ),
            (
                "pingora_proxy",
                "Fail to proxy: Downstream ReadError context: …, downstream session type: HTTP/1.1",
                Some(Kind::Http1),
            ),
            (
                "pingora_proxy",
                "failed to send error response to downstream: WriteError",
                Some(Kind::Request),
            ),
        ];
        for (target, message, kind) in cases {
            assert_eq!(classify(target, message), kind, "{target}: {message}");
        }
    }

    #[test]
    fn everything_else_is_logged_as_it_was() {
        let cases = [
            // An upstream (owner) failure is an operator's business.
            ("pingora_proxy", "Fail to proxy: Upstream ConnectRefused"),
            (
                "pingora_core::services::listening",
                "Accept() failed Too many open files",
            ),
            ("pingora_core::server", "Server starting"),
            ("kruntimes_gateway::proxy", "H2 handshake error"),
            ("h2o", "recv PING ack that we never sent"),
        ];
        for (target, message) in cases {
            assert_eq!(classify(target, message), None, "{target}: {message}");
        }
    }

    #[test]
    fn quieted_lines_are_counted_by_kind() {
        let faults = ClientFaults::default();
        assert!(faults.quiet("h2::proto", Level::WARN, "bad frame"));
        assert!(faults.quiet("h2::proto", Level::WARN, "bad frame"));
        assert!(!faults.quiet("pingora_core::server", Level::ERROR, "boom"));
        assert_eq!(faults.get(Kind::Http2), 2);
        assert_eq!(Kind::ALL.iter().map(|k| faults.get(*k)).sum::<u64>(), 2);
        for (i, k) in Kind::ALL.iter().enumerate() {
            assert_eq!(k.index(), i);
        }
    }
}
