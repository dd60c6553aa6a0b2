//! Why the Runtime Server refused or failed a call — every call but an
//! invocation, whose outcome is an answer ([`super::InvokeError`]). Both
//! sides use this one table: the server turns its failures into a
//! [`ServerError`] and that into the gRPC status the contract documents;
//! runtimed turns the status it receives back into a [`ServerError`] at its
//! gRPC edge, and nothing past that edge sees a status.

/// What kind of refusal or failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The request is malformed (INVALID_ARGUMENT).
    Invalid,
    /// No such Run, handle or path (NOT_FOUND).
    NotFound,
    /// Refused for good: an older attempt, a handler that failed to load, a
    /// file operation the workspace does not allow (FAILED_PRECONDITION).
    Refused,
    /// Content over a bound (OUT_OF_RANGE).
    TooLarge,
    /// A count at its bound: a session's running processes
    /// (RESOURCE_EXHAUSTED).
    Exhausted,
    /// The server could not be reached or went away during the call
    /// (UNAVAILABLE, or a transport failure).
    Unavailable,
    /// The server failed on its own (INTERNAL, and any code the contract
    /// does not use).
    Internal,
}

/// A refused or failed call to the Runtime Server.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ServerError {
    /// What kind.
    pub kind: ErrorKind,
    /// The detail, for people.
    pub message: String,
}

impl ServerError {
    /// An error of `kind`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }

    /// The server could not be reached.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Unavailable, message)
    }
}

impl From<tonic::Status> for ServerError {
    fn from(s: tonic::Status) -> Self {
        use tonic::Code;
        let kind = match s.code() {
            Code::InvalidArgument => ErrorKind::Invalid,
            Code::NotFound => ErrorKind::NotFound,
            Code::FailedPrecondition | Code::AlreadyExists => ErrorKind::Refused,
            Code::OutOfRange => ErrorKind::TooLarge,
            Code::ResourceExhausted => ErrorKind::Exhausted,
            // UNKNOWN is what tonic reports for a connection that broke
            // mid-call, a server that went away.
            Code::Unavailable | Code::Unknown | Code::Cancelled => ErrorKind::Unavailable,
            _ => ErrorKind::Internal,
        };
        Self::new(kind, s.message())
    }
}

impl From<ServerError> for tonic::Status {
    fn from(e: ServerError) -> Self {
        use tonic::Code;
        let code = match e.kind {
            ErrorKind::Invalid => Code::InvalidArgument,
            ErrorKind::NotFound => Code::NotFound,
            ErrorKind::Refused => Code::FailedPrecondition,
            ErrorKind::TooLarge => Code::OutOfRange,
            ErrorKind::Exhausted => Code::ResourceExhausted,
            ErrorKind::Unavailable => Code::Unavailable,
            ErrorKind::Internal => Code::Internal,
        };
        tonic::Status::new(code, e.message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_survives_the_status_it_travels_as() {
        for kind in [
            ErrorKind::Invalid,
            ErrorKind::NotFound,
            ErrorKind::Refused,
            ErrorKind::TooLarge,
            ErrorKind::Exhausted,
            ErrorKind::Unavailable,
            ErrorKind::Internal,
        ] {
            let e = ServerError::new(kind, "why");
            assert_eq!(ServerError::from(tonic::Status::from(e.clone())), e);
        }
    }

    #[test]
    fn transport_failures_are_unavailable_and_unused_codes_internal() {
        for code in [tonic::Code::Unavailable, tonic::Code::Unknown] {
            let e = ServerError::from(tonic::Status::new(code, "broken pipe"));
            assert_eq!(e.kind, ErrorKind::Unavailable, "{code:?}");
        }
        let e = ServerError::from(tonic::Status::new(tonic::Code::DataLoss, "x"));
        assert_eq!(e.kind, ErrorKind::Internal);
    }
}
