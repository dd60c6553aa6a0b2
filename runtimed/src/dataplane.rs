//! The dataplane: the public invoke route as forwarded by the gateway, with
//! its fencing headers. Only peers presenting a gateway client certificate
//! (checked by common name after mTLS) are served.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Extension, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt;
use kruntimes_proto::api::{self, ApiPath, ErrorBody, ErrorCode};

use crate::backend::InvokeError;
use crate::engine::{Engine, EngineError, Invocation, MAX_IO_BYTES};
use crate::registry::{Fence, FenceError};
use crate::server::{PeerIdentity, PeerPolicy};

/// Shared state of the dataplane routes.
#[derive(Clone)]
pub struct Dataplane {
    /// The engine.
    pub engine: Arc<Engine>,
    /// Who may call.
    pub policy: Arc<PeerPolicy>,
}

fn error(
    code: ErrorCode,
    message: impl Into<String>,
    inv: Option<&str>,
    served_by: &str,
) -> Response {
    let mut resp = (
        StatusCode::from_u16(code.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        ErrorBody::new(code, message, inv).to_json(),
    )
        .into_response();
    let h = resp.headers_mut();
    if let Some(secs) = code.retry_after_secs() {
        h.insert(axum::http::header::RETRY_AFTER, HeaderValue::from(secs));
    }
    decorate(h, inv, served_by);
    resp
}

fn decorate(h: &mut HeaderMap, inv: Option<&str>, served_by: &str) {
    if let Ok(v) = HeaderValue::from_str(served_by) {
        h.insert(api::HEADER_SERVED_BY, v);
    }
    if let Some(v) = inv.and_then(|i| HeaderValue::from_str(i).ok()) {
        h.insert(api::HEADER_INVOCATION_ID, v);
    }
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// Maps an engine error onto the public error table.
pub fn classify(e: &EngineError) -> ErrorCode {
    match e {
        EngineError::Fenced(FenceError::RunMismatch) => ErrorCode::BadRequest,
        EngineError::Fenced(_) | EngineError::StaleRegistration | EngineError::NotRegistered => {
            ErrorCode::StaleOwner
        }
        EngineError::WrongRun => ErrorCode::NotFound,
        EngineError::Busy => ErrorCode::Busy,
        EngineError::NotReady(_) => ErrorCode::NotReady,
        EngineError::TooLarge(_) => ErrorCode::PayloadTooLarge,
        EngineError::InvalidJson(_) => ErrorCode::InvalidJson,
        EngineError::Invoke(InvokeError::Function { .. }) => ErrorCode::FunctionError,
        EngineError::Invoke(InvokeError::Crashed(_)) => ErrorCode::WorkerCrashed,
        EngineError::Invoke(InvokeError::Timeout(_)) => ErrorCode::DeadlineExceeded,
        EngineError::Invoke(InvokeError::InvalidOutput(_)) => ErrorCode::InvalidOutput,
        EngineError::Invoke(InvokeError::InvalidInput(_)) => ErrorCode::InvalidJson,
    }
}

/// `POST /v1/namespaces/{ns}/runtimes/{runtime}/runs/{uid}:invoke`
pub async fn invoke(
    State(dp): State<Dataplane>,
    Extension(peer): Extension<PeerIdentity>,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let me = dp.engine.config().pod_name.clone();
    let inv = header(&headers, api::HEADER_INVOCATION_ID).filter(|i| api::valid_invocation_id(i));
    if !dp.policy.may_use_dataplane(&peer) {
        return error(
            ErrorCode::Forbidden,
            "dataplane accepts gateway client certificates only",
            inv,
            &me,
        );
    }
    if header(&headers, api::HEADER_HOP) != Some(api::HOP_GATEWAY) {
        return error(
            ErrorCode::Forbidden,
            "request did not come through a gateway",
            inv,
            &me,
        );
    }
    let Some(inv) = inv else {
        return error(
            ErrorCode::InvalidInvocationId,
            "missing or invalid invocation id",
            None,
            &me,
        );
    };
    let (namespace, runtime, uid) = match api::parse_path(uri.path()) {
        Ok(ApiPath::Invoke {
            namespace,
            runtime,
            uid,
        }) => (namespace, runtime, uid),
        Ok(_) => {
            return error(
                ErrorCode::InvalidPath,
                "not an invoke route",
                Some(inv),
                &me,
            );
        }
        Err(e) => return error(ErrorCode::InvalidPath, e.to_string(), Some(inv), &me),
    };
    let fence = match (
        header(&headers, api::HEADER_RUN_UID),
        header(&headers, api::HEADER_OWNER_POD_UID),
        header(&headers, api::HEADER_ATTEMPT).and_then(|a| a.parse::<u64>().ok()),
    ) {
        (Some(run_uid), Some(owner_pod_uid), Some(attempt)) => Fence {
            run_uid,
            owner_pod_uid,
            attempt,
        },
        _ => {
            return error(
                ErrorCode::BadRequest,
                "missing fencing headers",
                Some(inv),
                &me,
            );
        }
    };
    let limited = http_body_util::Limited::new(body, MAX_IO_BYTES as usize);
    let input = match limited.collect().await {
        Ok(c) => c.to_bytes(),
        Err(e)
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some() =>
        {
            return error(
                ErrorCode::PayloadTooLarge,
                "input exceeds 1 MiB",
                Some(inv),
                &me,
            );
        }
        Err(e) => {
            return error(
                ErrorCode::BadRequest,
                format!("read body: {e}"),
                Some(inv),
                &me,
            );
        }
    };
    let timeout = header(&headers, "x-kruntimes-timeout-ms")
        .and_then(|t| t.parse::<u64>().ok())
        .map(Duration::from_millis);
    let call = Invocation {
        run_uid: uid,
        fence: Some(fence),
        registration_id: None,
        namespace_runtime: Some((namespace, runtime)),
        invocation_id: inv,
        input: &input,
        timeout,
    };
    match dp.engine.invoke(call).await {
        Ok(output) => {
            let mut resp = (
                StatusCode::OK,
                [(axum::http::header::CONTENT_TYPE, "application/json")],
                output,
            )
                .into_response();
            decorate(resp.headers_mut(), Some(inv), &me);
            resp
        }
        Err(e) => {
            let code = classify(&e);
            if code == ErrorCode::StaleOwner {
                tracing::warn!(run_uid = %uid, invocation_id = %inv, reason = %e, "refused fenced request");
            }
            error(code, e.to_string(), Some(inv), &me)
        }
    }
}
