//! The dataplane: the public API routes as forwarded by the gateway, with its
//! fencing headers. Only peers presenting a gateway client certificate
//! (checked by common name after mTLS) are served.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Extension, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt;
use kruntimes_proto::api::{self, ApiPath, ErrorCode};

use super::peer::{PeerIdentity, PeerPolicy};
use crate::function::backend::InvokeError;
use crate::function::{Engine, EngineError, Invocation, MAX_IO_BYTES};
use crate::local::LocalPod;
use crate::registration::{Fence, FenceError};
use crate::reply::{Reply, error};
use crate::session::Sessions;

/// Shared state of the dataplane routes.
#[derive(Clone)]
pub struct Dataplane {
    /// This Pod.
    pub pod: Arc<LocalPod>,
    /// The function engine.
    pub engine: Arc<Engine>,
    /// The sessions.
    pub sessions: Arc<Sessions>,
    /// Who may call.
    pub policy: Arc<PeerPolicy>,
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

/// Every `/v1/…` request: peer, hop marker, invocation id and fencing
/// headers are checked, then the route is served.
pub async fn dispatch(
    State(dp): State<Dataplane>,
    Extension(peer): Extension<PeerIdentity>,
    request: axum::extract::Request,
) -> Response {
    let (mut parts, body) = request.into_parts();
    let (method, uri, headers) = (
        parts.method.clone(),
        parts.uri.clone(),
        parts.headers.clone(),
    );
    let me = dp.pod.name.clone();
    let supplied =
        header(&headers, api::HEADER_INVOCATION_ID).filter(|i| api::valid_invocation_id(i));
    let pre = Reply {
        served_by: &me,
        invocation_id: supplied.unwrap_or(""),
    };
    if !dp.policy.may_use_dataplane(&peer) {
        return error(
            ErrorCode::Forbidden,
            "dataplane accepts gateway client certificates only",
            &pre,
        );
    }
    if header(&headers, api::HEADER_HOP) != Some(api::HOP_GATEWAY) {
        return error(
            ErrorCode::Forbidden,
            "request did not come through a gateway",
            &pre,
        );
    }
    let Some(inv) = supplied else {
        return error(
            ErrorCode::InvalidInvocationId,
            "missing or invalid invocation id",
            &pre,
        );
    };
    let r = Reply {
        served_by: &me,
        invocation_id: inv,
    };
    let route = match api::parse_path(uri.path()) {
        Ok(p @ (ApiPath::Invoke { .. } | ApiPath::Session { .. })) => p,
        Ok(_) => return error(ErrorCode::InvalidPath, "not a Run route", &r),
        Err(e) => return error(ErrorCode::InvalidPath, e.to_string(), &r),
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
        _ => return error(ErrorCode::BadRequest, "missing fencing headers", &r),
    };
    match route {
        ApiPath::Invoke {
            namespace,
            runtime,
            uid,
        } => {
            if method != Method::POST {
                return error(ErrorCode::MethodNotAllowed, "invoke requires POST", &r);
            }
            invoke(&dp, fence, (namespace, runtime, uid), &headers, body, r).await
        }
        ApiPath::Session {
            namespace,
            runtime,
            uid,
            op,
        } => {
            let h = match dp.sessions.fenced(fence, uid) {
                Ok(h) => h,
                Err(e) => {
                    let code = if e == FenceError::RunMismatch {
                        ErrorCode::BadRequest
                    } else {
                        ErrorCode::StaleOwner
                    };
                    tracing::warn!(run_uid = %uid, invocation_id = %inv, reason = ?e, "refused fenced session request");
                    return error(code, format!("stale owner: {e:?}"), &r);
                }
            };
            if h.run.namespace != namespace || h.run.runtime != runtime {
                return error(
                    ErrorCode::NotFound,
                    "session does not belong to that namespace/runtime",
                    &r,
                );
            }
            if op == api::SessionOp::WebSocket {
                use axum::extract::FromRequestParts as _;
                return match axum::extract::WebSocketUpgrade::from_request_parts(&mut parts, &())
                    .await
                {
                    Ok(ws) => r.decorate(crate::session::ws::upgrade(ws, h)),
                    Err(e) => error(
                        ErrorCode::BadRequest,
                        format!("expected a WebSocket upgrade: {e}"),
                        &r,
                    ),
                };
            }
            crate::session::http::handle(h, op, method, uri, body, r).await
        }
        _ => error(ErrorCode::InvalidPath, "not a Run route", &r),
    }
}

async fn invoke(
    dp: &Dataplane,
    fence: Fence<'_>,
    (namespace, runtime, uid): (&str, &str, &str),
    headers: &HeaderMap,
    body: Body,
    r: Reply<'_>,
) -> Response {
    let limited = http_body_util::Limited::new(body, MAX_IO_BYTES as usize);
    let input = match limited.collect().await {
        Ok(c) => c.to_bytes(),
        Err(e)
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some() =>
        {
            return error(ErrorCode::PayloadTooLarge, "input exceeds 1 MiB", &r);
        }
        Err(e) => return error(ErrorCode::BadRequest, format!("read body: {e}"), &r),
    };
    let timeout = header(headers, "x-kruntimes-timeout-ms")
        .and_then(|t| t.parse::<u64>().ok())
        .map(Duration::from_millis);
    let call = Invocation {
        run_uid: uid,
        fence: Some(fence),
        registration_id: None,
        namespace_runtime: Some((namespace, runtime)),
        invocation_id: r.invocation_id,
        input: &input,
        timeout,
    };
    match dp.engine.invoke(call).await {
        Ok(output) => r.decorate(
            (
                StatusCode::OK,
                [(axum::http::header::CONTENT_TYPE, "application/json")],
                output,
            )
                .into_response(),
        ),
        Err(e) => {
            let code = classify(&e);
            if code == ErrorCode::StaleOwner {
                tracing::warn!(run_uid = %uid, invocation_id = %r.invocation_id, reason = %e, "refused fenced request");
            }
            error(code, e.to_string(), &r)
        }
    }
}
