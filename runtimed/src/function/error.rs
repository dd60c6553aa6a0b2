//! Why an invocation or unregistration was not served, and where that
//! lands in the public error table.

use std::time::Duration;

use kruntimes_proto::api::ErrorCode;

use crate::api_error::ApiError;
use crate::registration::FenceError;

/// How an invocation the Runtime Server ran failed.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum InvokeError {
    /// The handler raised or exited non-zero (bounded type and message).
    #[error("{kind}: {message}")]
    Function {
        /// Exception type, or `ExitStatus`.
        kind: String,
        /// Bounded message.
        message: String,
    },
    /// The worker died during the invocation; the next gets a fresh one.
    #[error("worker crashed: {0}")]
    Crashed(String),
    /// The deadline passed; the process tree was killed.
    #[error("invocation exceeded its {0:?} deadline")]
    Timeout(Duration),
    /// Output larger than the bound.
    #[error("invalid output: {0}")]
    InvalidOutput(String),
    /// Input refused by the server.
    #[error("invalid input: {0}")]
    InvalidInput(String),
}

/// Why an invocation was not served.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The fencing headers do not match this owner.
    #[error(transparent)]
    Fenced(FenceError),
    /// Registration id is not the current one.
    #[error("registration id is stale")]
    StaleRegistration,
    /// Nothing registered for this Run here.
    #[error("run is not registered on this instance")]
    NotRegistered,
    /// The Run's namespace or Runtime differs from the request's.
    #[error("run does not belong to that namespace/runtime")]
    WrongRun,
    /// One invocation is already in flight.
    #[error("the function already has an in-flight invocation")]
    Busy,
    /// Draining, failed or cancelled.
    #[error("registration is {0}")]
    NotReady(&'static str),
    /// The Runtime Server does not answer (or lost the registration).
    #[error("the runtime server is unavailable: {0}")]
    Unavailable(String),
    /// Input over the limit.
    #[error("input of {0} bytes exceeds the limit")]
    TooLarge(usize),
    /// Input is not JSON.
    #[error("input is not valid JSON: {0}")]
    InvalidJson(String),
    /// Backend failure.
    #[error(transparent)]
    Invoke(#[from] InvokeError),
}

impl EngineError {
    /// The code of the public error table this refusal answers with.
    pub fn code(&self) -> ErrorCode {
        match self {
            Self::Fenced(FenceError::RunMismatch { .. }) => ErrorCode::BadRequest,
            Self::Fenced(_) | Self::StaleRegistration | Self::NotRegistered => {
                ErrorCode::StaleOwner
            }
            Self::WrongRun => ErrorCode::NotFound,
            Self::Busy => ErrorCode::Busy,
            Self::NotReady(_) | Self::Unavailable(_) => ErrorCode::NotReady,
            Self::TooLarge(_) => ErrorCode::PayloadTooLarge,
            Self::InvalidJson(_) => ErrorCode::InvalidJson,
            Self::Invoke(InvokeError::Function { .. }) => ErrorCode::FunctionError,
            Self::Invoke(InvokeError::Crashed(_)) => ErrorCode::WorkerCrashed,
            Self::Invoke(InvokeError::Timeout(_)) => ErrorCode::DeadlineExceeded,
            Self::Invoke(InvokeError::InvalidOutput(_)) => ErrorCode::InvalidOutput,
            Self::Invoke(InvokeError::InvalidInput(_)) => ErrorCode::InvalidJson,
        }
    }
}

impl From<EngineError> for ApiError {
    fn from(e: EngineError) -> Self {
        Self::new(e.code(), e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_errors_map_onto_the_public_error_table() {
        let cases = [
            (
                EngineError::Fenced(FenceError::RunMismatch {
                    routed: "a".into(),
                    path: "b".into(),
                }),
                400,
            ),
            (
                EngineError::Fenced(FenceError::NotRegistered { run: "a".into() }),
                503,
            ),
            (EngineError::StaleRegistration, 503),
            (EngineError::NotRegistered, 503),
            (EngineError::WrongRun, 404),
            (EngineError::Busy, 429),
            (EngineError::NotReady("draining"), 503),
            (EngineError::Unavailable("down".into()), 503),
            (EngineError::TooLarge(2), 413),
            (EngineError::InvalidJson("x".into()), 400),
            (
                EngineError::Invoke(InvokeError::Function {
                    kind: "ValueError".into(),
                    message: "bad".into(),
                }),
                500,
            ),
            (EngineError::Invoke(InvokeError::Crashed("x".into())), 500),
            (
                EngineError::Invoke(InvokeError::Timeout(Duration::from_secs(1))),
                504,
            ),
        ];
        for (e, status) in cases {
            let api = ApiError::from(e);
            assert_eq!(api.code.status(), status, "{api:?}");
        }
        let busy = ApiError::from(EngineError::Busy);
        assert_eq!(busy.code, ErrorCode::Busy);
        assert_eq!(
            busy.message,
            "the function already has an in-flight invocation"
        );
        let status = tonic::Status::from(busy);
        assert_eq!(status.code(), tonic::Code::ResourceExhausted);
    }

    #[test]
    fn fenced_invocations_say_what_did_not_match() {
        let e = EngineError::Fenced(FenceError::WrongPod {
            this_pod: "pod-b".into(),
            routed_to: "pod-a".into(),
        });
        assert_eq!(
            e.to_string(),
            "this Pod (uid pod-b) is not the owner the gateway routed to (pod-a)"
        );
    }
}
