//! Reading the gateway's answers: JSON bodies, typed errors, a session's
//! WebSocket, Prometheus series.

// Test helpers panic on failure: that is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::Stack;

/// The JSON body of `resp`; panics, showing the body, when it is not JSON.
pub async fn json(resp: reqwest::Response) -> serde_json::Value {
    let bytes = resp.bytes().await.expect("body");
    serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| panic!("not JSON: {}", String::from_utf8_lossy(&bytes)))
}

/// Asserts a typed error response and returns its body.
pub async fn expect_error(resp: reqwest::Response, status: u16, code: &str) -> serde_json::Value {
    assert_eq!(resp.status().as_u16(), status, "status for {code}");
    let has_id = resp.headers().contains_key("x-kruntimes-invocation-id");
    let retry_after = resp.headers().get("retry-after").cloned();
    let body = json(resp).await;
    assert_eq!(body["error"]["code"], code, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "{body}"
    );
    assert!(has_id, "invocation id header on {code}");
    if status == 429 || status == 503 {
        assert!(retry_after.is_some(), "Retry-After on {status} {code}");
    }
    body
}

/// A WebSocket client of a session's `operations:ws`.
pub type WebSocket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Opens `operations:ws` of the session at `endpoint`, with `token` if any.
pub async fn websocket(
    stack: &Stack,
    endpoint: &str,
    token: Option<&str>,
) -> Result<WebSocket, tokio_tungstenite::tungstenite::Error> {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let url = format!("{endpoint}/operations:ws").replace("https://", "wss://");
    let ca = stack.state_dir().join("pki/public-ca.crt");
    let tls = kruntimes_certs::client_config(&ca, None, &[b"http/1.1"]).unwrap();
    let mut req = url.into_client_request().unwrap();
    if let Some(t) = token {
        req.headers_mut()
            .insert("authorization", format!("Bearer {t}").parse().unwrap());
    }
    let connector = tokio_tungstenite::Connector::Rustls(std::sync::Arc::new(tls));
    tokio_tungstenite::connect_async_tls_with_config(req, None, false, Some(connector))
        .await
        .map(|(ws, _)| ws)
}

/// A WebSocket `send` frame for `op`.
pub fn ws_send(op: serde_json::Value) -> tokio_tungstenite::tungstenite::Message {
    tokio_tungstenite::tungstenite::Message::Text(
        serde_json::json!({"type": "send", "operation": op})
            .to_string()
            .into(),
    )
}

/// The value of the series `series` (its name and labels, as exposed) in
/// the Prometheus text `metrics`, if it is there. Series resolved at start
/// are exposed at 0 before any use: read the value, not the presence.
pub fn series_value(metrics: &str, series: &str) -> Option<f64> {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
}
