//! `operations:ws`: one WebSocket per client carrying many operations.
//!
//! Client → runtimed (JSON text frames):
//! `{"type": "send", "operation": {…operations:execute body…}}` and
//! `{"type": "cancel", "operationId": "op-3"}`.
//! runtimed → client: `accepted`, `output` (with `operationId`), `completed`
//! and `failed` events, one per frame, with a `sequence` strictly increasing
//! over the connection. Closing the socket does not cancel admitted work.

use std::sync::Arc;

use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::response::Response;
use kruntimes_proto::api::{ErrorBody, ErrorCode};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::HostedSession;
use crate::session::{SubmitError, ops};

/// Largest client frame (a base64 32 MiB file plus JSON).
const MAX_FRAME: usize = crate::session::http::MAX_OPERATION_BODY;

/// Accepts the upgrade.
pub fn upgrade(ws: WebSocketUpgrade, h: Arc<HostedSession>) -> Response {
    ws.max_message_size(MAX_FRAME)
        .max_frame_size(MAX_FRAME)
        .on_upgrade(move |socket| serve(socket, h))
}

fn failure(code: ErrorCode, message: &str, operation_id: Option<&str>) -> Value {
    let mut e =
        serde_json::to_value(ErrorBody::new(code, message, None)).unwrap_or_default()["error"]
            .clone();
    if let Some(id) = operation_id {
        e["operationId"] = id.into();
    }
    json!({"type": "failed", "error": e})
}

/// Handles one client message; events go to `events`.
fn on_message(h: &Arc<HostedSession>, text: &str, events: &mpsc::Sender<Value>) -> Option<Value> {
    let msg: Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => return Some(failure(ErrorCode::InvalidJson, &e.to_string(), None)),
    };
    match msg["type"].as_str() {
        Some("send") => {
            let req: ops::OperationRequest = match serde_json::from_value(msg["operation"].clone())
            {
                Ok(r) => r,
                Err(e) => return Some(failure(ErrorCode::InvalidJson, &e.to_string(), None)),
            };
            let op = match ops::validate(req) {
                Ok(op) => op,
                Err(e) => return Some(failure(ErrorCode::BadRequest, &e, None)),
            };
            if let Err(e) = crate::session::http::check_paths(&op) {
                return Some(failure(ErrorCode::InvalidPath, &e, None));
            }
            let (chunks_tx, mut chunks) = mpsc::channel(64);
            let (id, done) = match h.session.submit(op, Some(chunks_tx)) {
                Ok(v) => v,
                Err(SubmitError::QueueFull) => {
                    return Some(failure(ErrorCode::Busy, "session queue is full", None));
                }
                Err(SubmitError::Closed) => {
                    return Some(failure(ErrorCode::NotReady, "session is closing", None));
                }
            };
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
                    Err(_) => failure(ErrorCode::Internal, "operation was dropped", Some(&id)),
                };
                let _ = events.send(last).await;
            });
            Some(accepted)
        }
        Some("cancel") => {
            let id = msg["operationId"].as_str().unwrap_or_default();
            if h.session.cancel_operation(id) {
                None
            } else {
                Some(failure(
                    ErrorCode::NotFound,
                    "no such pending operation",
                    Some(id),
                ))
            }
        }
        _ => Some(failure(
            ErrorCode::BadRequest,
            "type must be send or cancel",
            None,
        )),
    }
}

async fn serve(mut socket: WebSocket, h: Arc<HostedSession>) {
    let (events_tx, mut events) = mpsc::channel::<Value>(256);
    let mut sequence = 0u64;
    loop {
        let out = tokio::select! {
            msg = socket.recv() => match msg {
                Some(Ok(Message::Text(text))) => on_message(&h, text.as_str(), &events_tx),
                Some(Ok(Message::Binary(_))) => Some(failure(ErrorCode::BadRequest, "send JSON text frames", None)),
                Some(Ok(_)) => None,
                Some(Err(_)) | None => return,
            },
            Some(ev) = events.recv() => Some(ev),
        };
        if let Some(mut ev) = out {
            sequence += 1;
            ev["sequence"] = sequence.into();
            if socket
                .send(Message::Text(ev.to_string().into()))
                .await
                .is_err()
            {
                return;
            }
        }
    }
}
