//! What the gateway answers instead of forwarding a request: the public
//! API's one error type ([`ApiError`], shared with runtimed, with its code
//! table in `kruntimes_proto::api`) and the conversions that map every
//! gateway failure onto it. All of the gateway's error-table mapping lives
//! here, so the status a failure earns can be read in one place.

use kruntimes_proto::api::{ApiError, ErrorCode};

use kruntimes_proto::ownership::v1::OwnershipEntry;

use crate::auth::AuthError;
use crate::table::RouteError;

/// The answer to a request that failed while being proxied, or `None` when
/// the client went away (nobody to answer). A request is never retried: an
/// owner that could not be reached did not run it (503); one that broke off
/// after the request was `dispatched` may have run it (500
/// `OutcomeUnknown`); one past the deadline was killed (504).
pub fn of_proxy_failure(e: &pingora::Error, dispatched: bool) -> Option<ApiError> {
    use pingora::ErrorType::*;
    let code = match e.etype() {
        HTTPStatus(413) => ErrorCode::PayloadTooLarge,
        ReadTimedout | WriteTimedout => ErrorCode::DeadlineExceeded,
        ConnectTimedout | ConnectRefused | ConnectNoRoute | ConnectError | TLSHandshakeFailure
        | TLSHandshakeTimedout | InvalidCert | HandshakeError => ErrorCode::OwnerUnavailable,
        _ => match e.esource() {
            pingora::ErrorSource::Upstream if dispatched => ErrorCode::OutcomeUnknown,
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
        ErrorCode::OutcomeUnknown => {
            "the connection to the owner broke after the request was sent: the call may have run"
        }
        ErrorCode::PayloadTooLarge => "request body over the limit",
        _ => "request failed",
    };
    Some(ApiError::new(code, message))
}

/// Whose fault a failed request was, which decides how loudly it is
/// logged: a client's is DEBUG and counted (anyone who can connect can
/// cause one), an owner's WARN, the gateway's own ERROR.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Blame {
    /// The client: it broke the stream, sent what cannot be read, went
    /// away, or sent a body over the limit.
    Client,
    /// The owner runtimed: unreachable, or it broke the connection.
    Owner,
    /// The gateway itself.
    Gateway,
}

/// [`Blame`] for a proxy failure. Pingora marks what it read from or wrote
/// to each side; connecting to the owner and waiting for it are the
/// owner's, as [`of_proxy_failure`] answers them; an unmarked stream
/// failure happened writing the answer to the client (Pingora marks the
/// owner's side).
pub fn blame(e: &pingora::Error) -> Blame {
    use pingora::ErrorType::*;
    match (e.esource(), e.etype()) {
        (_, HTTPStatus(code)) if (400..500).contains(code) => Blame::Client,
        (pingora::ErrorSource::Downstream, _) => Blame::Client,
        (pingora::ErrorSource::Upstream, _) => Blame::Owner,
        // What `of_proxy_failure` answers 503 or 504 for: the owner's.
        (
            _,
            ConnectTimedout | ConnectRefused | ConnectNoRoute | ConnectError | TLSHandshakeFailure
            | TLSHandshakeTimedout | InvalidCert | HandshakeError | ReadTimedout | WriteTimedout,
        ) => Blame::Owner,
        (
            pingora::ErrorSource::Unset,
            ReadError | WriteError | ConnectionClosed | H1Error | H2Error | InvalidHTTPHeader,
        ) => Blame::Client,
        _ => Blame::Gateway,
    }
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
            RouteError::Pending(entry) => pending(&entry),
            RouteError::Ended(entry) => ended(&entry),
            RouteError::Stale(why) => ApiError::new(ErrorCode::OwnerUnavailable, why),
        }
    }
}

/// 503 `NotReady` for a Run waiting for a Pod, with the control plane's
/// reason.
fn pending(entry: &OwnershipEntry) -> ApiError {
    let message = match entry.reason.as_str() {
        "" => format!("run {} is pending", entry.run_name),
        why => format!("run {} is pending ({why})", entry.run_name),
    };
    ApiError::new(ErrorCode::NotReady, message).with_run_state("Pending", entry.reason.clone())
}

/// 409 `RunFailed` or 410 `RunEnded` for a Run that will not serve again:
/// its phase, reason and status message (bounded by the table).
fn ended(entry: &OwnershipEntry) -> ApiError {
    let phase = entry.run_phase.as_str();
    let code = if phase == "Failed" {
        ErrorCode::RunFailed
    } else {
        ErrorCode::RunEnded
    };
    let what = match phase {
        "Finalizing" => "is finalizing".to_owned(),
        "Failed" => "failed".to_owned(),
        "" => "has ended".to_owned(),
        ended => format!("has ended: {ended}"),
    };
    let mut message = format!("run {} {what}", entry.run_name);
    if !entry.reason.is_empty() {
        message.push_str(&format!(" ({})", entry.reason));
    }
    if !entry.message.is_empty() {
        message.push_str(": ");
        message.push_str(&entry.message);
    }
    message.push_str("; it will not serve again");
    ApiError::new(code, message).with_run_state(phase, entry.reason.clone())
}

#[cfg(test)]
mod tests;
