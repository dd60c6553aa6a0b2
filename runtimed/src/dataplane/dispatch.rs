//! The dataplane: the public API routes as forwarded by the gateway, with its
//! fencing headers. Only peers presenting a gateway client certificate
//! (checked by common name after mTLS) are served. Every refusal is an
//! [`ApiError`], rendered once by [`Reply::finish`].

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Extension, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use kruntimes_proto::api::{self, ApiPath, ErrorCode, SessionOp};

use super::peer::{PeerIdentity, PeerPolicy};
use crate::api_error::{ApiError, Reply, read_body};
use crate::function::{Engine, Invocation, MAX_IO_BYTES};
use crate::local::LocalPod;
use crate::registration::Fence;
use crate::session::{Sessions, http, ws};

/// Shared state of the dataplane routes.
#[derive(Clone)]
pub struct Dataplane {
    /// This Pod.
    pub pod: Arc<LocalPod>,
    /// The function engine.
    pub engine: Arc<Engine>,
    /// The sessions.
    pub sessions: Arc<Sessions>,
    /// The tasks (the control plane's to start and release).
    pub tasks: Arc<crate::task::Tasks>,
    /// Who may call.
    pub policy: Arc<PeerPolicy>,
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// Every `/v1/…` request: peer, hop marker, invocation id and fencing
/// headers are checked, then the route is served.
pub async fn dispatch(
    State(dp): State<Dataplane>,
    Extension(peer): Extension<PeerIdentity>,
    request: axum::extract::Request,
) -> Response {
    let (mut parts, body) = request.into_parts();
    let headers = parts.headers.clone();
    let supplied =
        header(&headers, api::HEADER_INVOCATION_ID).filter(|i| api::valid_invocation_id(i));
    let r = Reply {
        served_by: &dp.pod.name,
        invocation_id: supplied.unwrap_or(""),
    };
    let outcome = match admit(&dp.policy, &peer, &headers, supplied) {
        Ok(()) => route(&dp, &headers, &mut parts, body, &r).await,
        Err(e) => Err(e),
    };
    r.finish(outcome)
}

/// The checks before any route: a gateway peer, the hop marker and a valid
/// invocation id.
fn admit(
    policy: &PeerPolicy,
    peer: &PeerIdentity,
    headers: &HeaderMap,
    invocation_id: Option<&str>,
) -> Result<(), ApiError> {
    if !policy.may_use_dataplane(peer) {
        return Err(ApiError::new(
            ErrorCode::Forbidden,
            "dataplane accepts gateway client certificates only",
        ));
    }
    if header(headers, api::HEADER_HOP) != Some(api::HOP_GATEWAY) {
        return Err(ApiError::new(
            ErrorCode::Forbidden,
            "request did not come through a gateway",
        ));
    }
    if invocation_id.is_none() {
        return Err(ApiError::new(
            ErrorCode::InvalidInvocationId,
            "missing or invalid invocation id",
        ));
    }
    Ok(())
}

/// The gateway's fencing headers, all three required.
fn fence(headers: &HeaderMap) -> Result<Fence<'_>, ApiError> {
    match (
        header(headers, api::HEADER_RUN_UID),
        header(headers, api::HEADER_OWNER_POD_UID),
        header(headers, api::HEADER_ATTEMPT).and_then(|a| a.parse::<u64>().ok()),
    ) {
        (Some(run_uid), Some(owner_pod_uid), Some(attempt)) => Ok(Fence {
            run_uid,
            owner_pod_uid,
            attempt,
        }),
        _ => Err(ApiError::new(
            ErrorCode::BadRequest,
            "missing fencing headers",
        )),
    }
}

/// A Run route: its path, then its fencing headers, then the route.
async fn route(
    dp: &Dataplane,
    headers: &HeaderMap,
    parts: &mut Parts,
    body: Body,
    r: &Reply<'_>,
) -> Result<Response, ApiError> {
    let not_a_run_route = || ApiError::new(ErrorCode::InvalidPath, "not a Run route");
    let path = parts.uri.path().to_owned();
    let route =
        api::parse_path(&path).map_err(|e| ApiError::new(ErrorCode::InvalidPath, e.to_string()))?;
    if let ApiPath::Artifacts {
        namespace,
        uid,
        name,
        ..
    } = route
    {
        // Read from the store, whatever the Run's phase or owner: not
        // fenced (the gateway authorized the caller for this Run).
        if parts.method != Method::GET {
            return Err(ApiError::new(
                ErrorCode::MethodNotAllowed,
                "artifacts take GET",
            ));
        }
        let Some(artifacts) = dp.tasks.artifacts() else {
            return Err(ApiError::new(
                ErrorCode::NotFound,
                "the run's Runtime has no artifact store",
            ));
        };
        return match name {
            None => artifacts.list(namespace, uid).await,
            Some(name) => artifacts.download(namespace, uid, name, headers, r).await,
        };
    }
    if !matches!(route, ApiPath::Invoke { .. } | ApiPath::Session { .. }) {
        return Err(not_a_run_route());
    }
    let fence = fence(headers)?;
    match route {
        ApiPath::Invoke {
            namespace,
            runtime,
            uid,
        } => {
            if parts.method != Method::POST {
                return Err(ApiError::new(
                    ErrorCode::MethodNotAllowed,
                    "invoke requires POST",
                ));
            }
            invoke(dp, fence, (namespace, runtime, uid), body, r).await
        }
        ApiPath::Session {
            namespace,
            runtime,
            uid,
            op,
        } => {
            let h = dp.sessions.fenced(fence, uid).map_err(|e| {
                tracing::warn!(run_uid = %uid, invocation_id = %r.invocation_id, reason = %e, "refused fenced session request");
                ApiError::from(e)
            })?;
            if h.run.namespace != namespace || h.run.runtime != runtime {
                return Err(ApiError::new(
                    ErrorCode::NotFound,
                    "session does not belong to that namespace/runtime",
                ));
            }
            if op == SessionOp::WebSocket {
                let upgrade = super::websocket::accept(parts)?;
                // The caller's token expiry, as the gateway read it.
                let expires = parts
                    .headers
                    .get(kruntimes_proto::api::HEADER_TOKEN_EXPIRES)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse::<u64>().ok())
                    .map(|s| std::time::UNIX_EPOCH + std::time::Duration::from_secs(s));
                return Ok(ws::upgrade(upgrade, h, expires));
            }
            let (method, uri) = (parts.method.clone(), parts.uri.clone());
            http::handle(h, op, method, uri, body, r).await
        }
        _ => Err(not_a_run_route()),
    }
}

async fn invoke(
    dp: &Dataplane,
    fence: Fence<'_>,
    (namespace, runtime, uid): (&str, &str, &str),
    body: Body,
    r: &Reply<'_>,
) -> Result<Response, ApiError> {
    let input = read_body(body, MAX_IO_BYTES as usize, "input").await?;
    let call = Invocation {
        run_uid: uid,
        fence,
        namespace,
        runtime,
        invocation_id: r.invocation_id,
        input: &input,
    };
    let invoked = dp.engine.invoke(call).await.map_err(|e| {
        let e = ApiError::from(e);
        if e.code == ErrorCode::StaleOwner {
            tracing::warn!(run_uid = %uid, invocation_id = %r.invocation_id, reason = %e, "refused fenced request");
        }
        e
    })?;
    // What the invocation left in its artifacts directory: the envelope.
    if !invoked.artifacts.is_empty() {
        let body = kruntimes_api::artifact::invoke_envelope(&invoked.output, &invoked.artifacts);
        return Ok((
            StatusCode::OK,
            [
                (header::CONTENT_TYPE, "application/json".to_owned()),
                (
                    header::HeaderName::from_static(kruntimes_proto::api::HEADER_ARTIFACTS),
                    invoked.artifacts.len().to_string(),
                ),
            ],
            body,
        )
            .into_response());
    }
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        invoked.output,
    )
        .into_response())
}
