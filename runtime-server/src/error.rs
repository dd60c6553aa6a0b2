//! The one error of the server's calls — every call but an invocation,
//! whose failures are answers ([`InvokeError`](kruntimes_proto::runtime::InvokeError)).
//! It becomes the contract's [`ServerError`], and that the gRPC status the
//! contract documents, only at the service's edge.

use kruntimes_proto::runtime::{ErrorKind, InvokeError, ServerError};

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
    /// Staged inputs that cannot be moved into a working directory:
    /// none staged for the attempt, or one would replace a path
    /// (FAILED_PRECONDITION).
    #[error("{0}")]
    Inputs(String),
    /// A session's running processes are at their bound
    /// (RESOURCE_EXHAUSTED).
    #[error("{0}")]
    Exhausted(String),
    /// What the process's state does not allow: input after its stdin
    /// closed or it ended, a resize without a terminal
    /// (FAILED_PRECONDITION).
    #[error("{0}")]
    Conflict(String),
    /// No such registration, session or handle (NOT_FOUND).
    #[error("{0} is not held by this server")]
    NotFound(String),
    /// A worker could not be leased (the reason InvokeFunction would have
    /// failed with).
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

impl Error {
    /// The contract's kind of this error.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Invalid(_) => ErrorKind::Invalid,
            Error::Stale { .. } | Error::Load(_) | Error::Inputs(_) | Error::Conflict(_) => {
                ErrorKind::Refused
            }
            Error::Exhausted(_) => ErrorKind::Exhausted,
            Error::NotFound(_) => ErrorKind::NotFound,
            Error::Invoke(i) => match i {
                InvokeError::NotRegistered(_) => ErrorKind::NotFound,
                InvokeError::InvalidInput(_) => ErrorKind::Invalid,
                InvokeError::InvalidOutput(_) => ErrorKind::TooLarge,
                InvokeError::Function { .. }
                | InvokeError::Timeout(_)
                | InvokeError::Crashed(_)
                | InvokeError::Stopped
                | InvokeError::Leased => ErrorKind::Refused,
            },
            Error::File(f) => match f {
                FileError::Path(_) => ErrorKind::Invalid,
                FileError::NotFound(_) => ErrorKind::NotFound,
                FileError::TooLarge(_) => ErrorKind::TooLarge,
                FileError::Io(_) => ErrorKind::Refused,
            },
            Error::Io(_) => ErrorKind::Internal,
        }
    }
}

impl From<Error> for ServerError {
    fn from(e: Error) -> Self {
        ServerError::new(e.kind(), e.to_string())
    }
}

impl From<Error> for tonic::Status {
    fn from(e: Error) -> Self {
        ServerError::from(e).into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_map_onto_the_documented_kinds() {
        let cases = [
            (Error::Invalid("x".into()), ErrorKind::Invalid),
            (
                Error::Stale {
                    requested: 1,
                    current: 2,
                },
                ErrorKind::Refused,
            ),
            (Error::Load("ImportError".into()), ErrorKind::Refused),
            (Error::Inputs("main.sh".into()), ErrorKind::Refused),
            (Error::NotFound("run".into()), ErrorKind::NotFound),
            (FileError::NotFound("f".into()).into(), ErrorKind::NotFound),
            (FileError::TooLarge("f".into()).into(), ErrorKind::TooLarge),
            (
                FileError::Path(crate::session::path::PathError::Escapes).into(),
                ErrorKind::Invalid,
            ),
            (std::io::Error::other("disk").into(), ErrorKind::Internal),
        ];
        for (e, kind) in cases {
            let status = tonic::Status::from(e);
            assert_eq!(ServerError::from(status).kind, kind);
        }
    }
}
