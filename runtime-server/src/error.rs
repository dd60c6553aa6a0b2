//! The one error of the server and the gRPC status it answers with — the
//! codes `runtime.proto` documents for every call.

use tonic::{Code, Status};

use crate::function::InvokeError;
use crate::session::files::FileError;
use crate::source::WriteError;

/// Why a call was not served.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Malformed request (INVALID_ARGUMENT).
    #[error("{0}")]
    Invalid(String),
    /// An older attempt than the one held (FAILED_PRECONDITION).
    #[error("attempt {requested} is older than registered attempt {current}")]
    Stale {
        /// Attempt of the request.
        requested: u64,
        /// Attempt held.
        current: u64,
    },
    /// The handler failed to load (FAILED_PRECONDITION).
    #[error("{0}")]
    Load(String),
    /// No such registration, session or handle (NOT_FOUND).
    #[error("{0} is not held by this server")]
    NotFound(String),
    /// An invocation failed.
    #[error(transparent)]
    Invoke(#[from] InvokeError),
    /// A file operation failed.
    #[error(transparent)]
    File(#[from] FileError),
    /// Local I/O failed (INTERNAL).
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// `Result` with the server's error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<WriteError> for Error {
    fn from(e: WriteError) -> Self {
        match e {
            WriteError::Path(p) => Self::Invalid(p.to_string()),
            WriteError::Io(io) => Self::Io(io),
        }
    }
}

impl From<Error> for Status {
    fn from(e: Error) -> Self {
        let code = match &e {
            Error::Invalid(_) => Code::InvalidArgument,
            Error::Stale { .. } | Error::Load(_) => Code::FailedPrecondition,
            Error::NotFound(_) => Code::NotFound,
            Error::Invoke(i) => match i {
                // Handler errors are answers, not failures of the call.
                InvokeError::Function { .. } => Code::Unknown,
                InvokeError::Crashed(_) => Code::Aborted,
                InvokeError::Timeout(_) => Code::DeadlineExceeded,
                InvokeError::OutputTooLarge(_) => Code::OutOfRange,
                InvokeError::Stopped => Code::Cancelled,
                InvokeError::Leased => Code::FailedPrecondition,
            },
            Error::File(f) => match f {
                FileError::Path(_) => Code::InvalidArgument,
                FileError::NotFound(_) => Code::NotFound,
                FileError::TooLarge(_) => Code::OutOfRange,
                FileError::Io(_) => Code::FailedPrecondition,
            },
            Error::Io(_) => Code::Internal,
        };
        // The code says what failed; the message is the detail alone.
        let message = match e {
            Error::Invoke(InvokeError::Crashed(m) | InvokeError::OutputTooLarge(m)) => m,
            e => e.to_string(),
        };
        Status::new(code, message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_map_onto_the_documented_status_codes() {
        let cases = [
            (Error::Invalid("x".into()), Code::InvalidArgument),
            (
                Error::Stale {
                    requested: 1,
                    current: 2,
                },
                Code::FailedPrecondition,
            ),
            (Error::Load("ImportError".into()), Code::FailedPrecondition),
            (Error::NotFound("run".into()), Code::NotFound),
            (InvokeError::Crashed("exit".into()).into(), Code::Aborted),
            (
                InvokeError::Timeout(std::time::Duration::from_secs(1)).into(),
                Code::DeadlineExceeded,
            ),
            (
                InvokeError::OutputTooLarge("big".into()).into(),
                Code::OutOfRange,
            ),
            (FileError::NotFound("f".into()).into(), Code::NotFound),
            (FileError::TooLarge("f".into()).into(), Code::OutOfRange),
        ];
        for (e, code) in cases {
            assert_eq!(Status::from(e).code(), code);
        }
    }
}
