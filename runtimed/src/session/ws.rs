//! `operations:ws`: one WebSocket per client carrying many operations.
//!
//! Client → runtimed (JSON text frames):
//! `{"type": "send", "operation": {…operations:execute body…}}` and
//! `{"type": "cancel", "operationId": "op-3"}`.
//! runtimed → client: `accepted`, `output` (with `operationId`), `completed`
//! and `failed` events, one per frame, with a `sequence` strictly increasing
//! over the connection. Closing the socket does not cancel admitted work.

use std::sync::Arc;

use axum::response::Response;
use kruntimes_proto::api::ErrorCode;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::{HostedSession, http, ops};
use crate::api_error::ApiError;
use crate::dataplane::websocket::{Close, Received, Socket, Upgrade};

/// Largest client frame (a base64 32 MiB file plus JSON).
const MAX_FRAME: usize = http::MAX_OPERATION_BODY;

/// Accepts the upgrade; the socket closes (4401 "token expired") when the
/// caller's token does, at `expires`.
pub fn upgrade(
    upgrade: Upgrade,
    h: Arc<HostedSession>,
    expires: Option<std::time::SystemTime>,
) -> Response {
    upgrade.respond(MAX_FRAME, move |socket| serve(socket, h, expires))
}

/// When `expires` is reached (never, for `None`).
async fn expiry(expires: Option<std::time::SystemTime>) {
    match expires {
        Some(at) => {
            let left = at
                .duration_since(std::time::SystemTime::now())
                .unwrap_or_default();
            tokio::time::sleep(left).await;
        }
        None => std::future::pending().await,
    }
}

/// A `failed` event; `operation_id` names the operation it ends, if any.
fn failure(e: impl Into<ApiError>, operation_id: Option<&str>) -> Value {
    let mut error = crate::api_error::detail(&e.into(), None);
    if let Some(id) = operation_id {
        error["operationId"] = id.into();
    }
    json!({"type": "failed", "error": error})
}

fn invalid_json(e: serde_json::Error) -> ApiError {
    ApiError::new(ErrorCode::InvalidJson, e.to_string())
}

/// Admits a `send`: validates the operation and queues it; its events go
/// to `events`. Returns the `accepted` event.
fn send(
    h: &Arc<HostedSession>,
    msg: &Value,
    events: &mpsc::Sender<Value>,
) -> Result<Value, ApiError> {
    let req: ops::OperationRequest =
        serde_json::from_value(msg["operation"].clone()).map_err(invalid_json)?;
    let op = http::operation(req)?;
    let (chunks_tx, mut chunks) = mpsc::channel(64);
    let (id, done) = h.session.submit(op, Some(chunks_tx))?;
    let events = events.clone();
    let accepted = json!({"type": "accepted", "operationId": id});
    tokio::spawn(async move {
        while let Some(c) = chunks.recv().await {
            let ev = json!({
                "type": "output",
                "operationId": id,
                "stream": c.stream,
                "data": String::from_utf8_lossy(&c.data),
            });
            // The socket may be gone; the operation still runs.
            let _ = events.send(ev).await;
        }
        let last = match done.await {
            Ok(result) => {
                let mut v = serde_json::to_value(result).unwrap_or_default();
                v["type"] = "completed".into();
                v
            }
            Err(_) => failure(
                ApiError::new(ErrorCode::Internal, "operation was dropped"),
                Some(&id),
            ),
        };
        let _ = events.send(last).await;
    });
    Ok(accepted)
}

/// Handles one client message; events go to `events`.
fn on_message(h: &Arc<HostedSession>, text: &str, events: &mpsc::Sender<Value>) -> Option<Value> {
    let msg: Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => return Some(failure(invalid_json(e), None)),
    };
    match msg["type"].as_str() {
        Some("send") => Some(send(h, &msg, events).unwrap_or_else(|e| failure(e, None))),
        Some("cancel") => {
            let id = msg["operationId"].as_str().unwrap_or_default();
            (!h.session.cancel_operation(id)).then(|| {
                failure(
                    ApiError::new(ErrorCode::NotFound, "no such pending operation"),
                    Some(id),
                )
            })
        }
        _ => Some(failure(
            ApiError::new(ErrorCode::BadRequest, "type must be send or cancel"),
            None,
        )),
    }
}

async fn serve(mut socket: Socket, h: Arc<HostedSession>, expires: Option<std::time::SystemTime>) {
    let (events_tx, mut events) = mpsc::channel::<Value>(256);
    let mut sequence = 0u64;
    let expired = expiry(expires);
    tokio::pin!(expired);
    let close = loop {
        let out = tokio::select! {
            () = &mut expired => break Some(Close { code: 4401, reason: "token expired" }),
            msg = socket.recv() => match msg {
                Received::Text(text) => on_message(&h, &text, &events_tx),
                Received::Binary => Some(failure(ApiError::new(ErrorCode::BadRequest, "send JSON text frames"), None)),
                Received::Ended => break None,
                Received::Fault(close) => break Some(close),
            },
            Some(ev) = events.recv() => Some(ev),
        };
        if let Some(mut ev) = out {
            sequence += 1;
            ev["sequence"] = sequence.into();
            if socket.send_text(ev.to_string()).await.is_err() {
                break None;
            }
        }
    };
    socket.end(close).await;
}
