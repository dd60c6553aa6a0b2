//! The session routes of the dataplane: status, `operations:execute`,
//! `operations:stream` (NDJSON events), `files` and `files:content`.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http_body_util::BodyExt;
use kruntimes_proto::api::{ErrorBody, ErrorCode, SessionOp};

use super::HostedSession;
use crate::reply::{Reply, error};
use crate::session::files::FileError;
use crate::session::ops::{self, Event, OperationRequest};
use crate::session::{SubmitError, exec};

/// Largest `operations:*` body: a 32 MiB file, base64-encoded, plus JSON.
pub const MAX_OPERATION_BODY: usize = 45 * 1024 * 1024;

fn json(status: StatusCode, v: &impl serde::Serialize) -> Response {
    (
        status,
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        serde_json::to_vec(v).unwrap_or_default(),
    )
        .into_response()
}

fn file_error(e: FileError, r: &Reply<'_>) -> Response {
    let code = match &e {
        FileError::Path(_) => ErrorCode::InvalidPath,
        FileError::NotFound(_) => ErrorCode::NotFound,
        FileError::TooLarge(_) => ErrorCode::PayloadTooLarge,
        FileError::Io(_) => ErrorCode::BadRequest,
    };
    error(code, e.to_string(), r)
}

fn query(uri: &Uri) -> HashMap<String, String> {
    axum::extract::Query::<HashMap<String, String>>::try_from_uri(uri)
        .map(|q| q.0)
        .unwrap_or_default()
}

/// Refuses lexically bad paths before queueing (symlink escapes are caught
/// when the operation runs: the file system may change meanwhile).
pub fn check_paths(op: &ops::Operation) -> Result<(), String> {
    let paths: Vec<&str> = match op {
        ops::Operation::Command { cwd, .. } => vec![cwd],
        ops::Operation::WriteFile { path, .. }
        | ops::Operation::Mkdir { path }
        | ops::Operation::Delete { path } => vec![path],
        ops::Operation::Rename { from, to } => vec![from, to],
    };
    for p in paths {
        crate::session::path::normalize(p).map_err(|e| format!("{p}: {e}"))?;
    }
    Ok(())
}

async fn operation(body: Body, r: &Reply<'_>) -> Result<ops::Operation, Response> {
    let bytes = match http_body_util::Limited::new(body, MAX_OPERATION_BODY)
        .collect()
        .await
    {
        Ok(c) => c.to_bytes(),
        Err(e)
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some() =>
        {
            return Err(error(
                ErrorCode::PayloadTooLarge,
                "operation body exceeds the limit",
                r,
            ));
        }
        Err(e) => return Err(error(ErrorCode::BadRequest, format!("read body: {e}"), r)),
    };
    let req: OperationRequest = serde_json::from_slice(&bytes)
        .map_err(|e| error(ErrorCode::InvalidJson, e.to_string(), r))?;
    let op = ops::validate(req).map_err(|e| error(ErrorCode::BadRequest, e, r))?;
    check_paths(&op).map_err(|e| error(ErrorCode::InvalidPath, e, r))?;
    Ok(op)
}

fn submit_error(e: SubmitError, r: &Reply<'_>) -> Response {
    match e {
        SubmitError::QueueFull => error(ErrorCode::Busy, e.to_string(), r),
        SubmitError::Closed => error(ErrorCode::NotReady, e.to_string(), r),
    }
}

/// Serves one session route for an admitted, fenced request.
pub async fn handle(
    h: Arc<HostedSession>,
    op: SessionOp,
    method: Method,
    uri: Uri,
    body: Body,
    r: Reply<'_>,
) -> Response {
    let want = match op {
        SessionOp::Execute | SessionOp::Stream => Method::POST,
        _ => Method::GET,
    };
    if method != want {
        return error(
            ErrorCode::MethodNotAllowed,
            format!("this route takes {want}"),
            &r,
        );
    }
    let resp = match op {
        SessionOp::Status => {
            let st = h.session.status();
            json(
                StatusCode::OK,
                &serde_json::json!({
                    "uid": h.run.uid,
                    "attempt": h.record.attempt,
                    "pendingOperations": st.pending_operations,
                    "idleMs": st.idle_ms,
                    "closing": st.closing,
                }),
            )
        }
        SessionOp::Execute => match operation(body, &r).await {
            Err(resp) => resp,
            Ok(op) => match h.session.submit(op, None) {
                Err(e) => submit_error(e, &r),
                Ok((_, done)) => match done.await {
                    Ok(result) => json(StatusCode::OK, &result),
                    Err(_) => error(ErrorCode::Internal, "operation was dropped", &r),
                },
            },
        },
        SessionOp::Stream => match operation(body, &r).await {
            Err(resp) => resp,
            Ok(op) => stream(&h, op, &r),
        },
        SessionOp::ListFiles => {
            let q = query(&uri);
            let limit = match q.get("limit").map(|l| l.parse::<usize>()) {
                Some(Err(_)) => return error(ErrorCode::BadRequest, "limit must be a number", &r),
                Some(Ok(l)) => Some(l),
                None => None,
            };
            let path = q.get("path").map(String::as_str).unwrap_or("");
            match h
                .session
                .list(path, limit, q.get("pageToken").map(String::as_str))
            {
                Ok(listing) => json(StatusCode::OK, &listing),
                Err(e) => file_error(e, &r),
            }
        }
        SessionOp::ReadFile => {
            let q = query(&uri);
            let Some(path) = q.get("path") else {
                return error(ErrorCode::BadRequest, "path is required", &r);
            };
            match h.session.read_file(path) {
                Ok(bytes) => (
                    StatusCode::OK,
                    [(axum::http::header::CONTENT_TYPE, "application/octet-stream")],
                    bytes,
                )
                    .into_response(),
                Err(e) => file_error(e, &r),
            }
        }
        SessionOp::WebSocket => error(
            ErrorCode::BadRequest,
            "operations:ws needs a WebSocket upgrade",
            &r,
        ),
    };
    r.decorate(resp)
}

fn line(e: &Event) -> Bytes {
    let mut v = serde_json::to_vec(e).unwrap_or_default();
    v.push(b'\n');
    Bytes::from(v)
}

/// `operations:stream`: `accepted`, `output`…, then `completed`; an error
/// after the stream started is a `failed` event.
fn stream(h: &Arc<HostedSession>, op: ops::Operation, r: &Reply<'_>) -> Response {
    let (chunks_tx, mut chunks) = tokio::sync::mpsc::channel::<exec::Chunk>(64);
    let (id, done) = match h.session.submit(op, Some(chunks_tx)) {
        Ok(v) => v,
        Err(e) => return submit_error(e, r),
    };
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
                error: serde_json::to_value(ErrorBody::new(
                    ErrorCode::Internal,
                    "operation was dropped",
                    Some(&invocation_id),
                ))
                .unwrap_or_default()["error"]
                    .clone(),
            },
        };
        let _ = tx.send(Ok(line(&last))).await;
    });
    (
        StatusCode::OK,
        [(axum::http::header::CONTENT_TYPE, "application/x-ndjson")],
        Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(rx)),
    )
        .into_response()
}
