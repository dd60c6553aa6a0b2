//! [`Rejection`]: the one typed answer the gateway gives instead of
//! forwarding a request, and the conversions that map every failure that
//! becomes one to its stable [`ErrorCode`] (ARCHITECTURE §4).
//!
//! All of the gateway's error-table mapping lives here, so the status a
//! failure earns can be read in one place.

use std::borrow::Cow;

use kruntimes_proto::api::{ErrorCode, PathError};

use crate::auth::{AuthError, Verb};
use crate::table::RouteError;

/// The message of every 404 for an unknown Run.
const UNKNOWN_RUN: &str = "no such run in this namespace and runtime";

/// A request the gateway answers itself with a typed JSON error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {message}", code.as_str())]
pub struct Rejection {
    /// Stable code; it decides the status and `Retry-After`.
    pub code: ErrorCode,
    /// Message for the caller (never a token).
    pub message: Cow<'static, str>,
}

impl Rejection {
    /// A rejection with `code` and `message`.
    pub fn new(code: ErrorCode, message: impl Into<Cow<'static, str>>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    /// HTTP status of the answer.
    pub fn status(&self) -> u16 {
        self.code.status()
    }

    /// No such Run UID, or not one of that namespace/Runtime (404).
    pub fn unknown_run() -> Self {
        Self::new(ErrorCode::NotFound, UNKNOWN_RUN)
    }

    /// A path the API knows that is not a Run route (400).
    pub fn not_a_run_route() -> Self {
        Self::new(ErrorCode::InvalidPath, "not a Run route")
    }

    /// The route exists for another method (405).
    pub fn method_not_allowed(expected: &http::Method) -> Self {
        Self::new(
            ErrorCode::MethodNotAllowed,
            format!("this route takes {expected}"),
        )
    }

    /// Authentication is on and the request carries no bearer token (401).
    pub fn missing_token() -> Self {
        Self::new(ErrorCode::Unauthenticated, "missing bearer token")
    }

    /// The credential was rejected, for a reason safe to show (401).
    pub fn unauthenticated(why: &str) -> Self {
        Self::new(ErrorCode::Unauthenticated, why.to_owned())
    }

    /// `subject` is authenticated but may not use `verb` on Runs of
    /// `namespace` (403).
    pub fn forbidden(subject: &str, verb: Verb, namespace: &str) -> Self {
        Self::new(
            ErrorCode::Forbidden,
            format!(
                "{subject} may not use runs/{} of this run in namespace {namespace}",
                verb.as_str()
            ),
        )
    }

    /// The UID names a Run of the other mode than the route (404).
    pub fn wrong_mode(uid: &str, session: bool) -> Self {
        let kind = if session { "session" } else { "function" };
        Self::new(
            ErrorCode::NotFound,
            format!("run {uid} is not a {kind} run"),
        )
    }

    /// The answer to a request that failed while being proxied, or `None`
    /// when the client went away (nobody to answer). A dispatched request is
    /// never retried, so an upstream failure is the owner's (503) or its
    /// deadline's (504).
    pub fn of_proxy_failure(e: &pingora::Error) -> Option<Self> {
        use pingora::ErrorType::*;
        let code = match e.etype() {
            HTTPStatus(413) => ErrorCode::PayloadTooLarge,
            ReadTimedout | WriteTimedout => ErrorCode::DeadlineExceeded,
            ConnectTimedout | ConnectRefused | ConnectNoRoute | ConnectError
            | TLSHandshakeFailure | TLSHandshakeTimedout | InvalidCert | HandshakeError => {
                ErrorCode::OwnerUnavailable
            }
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
        Some(Self::new(code, message))
    }
}

impl From<PathError> for Rejection {
    fn from(e: PathError) -> Self {
        Self::new(ErrorCode::InvalidPath, e.to_string())
    }
}

impl From<AuthError> for Rejection {
    fn from(e: AuthError) -> Self {
        match e {
            AuthError::Unauthenticated(why) => Self::new(ErrorCode::Unauthenticated, why),
            AuthError::Unavailable(why) => Self::new(ErrorCode::AuthUnavailable, why),
        }
    }
}

impl From<RouteError> for Rejection {
    fn from(e: RouteError) -> Self {
        match e {
            RouteError::NotFound => Self::unknown_run(),
            RouteError::NotReady(why) | RouteError::Settling(why) => {
                Self::new(ErrorCode::NotReady, why)
            }
            RouteError::Stale(why) => Self::new(ErrorCode::OwnerUnavailable, why),
        }
    }
}

#[cfg(test)]
mod tests;
