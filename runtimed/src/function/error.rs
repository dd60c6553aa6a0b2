//! Why an invocation or unregistration was not served, and the one place
//! where that lands in the public error table.

use kruntimes_proto::api::ErrorCode;
use kruntimes_proto::runtime::{ErrorKind, InvokeError, ServerError};

use crate::api_error::ApiError;
use crate::registration::FenceError;

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
    /// Draining or failed before the call started.
    #[error("registration is {0}")]
    NotReady(&'static str),
    /// The registration was cancelled (the Run deleted, terminated or
    /// moved) while the call ran: it may have run.
    #[error("the run stopped serving while the call ran: it may have run")]
    Interrupted,
    /// The Runtime Server does not answer (or lost the registration).
    #[error("the runtime server is unavailable: {0}")]
    Unavailable(String),
    /// Input over the limit.
    #[error("input of {0} bytes exceeds the limit")]
    TooLarge(usize),
    /// Input is not JSON.
    #[error("input is not valid JSON: {0}")]
    InvalidJson(String),
    /// The invocation ran, or was sent, and ended without an answer.
    #[error(transparent)]
    Invoke(#[from] InvokeError),
    /// The handler answered, but what it left in its artifacts directory
    /// could not be exported: `invalid` (a file that cannot be an
    /// artifact, named in the message), else the store did not take it in
    /// time. `InvalidOutput` either way: the handler ran, so no answer may
    /// say it did not (as a 503 would).
    #[error("{message}")]
    Artifacts {
        /// A file cannot be an artifact.
        invalid: bool,
        /// Why, naming the file or the store's last error.
        message: String,
    },
}

impl EngineError {
    /// A call the Runtime Server refused or failed instead of answering
    /// with an outcome (a transport failure, or a custom server that
    /// answers with a status).
    pub fn of_server(e: ServerError) -> Self {
        match e.kind {
            ErrorKind::Unavailable => Self::Unavailable(e.message),
            ErrorKind::NotFound => InvokeError::NotRegistered(e.message).into(),
            ErrorKind::Invalid => InvokeError::InvalidInput(e.message).into(),
            ErrorKind::TooLarge => InvokeError::InvalidOutput(e.message).into(),
            ErrorKind::Refused | ErrorKind::Exhausted | ErrorKind::Internal => {
                InvokeError::Crashed(e.message).into()
            }
        }
    }

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
            Self::Interrupted => ErrorCode::OutcomeUnknown,
            // The handler ran: never a code that says it did not (503).
            Self::Artifacts { .. } => ErrorCode::InvalidOutput,
            Self::TooLarge(_) => ErrorCode::PayloadTooLarge,
            Self::InvalidJson(_) => ErrorCode::InvalidJson,
            Self::Invoke(e) => match e {
                InvokeError::Function { .. } => ErrorCode::FunctionError,
                InvokeError::Crashed(_) => ErrorCode::WorkerCrashed,
                InvokeError::Timeout(_) => ErrorCode::DeadlineExceeded,
                InvokeError::InvalidOutput(_) => ErrorCode::InvalidOutput,
                InvokeError::InvalidInput(_) => ErrorCode::InvalidJson,
                // Unregistered or replaced while it ran: it may have run.
                InvokeError::Stopped => ErrorCode::OutcomeUnknown,
                // The server does not hold what runtimed registered: it did
                // not run, and the Run is not servable now.
                InvokeError::NotRegistered(_) => ErrorCode::NotReady,
                // runtimed holds every lease itself: never a caller's fault.
                InvokeError::Leased => ErrorCode::Internal,
            },
        }
    }

    /// The message of the public error.
    fn message(&self) -> String {
        match self {
            Self::Invoke(InvokeError::Timeout(m)) => m.clone(),
            Self::Invoke(InvokeError::Stopped) => Self::Interrupted.to_string(),
            Self::Invoke(InvokeError::NotRegistered(_)) => {
                "the runtime server is unavailable: it does not hold this registration".into()
            }
            other => other.to_string(),
        }
    }
}

impl From<EngineError> for ApiError {
    fn from(e: EngineError) -> Self {
        Self::new(e.code(), e.message())
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
            (InvokeError::function("ValueError", "bad").into(), 500),
            (InvokeError::Crashed("x".into()).into(), 500),
            (
                InvokeError::timeout(std::time::Duration::from_secs(1)).into(),
                504,
            ),
            (InvokeError::InvalidOutput("big".into()).into(), 500),
            (InvokeError::InvalidInput("nul".into()).into(), 400),
            (InvokeError::Stopped.into(), 500),
            (EngineError::Interrupted, 500),
            (InvokeError::NotRegistered("fn-1".into()).into(), 503),
            (InvokeError::Leased.into(), 500),
            (
                EngineError::Artifacts {
                    invalid: true,
                    message: "artifact \"l\": a symbolic link".into(),
                },
                500,
            ),
            (
                EngineError::Artifacts {
                    invalid: false,
                    message: "store away".into(),
                },
                500,
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
        for stopped in [EngineError::Interrupted, InvokeError::Stopped.into()] {
            let api = ApiError::from(stopped);
            assert_eq!(api.code, ErrorCode::OutcomeUnknown);
            assert_eq!(
                api.message,
                "the run stopped serving while the call ran: it may have run"
            );
        }
        let late = ApiError::from(EngineError::from(InvokeError::timeout(
            std::time::Duration::from_secs(2),
        )));
        assert_eq!(late.message, "invocation exceeded its 2s deadline");
    }

    #[test]
    fn a_servers_refusal_lands_where_its_outcome_would() {
        let of = |kind| EngineError::of_server(ServerError::new(kind, "why")).code();
        assert_eq!(of(ErrorKind::Unavailable), ErrorCode::NotReady);
        assert_eq!(of(ErrorKind::NotFound), ErrorCode::NotReady);
        assert_eq!(of(ErrorKind::Invalid), ErrorCode::InvalidJson);
        assert_eq!(of(ErrorKind::TooLarge), ErrorCode::InvalidOutput);
        assert_eq!(of(ErrorKind::Refused), ErrorCode::WorkerCrashed);
        assert_eq!(of(ErrorKind::Internal), ErrorCode::WorkerCrashed);
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
