//! What the gateway answers instead of forwarding a request: the public
//! API's one error type ([`ApiError`], shared with runtimed, with its code
//! table in `kruntimes_proto::api`) and the conversions that map every
//! gateway failure onto it. All of the gateway's error-table mapping lives
//! here, so the status a failure earns can be read in one place.

use kruntimes_proto::api::{ApiError, ErrorCode};

use crate::auth::AuthError;
use crate::table::RouteError;

/// The answer to a request that failed while being proxied, or `None` when
/// the client went away (nobody to answer). A dispatched request is never
/// retried, so an upstream failure is the owner's (503) or its deadline's
/// (504).
pub fn of_proxy_failure(e: &pingora::Error) -> Option<ApiError> {
    use pingora::ErrorType::*;
    let code = match e.etype() {
        HTTPStatus(413) => ErrorCode::PayloadTooLarge,
        ReadTimedout | WriteTimedout => ErrorCode::DeadlineExceeded,
        ConnectTimedout | ConnectRefused | ConnectNoRoute | ConnectError | TLSHandshakeFailure
        | TLSHandshakeTimedout | InvalidCert | HandshakeError => ErrorCode::OwnerUnavailable,
        _ => match e.esource() {
            pingora::ErrorSource::Upstream => ErrorCode::OwnerUnavailable,
            pingora::ErrorSource::Downstream => match e.etype() {
                WriteError | ReadError | ConnectionClosed => return None,
                _ => ErrorCode::BadRequest,
            },
            _ => ErrorCode::Internal,
        },
    };
    let message = match code {
        ErrorCode::OwnerUnavailable => "owner is unreachable",
        ErrorCode::DeadlineExceeded => "owner did not answer before the deadline",
        ErrorCode::PayloadTooLarge => "request body over the limit",
        _ => "request failed",
    };
    Some(ApiError::new(code, message))
}

impl From<AuthError> for ApiError {
    fn from(e: AuthError) -> Self {
        match e {
            AuthError::Unauthenticated(why) => ApiError::new(ErrorCode::Unauthenticated, why),
            AuthError::Unavailable(why) => ApiError::new(ErrorCode::AuthUnavailable, why),
        }
    }
}

impl From<RouteError> for ApiError {
    fn from(e: RouteError) -> Self {
        match e {
            RouteError::NotFound => ApiError::unknown_run(),
            RouteError::NotReady(why) | RouteError::Settling(why) => {
                ApiError::new(ErrorCode::NotReady, why)
            }
            RouteError::Stale(why) => ApiError::new(ErrorCode::OwnerUnavailable, why),
        }
    }
}

#[cfg(test)]
mod tests;
