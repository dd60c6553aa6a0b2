//! WebSocket upgrades on the dataplane, and a socket that ends the way
//! RFC 6455 says a server ends one.
//!
//! runtimed accepts the upgrade itself (not through axum's extractor) so
//! that it keeps the connection: when a socket ends — the client closed
//! it, its token expired, or it broke the protocol — runtimed sends its
//! Close frame, waits a bounded time for the client's, and then shuts the
//! TLS stream down with `close_notify`, so the gateway reads a clean end
//! of stream instead of a truncated one. A protocol fault is answered with
//! the Close code the RFC names (§7.4.1): 1002 for a malformed frame (a
//! one-byte close payload included), 1007 for text that is not UTF-8, 1009
//! for a message over the limit.

use std::time::Duration;

use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::{SinkExt, StreamExt};
use hyper::upgrade::{OnUpgrade, Upgraded};
use hyper_util::rt::TokioIo;
use kruntimes_proto::api::ErrorCode;
use tokio::io::AsyncWriteExt;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role, WebSocketConfig};
use tokio_tungstenite::tungstenite::{Error as WsError, Message};

use crate::api_error::ApiError;

/// How long a closing socket waits for the client's Close frame before it
/// ends the connection anyway.
const CLOSE_WAIT: Duration = Duration::from_secs(5);

/// An accepted upgrade: the `101` answer to send, and the connection once
/// the client has it.
#[derive(Debug)]
pub struct Upgrade {
    on_upgrade: OnUpgrade,
    accept: HeaderValue,
}

/// Checks that `parts` asks for a WebSocket (RFC 6455 §4.2.1) and takes the
/// connection's upgrade from it.
pub fn accept(parts: &mut Parts) -> Result<Upgrade, ApiError> {
    let bad = |why: &str| {
        ApiError::new(
            ErrorCode::BadRequest,
            format!("expected a WebSocket upgrade: {why}"),
        )
    };
    if parts.method != Method::GET {
        return Err(bad("the method must be GET"));
    }
    if !has_token(&parts.headers, header::CONNECTION, "upgrade") {
        return Err(bad("Connection must include upgrade"));
    }
    if !has_token(&parts.headers, header::UPGRADE, "websocket") {
        return Err(bad("Upgrade must be websocket"));
    }
    if parts
        .headers
        .get(header::SEC_WEBSOCKET_VERSION)
        .is_none_or(|v| v.as_bytes() != b"13")
    {
        return Err(bad("Sec-WebSocket-Version must be 13"));
    }
    let key = parts
        .headers
        .get(header::SEC_WEBSOCKET_KEY)
        .ok_or_else(|| bad("Sec-WebSocket-Key is missing"))?;
    let accept = tokio_tungstenite::tungstenite::handshake::derive_accept_key(key.as_bytes());
    let accept = HeaderValue::from_str(&accept).map_err(|_| bad("Sec-WebSocket-Key"))?;
    let on_upgrade = parts
        .extensions
        .remove::<OnUpgrade>()
        .ok_or_else(|| bad("this connection cannot be upgraded (HTTP/1.1 only)"))?;
    Ok(Upgrade { on_upgrade, accept })
}

/// Whether a comma-separated header of `name` lists `token` (ASCII case
/// insensitive).
fn has_token(headers: &HeaderMap, name: header::HeaderName, token: &str) -> bool {
    headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case(token))
}

impl Upgrade {
    /// Answers `101 Switching Protocols` and runs `serve` on the socket
    /// once the connection is upgraded; messages and frames over
    /// `max_message` bytes end it with 1009.
    pub fn respond<F, Fut>(self, max_message: usize, serve: F) -> Response
    where
        F: FnOnce(Socket) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        let Upgrade { on_upgrade, accept } = self;
        tokio::spawn(async move {
            let upgraded = match on_upgrade.await {
                Ok(u) => u,
                Err(e) => {
                    tracing::debug!(error = %e, "WebSocket upgrade did not complete");
                    return;
                }
            };
            let config = WebSocketConfig::default()
                .max_message_size(Some(max_message))
                .max_frame_size(Some(max_message));
            let stream = WebSocketStream::from_raw_socket(
                TokioIo::new(upgraded),
                Role::Server,
                Some(config),
            )
            .await;
            serve(Socket { stream }).await;
        });
        (
            StatusCode::SWITCHING_PROTOCOLS,
            [
                (header::CONNECTION, HeaderValue::from_static("upgrade")),
                (header::UPGRADE, HeaderValue::from_static("websocket")),
                (header::SEC_WEBSOCKET_ACCEPT, accept),
            ],
        )
            .into_response()
    }
}

/// What a socket's client sent.
#[derive(Debug)]
pub enum Received {
    /// A text message.
    Text(String),
    /// A binary message (its bytes are dropped).
    Binary,
    /// The socket ended: the client closed it (its Close frame is answered)
    /// or the connection is gone.
    Ended,
    /// The client broke the protocol; end the socket with this code.
    Fault(Close),
}

/// A Close frame the server ends a socket with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Close {
    /// Its code.
    pub code: u16,
    /// Its reason (at most 123 bytes).
    pub reason: &'static str,
}

impl Close {
    /// 1002: a frame that breaks RFC 6455.
    pub const PROTOCOL: Close = Close {
        code: 1002,
        reason: "protocol error",
    };
    /// 1007: a text message that is not UTF-8.
    pub const INVALID_UTF8: Close = Close {
        code: 1007,
        reason: "text message is not UTF-8",
    };
    /// 1009: a message over the limit.
    pub const TOO_BIG: Close = Close {
        code: 1009,
        reason: "message over the body limit",
    };
}

/// The Close a read error ends the socket with; `None` when the connection
/// itself is gone (nothing can be sent).
pub fn close_for(e: &WsError) -> Option<Close> {
    match e {
        WsError::Utf8(_) => Some(Close::INVALID_UTF8),
        WsError::Capacity(_) => Some(Close::TOO_BIG),
        WsError::Protocol(_) => Some(Close::PROTOCOL),
        _ => None,
    }
}

/// A server-side WebSocket on an upgraded dataplane connection.
pub struct Socket {
    stream: WebSocketStream<TokioIo<Upgraded>>,
}

impl std::fmt::Debug for Socket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Socket").finish_non_exhaustive()
    }
}

impl Socket {
    /// The next message; pings are answered and skipped.
    pub async fn recv(&mut self) -> Received {
        loop {
            return match self.stream.next().await {
                Some(Ok(Message::Text(t))) => Received::Text(t.as_str().to_owned()),
                Some(Ok(Message::Binary(_))) => Received::Binary,
                Some(Ok(Message::Close(_))) | None => Received::Ended,
                Some(Ok(_)) => continue,
                Some(Err(e)) => match close_for(&e) {
                    Some(close) => Received::Fault(close),
                    None => Received::Ended,
                },
            };
        }
    }

    /// Sends one text message.
    pub async fn send_text(&mut self, text: String) -> Result<(), WsError> {
        self.stream.send(Message::Text(text.into())).await
    }

    /// Ends the socket: sends `close` (unless the client closed first, whose
    /// Close is already answered), waits up to [`CLOSE_WAIT`] for the
    /// client's Close, then shuts the connection down with TLS
    /// `close_notify`.
    pub async fn end(mut self, close: Option<Close>) {
        if let Some(c) = close {
            let frame = CloseFrame {
                code: CloseCode::from(c.code),
                reason: c.reason.into(),
            };
            if self.stream.close(Some(frame)).await.is_ok() {
                let _ = tokio::time::timeout(CLOSE_WAIT, async {
                    while let Some(Ok(_)) = self.stream.next().await {}
                })
                .await;
            }
        } else {
            // The reply to the client's Close, if still unsent.
            let _ = self.stream.flush().await;
        }
        let _ = tokio::time::timeout(CLOSE_WAIT, self.stream.get_mut().shutdown()).await;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use tokio_tungstenite::tungstenite::error::{CapacityError, ProtocolError};

    use super::*;

    fn parts(headers: &[(&str, &str)]) -> Parts {
        let mut b = axum::http::Request::get("/x");
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(()).unwrap().into_parts().0
    }

    const GOOD: &[(&str, &str)] = &[
        ("connection", "keep-alive, Upgrade"),
        ("upgrade", "WebSocket"),
        ("sec-websocket-version", "13"),
        ("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ=="),
    ];

    #[test]
    fn an_upgrade_needs_every_header_rfc_6455_names() {
        for (missing, header) in GOOD.iter().enumerate() {
            let headers: Vec<_> = GOOD
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != missing)
                .map(|(_, h)| *h)
                .collect();
            let e = accept(&mut parts(&headers)).unwrap_err();
            assert_eq!(e.code, ErrorCode::BadRequest, "without {header:?}");
        }
        let mut wrong_version = GOOD.to_vec();
        wrong_version[2] = ("sec-websocket-version", "8");
        assert!(accept(&mut parts(&wrong_version)).is_err());
        let mut post = parts(GOOD);
        post.method = Method::POST;
        assert!(accept(&mut post).is_err());
    }

    #[test]
    fn a_request_without_the_connection_upgrade_is_refused_even_when_its_headers_are_right() {
        // Headers alone do not make an upgradable connection (HTTP/2 here).
        let e = accept(&mut parts(GOOD)).unwrap_err();
        assert!(e.message.contains("cannot be upgraded"), "{}", e.message);
    }

    #[test]
    fn read_faults_map_to_the_close_codes_of_rfc_6455() {
        assert_eq!(
            close_for(&WsError::Protocol(ProtocolError::InvalidCloseSequence)),
            Some(Close::PROTOCOL)
        );
        assert_eq!(
            close_for(&WsError::Capacity(CapacityError::MessageTooLong {
                size: 2,
                max_size: 1
            })),
            Some(Close::TOO_BIG)
        );
        assert_eq!(
            close_for(&WsError::Utf8("invalid utf-8 sequence".into())),
            Some(Close::INVALID_UTF8)
        );
        assert_eq!(close_for(&WsError::ConnectionClosed), None);
        assert!(Close::PROTOCOL.reason.len() <= 123);
    }
}
