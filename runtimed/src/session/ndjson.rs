//! The NDJSON answer of a streaming session route (`processes/{pid}:connect`,
//! `files:watch`): each event of the Runtime Server's stream as one JSON
//! line, a `keepalive` line after [`KEEPALIVE`] of silence (so no proxy's
//! read timeout ends a quiet stream), and a `failed` line when the server's
//! stream breaks before its last event.

use std::time::Duration;

use axum::body::Body;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use kruntimes_proto::api::ErrorCode;
use serde_json::{Value, json};
use tokio_stream::StreamExt;

use crate::api_error::ApiError;

/// How long a stream may be silent before a `keepalive` line.
pub const KEEPALIVE: Duration = Duration::from_secs(20);

/// One JSON value as a line.
pub fn line(v: &Value) -> Bytes {
    let mut b = v.to_string().into_bytes();
    b.push(b'\n');
    Bytes::from(b)
}

/// Streams `events` as NDJSON: `line_of` turns each into its line and
/// says whether it is the last (`None`: nothing to send); a stream that
/// breaks ends with a `failed` line, and one that ends before its last
/// event too when `cut_short` says why that is a failure (`None`: a stream
/// that may just end, as a watch does when its session closes). Stops when
/// the client goes away.
pub fn stream<T, F>(
    mut events: tonic::Streaming<T>,
    line_of: F,
    cut_short: Option<&'static str>,
    invocation_id: String,
) -> Response
where
    T: Send + 'static,
    F: Fn(T) -> Option<(Value, bool)> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(64);
    tokio::spawn(async move {
        loop {
            let next = tokio::select! {
                n = events.next() => n,
                () = tokio::time::sleep(KEEPALIVE) => {
                    if tx.send(Ok(line(&json!({"type": "keepalive"})))).await.is_err() {
                        return;
                    }
                    continue;
                }
                () = tx.closed() => return,
            };
            let error = match next {
                Some(Ok(e)) => {
                    let Some((v, last)) = line_of(e) else {
                        continue;
                    };
                    if tx.send(Ok(line(&v))).await.is_err() || last {
                        return;
                    }
                    continue;
                }
                Some(Err(s)) => super::process::api_error(s.into()),
                None => match cut_short {
                    Some(why) => ApiError::new(ErrorCode::Internal, why),
                    None => return,
                },
            };
            let failed = json!({
                "type": "failed",
                "error": crate::api_error::detail(&error, Some(&invocation_id)),
            });
            let _ = tx.send(Ok(line(&failed))).await;
            return;
        }
    });
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/x-ndjson")],
        Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(rx)),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_is_compact_json_and_a_newline() {
        assert_eq!(
            &line(&json!({"type": "keepalive"}))[..],
            b"{\"type\":\"keepalive\"}\n"
        );
    }
}
