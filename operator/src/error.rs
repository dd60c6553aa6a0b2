//! Why the operator could not start, stopped, or failed a step: the one
//! error of its library surface (the embedded control plane keeps its own,
//! [`crate::embedded::Error`]). [`Doing`] adds what was being done to an
//! API or file error, as context, without erasing its type: a conflict is
//! still a conflict ([`Error::is_stale`]).

use std::path::PathBuf;

use crate::config::ConfigError;

/// Why the operator could not start, stopped, or failed a step.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The flags do not make an operator.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// No Kubernetes client.
    #[error(transparent)]
    KubeClient(#[from] kruntimes_support::kube::ClientError),
    /// An API call failed while doing `what`.
    #[error("{what}: {source}")]
    Api {
        /// What the operator was doing.
        what: String,
        /// The API's answer.
        source: kube::Error,
    },
    /// A watch's cache went away before its first list.
    #[error("initial list: {0}")]
    Watch(#[from] kube::runtime::reflector::store::WriterDropped),
    /// The first lists did not complete in time.
    #[error("initial list timed out")]
    InitialListTimedOut,
    /// The leader election could not be joined.
    #[error("leader election: {0}")]
    LeaderElection(String),
    /// Some of a pass's writes failed.
    #[error("{failed} writes failed, first {first}")]
    Writes {
        /// How many.
        failed: usize,
        /// The first one, with its Run.
        first: String,
    },
    /// A listener could not be bound.
    #[error("listen on {addr}: {source}")]
    Listen {
        /// Its address.
        addr: String,
        /// Why.
        source: std::io::Error,
    },
    /// A file could not be read or written while doing `what`.
    #[error("{what} {}: {source}", path.display())]
    File {
        /// What the operator was doing (`read`, `write`, `create`).
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Certificates could not be made or read.
    #[error(transparent)]
    Certs(#[from] kruntimes_certs::Error),
    /// An object the operator keeps is not what it expects.
    #[error("{0}")]
    Invalid(String),
    /// A server could not be configured or served.
    #[error("serve: {0}")]
    Serve(#[from] tonic::transport::Error),
    /// An object could not be (de)serialized.
    #[error("serialize: {0}")]
    Json(#[from] serde_json::Error),
    /// The process could not be confined.
    #[error(transparent)]
    Confine(#[from] kruntimes_process::confine::ConfineError),
    /// A system call failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

impl Error {
    /// Whether a write failed because its decision was stale: the object
    /// changed (409 Conflict) or is gone (404). The next pass decides again;
    /// any other failure counts against the pass.
    pub fn is_stale(&self) -> bool {
        matches!(
            self,
            Error::Api {
                source: kube::Error::Api(s),
                ..
            } if s.is_conflict() || s.is_not_found() || s.code == 409 || s.code == 404
        )
    }
}

/// `Result` with the operator's error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What was being done when an API call failed.
pub trait Doing<T> {
    /// The error, with `what` the operator was doing.
    fn doing(self, what: impl FnOnce() -> String) -> Result<T>;
}

impl<T> Doing<T> for std::result::Result<T, kube::Error> {
    fn doing(self, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|source| Error::Api {
            what: what(),
            source,
        })
    }
}

/// Reads `path` whole.
pub fn read(path: &std::path::Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|source| Error::File {
        what: "read",
        path: path.to_owned(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(code: u16, reason: &str) -> Error {
        Error::Api {
            what: "patch".into(),
            source: kube::Error::Api(Box::new(kube::core::Status {
                code,
                reason: reason.into(),
                ..Default::default()
            })),
        }
    }

    #[test]
    fn conflicts_and_missing_objects_are_stale_decisions() {
        assert!(api(409, "Conflict").is_stale());
        assert!(api(409, "").is_stale());
        assert!(api(404, "NotFound").is_stale());
        assert!(!api(500, "InternalError").is_stale());
        assert!(!api(422, "Invalid").is_stale());
        assert!(!Error::Invalid("connection refused".into()).is_stale());
        assert!(!Error::InitialListTimedOut.is_stale());
    }

    #[test]
    fn what_was_being_done_leads_the_message() {
        let e = api(500, "InternalError");
        assert!(e.to_string().starts_with("patch: "), "{e}");
    }
}
