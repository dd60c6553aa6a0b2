//! The session routes of the dataplane: status, `operations:execute`,
//! `operations:stream` (NDJSON events), `files` and `files:content`. Every
//! route answers `Result<Response, ApiError>`; the dataplane renders it.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use kruntimes_proto::api::{ErrorCode, SessionOp};

use super::HostedSession;
use super::exec;
use super::ops::{self, OperationRequest};
use super::outcome::Event;
use crate::api_error::{ApiError, Reply, read_body};

/// Largest `operations:*` body: a 32 MiB file, base64-encoded, plus JSON.
pub const MAX_OPERATION_BODY: usize = 45 * 1024 * 1024;

fn json(status: StatusCode, v: &impl serde::Serialize) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        serde_json::to_vec(v).unwrap_or_default(),
    )
        .into_response()
}

fn query(uri: &Uri) -> HashMap<String, String> {
    axum::extract::Query::<HashMap<String, String>>::try_from_uri(uri)
        .map(|q| q.0)
        .unwrap_or_default()
}

/// Refuses lexically bad paths before queueing (symlink escapes are caught
/// when the operation runs: the file system may change meanwhile).
pub fn check_paths(op: &ops::Operation) -> Result<(), ApiError> {
    for p in op.paths() {
        kruntimes_proto::runtime::path::normalize(p)
            .map_err(|e| ApiError::new(ErrorCode::InvalidPath, format!("{p}: {e}")))?;
    }
    Ok(())
}

/// Validates an `operations:*` request (HTTP body or WebSocket `send`).
pub fn operation(req: OperationRequest) -> Result<ops::Operation, ApiError> {
    let op = ops::validate(req).map_err(|e| ApiError::new(ErrorCode::BadRequest, e))?;
    check_paths(&op)?;
    Ok(op)
}

async fn read_operation(body: Body) -> Result<ops::Operation, ApiError> {
    let bytes = read_body(body, MAX_OPERATION_BODY, "operation body").await?;
    let req: OperationRequest = serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::new(ErrorCode::InvalidJson, e.to_string()))?;
    operation(req)
}

/// Largest `operations:cancel` body.
const MAX_CANCEL_BODY: usize = 1024;

/// The operation id of an `operations:cancel` body
/// (`{"operationId": "op-7"}`).
async fn read_cancel(body: Body) -> Result<String, ApiError> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase", deny_unknown_fields)]
    struct Cancel {
        operation_id: String,
    }
    let bytes = read_body(body, MAX_CANCEL_BODY, "cancel body").await?;
    let c: Cancel = serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::new(ErrorCode::InvalidJson, e.to_string()))?;
    Ok(c.operation_id)
}

/// Serves one session route for an admitted, fenced request; `r` is the
/// request's reply context (the stream's `failed` event carries its
/// invocation id).
pub async fn handle(
    h: Arc<HostedSession>,
    op: SessionOp,
    method: Method,
    uri: Uri,
    body: Body,
    r: &Reply<'_>,
) -> Result<Response, ApiError> {
    let h = &h;
    let uri = &uri;
    let want = op.methods();
    if !want.allow(method.as_str()) {
        return Err(ApiError::new(
            ErrorCode::MethodNotAllowed,
            format!("this route takes {}", want.as_str()),
        ));
    }
    match op {
        SessionOp::Processes
        | SessionOp::Process(_)
        | SessionOp::ConnectProcess(_)
        | SessionOp::ProcessInput(_)
        | SessionOp::CloseStdin(_)
        | SessionOp::SignalProcess(_)
        | SessionOp::ResizeProcess(_) => {
            super::process::handle(h, op, &method, body, r.invocation_id).await
        }
        SessionOp::WatchFiles => super::watch::handle(h, uri, r.invocation_id).await,
        SessionOp::Metrics => {
            let req = kruntimes_proto::runtime::v1::SessionMetricsRequest {
                run_uid: h.run.uid.clone(),
            };
            let m = h
                .session
                .runtime()
                .sessions
                .session_metrics(req)
                .await
                .map_err(|s| super::process::api_error(s.into()))?
                .into_inner();
            Ok(json(StatusCode::OK, &metrics(&m)))
        }
        SessionOp::Status => {
            let st = h.session.status();
            Ok(json(
                StatusCode::OK,
                &serde_json::json!({
                    "uid": h.run.uid,
                    "attempt": h.record.attempt,
                    "pendingOperations": st.pending_operations,
                    "idleMs": st.idle_ms,
                    "closing": st.closing,
                }),
            ))
        }
        SessionOp::Execute => {
            let op = read_operation(body).await?;
            let (_, done) = h.session.submit(op, None)?;
            let result = done
                .await
                .map_err(|_| ApiError::new(ErrorCode::Internal, "operation was dropped"))?;
            Ok(json(StatusCode::OK, &result))
        }
        SessionOp::Stream => {
            let op = read_operation(body).await?;
            stream(h, op, r)
        }
        SessionOp::ListFiles => {
            let q = query(uri);
            let limit = q
                .get("limit")
                .map(|l| l.parse::<usize>())
                .transpose()
                .map_err(|_| ApiError::new(ErrorCode::BadRequest, "limit must be a number"))?;
            let path = q.get("path").map(String::as_str).unwrap_or("");
            let listing = h
                .session
                .list(path, limit, q.get("pageToken").map(String::as_str))
                .await?;
            Ok(json(StatusCode::OK, &listing))
        }
        SessionOp::ReadFile => {
            let q = query(uri);
            let path = q
                .get("path")
                .ok_or_else(|| ApiError::new(ErrorCode::BadRequest, "path is required"))?;
            let bytes = h.session.read_file(path).await?;
            Ok((
                StatusCode::OK,
                [(header::CONTENT_TYPE, "application/octet-stream")],
                bytes,
            )
                .into_response())
        }
        SessionOp::Cancel => {
            let id = read_cancel(body).await?;
            if !h.session.cancel_operation(&id) {
                return Err(ApiError::new(
                    ErrorCode::NotFound,
                    format!("operation {id} is not queued or running in this session"),
                ));
            }
            Ok(json(
                StatusCode::OK,
                &serde_json::json!({"operationId": id, "cancelled": true}),
            ))
        }
        SessionOp::WebSocket => Err(ApiError::new(
            ErrorCode::BadRequest,
            "operations:ws needs a WebSocket upgrade",
        )),
    }
}

/// The `metrics` answer.
pub fn metrics(m: &kruntimes_proto::runtime::v1::SessionMetricsResponse) -> serde_json::Value {
    serde_json::json!({
        "cpuSeconds": m.cpu_millis as f64 / 1000.0,
        "cpuCount": m.cpu_count,
        "memoryBytes": m.memory_bytes,
        "memoryLimitBytes": m.memory_limit_bytes,
        "processes": m.processes,
        "diskBytes": m.disk_bytes,
        "diskPartial": m.disk_partial,
        "diskTotalBytes": m.disk_total_bytes,
        "diskFreeBytes": m.disk_free_bytes,
    })
}

fn line(e: &Event) -> Bytes {
    let mut v = serde_json::to_vec(e).unwrap_or_default();
    v.push(b'\n');
    Bytes::from(v)
}

/// `operations:stream`: `accepted`, `output`…, then `completed`; an error
/// after the stream started is a `failed` event.
fn stream(h: &Arc<HostedSession>, op: ops::Operation, r: &Reply<'_>) -> Result<Response, ApiError> {
    let (chunks_tx, mut chunks) = tokio::sync::mpsc::channel::<exec::Chunk>(64);
    let (id, done) = h.session.submit(op, Some(chunks_tx))?;
    let invocation_id = r.invocation_id.to_owned();
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(64);
    tokio::spawn(async move {
        let mut seq = 1u64;
        if tx
            .send(Ok(line(&Event::Accepted {
                sequence: seq,
                operation_id: id,
            })))
            .await
            .is_err()
        {
            // The client left; the admitted operation still runs.
            return;
        }
        while let Some(c) = chunks.recv().await {
            seq += 1;
            let ev = Event::Output {
                sequence: seq,
                stream: c.stream.to_owned(),
                data: String::from_utf8_lossy(&c.data).into_owned(),
            };
            if tx.send(Ok(line(&ev))).await.is_err() {
                return;
            }
        }
        seq += 1;
        let last = match done.await {
            Ok(result) => Event::Completed {
                sequence: seq,
                result,
            },
            Err(_) => Event::Failed {
                sequence: seq,
                error: crate::api_error::detail(
                    &ApiError::new(ErrorCode::Internal, "operation was dropped"),
                    Some(&invocation_id),
                ),
            },
        };
        let _ = tx.send(Ok(line(&last))).await;
    });
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/x-ndjson")],
        Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(rx)),
    )
        .into_response())
}
