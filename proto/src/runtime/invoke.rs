//! How one invocation ended, as both sides of the Runtime Server contract
//! hold it: the server produces an [`InvokeOutcome`] and puts it on the wire
//! ([`encode`]); runtimed reads it back ([`decode`]) into the same type and
//! maps it to the public error table in one place. Nothing on the way is a
//! gRPC status: an invocation's failure is an answer, whichever path (gRPC,
//! the direct invoke socket, a leased worker) carried it.

use super::v1 as pb;
use super::v1::invoke_function_response::Outcome;

/// Longest exception type kept, bytes.
pub const MAX_ERROR_KIND_BYTES: usize = 128;
/// Longest handler error message kept, bytes.
pub const MAX_ERROR_MESSAGE_BYTES: usize = 1024;

/// Why an invocation produced no output.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvokeError {
    /// The handler raised (Python) or exited non-zero (Bash): an answer of
    /// the function's (bounded type and message).
    #[error("{kind}: {message}")]
    Function {
        /// Exception type, or `ExitStatus`.
        kind: String,
        /// Bounded message.
        message: String,
    },
    /// The deadline passed; the process tree was killed.
    #[error("{0}")]
    Timeout(String),
    /// The worker died or broke its protocol; the next call gets a fresh
    /// one.
    #[error("worker crashed: {0}")]
    Crashed(String),
    /// The output is over the bound or not a JSON document.
    #[error("invalid output: {0}")]
    InvalidOutput(String),
    /// The request is malformed.
    #[error("invalid input: {0}")]
    InvalidInput(String),
    /// The registration was stopped (unregistered, replaced) during the
    /// call.
    #[error("the registration was stopped")]
    Stopped,
    /// No such registration on the server.
    #[error("{0} is not registered")]
    NotRegistered(String),
    /// The worker is leased over the fast path.
    #[error("the worker is leased over the fast path")]
    Leased,
}

impl InvokeError {
    /// A handler's error, bounded.
    pub fn function(kind: impl Into<String>, message: impl Into<String>) -> Self {
        Self::Function {
            kind: crate::api::truncate_utf8(kind.into(), MAX_ERROR_KIND_BYTES),
            message: crate::api::truncate_utf8(message.into(), MAX_ERROR_MESSAGE_BYTES),
        }
    }

    /// The deadline `timeout` passed.
    pub fn timeout(timeout: std::time::Duration) -> Self {
        Self::Timeout(format!("invocation exceeded its {timeout:?} deadline"))
    }

    /// The failure as the wire carries it (`None` for a handler's error,
    /// which is not a failure of the call).
    pub fn failure(&self) -> Option<pb::InvokeFailure> {
        use pb::InvokeFailureReason as R;
        let reason = match self {
            Self::Function { .. } => return None,
            Self::Timeout(_) => R::Timeout,
            Self::Crashed(_) => R::Crashed,
            Self::InvalidOutput(_) => R::InvalidOutput,
            Self::InvalidInput(_) => R::InvalidInput,
            Self::Stopped => R::Stopped,
            Self::NotRegistered(_) => R::NotRegistered,
            Self::Leased => R::Leased,
        };
        let message = match self {
            Self::Timeout(m)
            | Self::Crashed(m)
            | Self::InvalidOutput(m)
            | Self::InvalidInput(m)
            | Self::NotRegistered(m) => m.clone(),
            other => other.to_string(),
        };
        Some(pb::InvokeFailure {
            reason: reason as i32,
            message: crate::api::truncate_utf8(message, MAX_ERROR_MESSAGE_BYTES),
        })
    }

    /// A failure read off the wire. A reason this side does not know (a
    /// newer server) is a crash: the call ended without an answer.
    pub fn from_failure(f: pb::InvokeFailure) -> Self {
        use pb::InvokeFailureReason as R;
        match R::try_from(f.reason) {
            Ok(R::Timeout) => Self::Timeout(f.message),
            Ok(R::Crashed) => Self::Crashed(f.message),
            Ok(R::InvalidOutput) => Self::InvalidOutput(f.message),
            Ok(R::InvalidInput) => Self::InvalidInput(f.message),
            Ok(R::Stopped) => Self::Stopped,
            Ok(R::NotRegistered) => Self::NotRegistered(f.message),
            Ok(R::Leased) => Self::Leased,
            Ok(R::Unspecified) | Err(_) => Self::Crashed(format!(
                "the runtime server failed the call for an unknown reason ({}): {}",
                f.reason, f.message
            )),
        }
    }
}

/// How an invocation ended: the handler's JSON output, or why there is none.
pub type InvokeOutcome = Result<Vec<u8>, InvokeError>;

/// An outcome as `InvokeFunctionResponse` carries it.
pub fn encode(outcome: InvokeOutcome) -> pb::InvokeFunctionResponse {
    let outcome = match outcome {
        Ok(output) => Outcome::Output(output),
        Err(InvokeError::Function { kind, message }) => {
            Outcome::Error(pb::FunctionError { kind, message })
        }
        Err(e) => match e.failure() {
            Some(f) => Outcome::Failure(f),
            // Only a handler's error has no failure, and it is matched above.
            None => Outcome::Error(pb::FunctionError {
                kind: String::new(),
                message: e.to_string(),
            }),
        },
    };
    pb::InvokeFunctionResponse {
        outcome: Some(outcome),
        artifacts_left: false,
    }
}

/// The outcome an `InvokeFunctionResponse` carries. A response with none is
/// a broken server: the call ended without an answer.
pub fn decode(response: pb::InvokeFunctionResponse) -> InvokeOutcome {
    match response.outcome {
        Some(Outcome::Output(output)) => Ok(output),
        Some(Outcome::Error(e)) => Err(InvokeError::function(e.kind, e.message)),
        Some(Outcome::Failure(f)) => Err(InvokeError::from_failure(f)),
        None => Err(InvokeError::Crashed(
            "the runtime server answered without an outcome".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn every_error() -> Vec<InvokeError> {
        vec![
            InvokeError::function("ValueError", "bad"),
            InvokeError::Timeout("invocation exceeded its 2s deadline".into()),
            InvokeError::Crashed("exit status: 1".into()),
            InvokeError::InvalidOutput("output over 1048576 bytes".into()),
            InvokeError::InvalidInput("timeout_ms is required".into()),
            InvokeError::Stopped,
            InvokeError::NotRegistered("function uid-1 (fn-2)".into()),
            InvokeError::Leased,
        ]
    }

    #[test]
    fn every_outcome_survives_the_wire() {
        assert_eq!(decode(encode(Ok(b"{}".to_vec()))), Ok(b"{}".to_vec()));
        for e in every_error() {
            assert_eq!(decode(encode(Err(e.clone()))), Err(e.clone()), "{e:?}");
            // And through the bytes, as the direct socket carries it.
            let bytes = prost::Message::encode_to_vec(&encode(Err(e.clone())));
            let back: pb::InvokeFunctionResponse = prost::Message::decode(&bytes[..]).unwrap();
            assert_eq!(decode(back), Err(e));
        }
    }

    #[test]
    fn only_a_handlers_error_is_not_a_failure() {
        for e in every_error() {
            let is_function = matches!(e, InvokeError::Function { .. });
            assert_eq!(e.failure().is_none(), is_function, "{e:?}");
        }
    }

    #[test]
    fn a_response_without_an_outcome_or_with_an_unknown_reason_is_a_crash() {
        let none = decode(pb::InvokeFunctionResponse {
            outcome: None,
            ..Default::default()
        });
        assert!(matches!(none, Err(InvokeError::Crashed(_))), "{none:?}");
        let future = decode(pb::InvokeFunctionResponse {
            outcome: Some(Outcome::Failure(pb::InvokeFailure {
                reason: 99,
                message: "from a newer server".into(),
            })),
            ..Default::default()
        });
        match future {
            Err(InvokeError::Crashed(m)) => assert!(m.contains("(99)") && m.contains("newer")),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn handler_errors_and_failure_messages_are_bounded() {
        let e = InvokeError::function("K".repeat(1000), "é".repeat(5000));
        match &e {
            InvokeError::Function { kind, message } => {
                assert_eq!(kind.len(), MAX_ERROR_KIND_BYTES);
                assert!(message.len() <= MAX_ERROR_MESSAGE_BYTES);
            }
            other => panic!("{other:?}"),
        }
        let long = InvokeError::Crashed("x".repeat(10_000)).failure().unwrap();
        assert_eq!(long.message.len(), MAX_ERROR_MESSAGE_BYTES);
    }
}
