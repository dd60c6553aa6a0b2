//! Why a client call failed: the one error of this crate. A refusal the
//! gateway or runtimed answered is [`Error::Api`], with its stable code;
//! everything else happened before a request reached them.

use std::path::PathBuf;
use std::time::Duration;

use crate::gateway::ApiError;

/// Why a client call failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The gateway (or the runtimed behind it) answered with an error.
    #[error(transparent)]
    Api(#[from] ApiError),
    /// A request did not get an answer (connection, TLS, a body cut short).
    #[error("{0}")]
    Http(#[from] reqwest::Error),
    /// A state file of the embedded stack could not be read: most often no
    /// `krt up` runs with this state directory.
    #[error(
        "read {} (is `krt up` running with this --state-dir? For a cluster pass --kubeconfig, --context or --cluster): {source}",
        path.display()
    )]
    NoStack {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// No `krt up` runs with this state directory (none started, or it
    /// stopped): its state files are not to be trusted.
    #[error(
        "no krt up running for {dir} (start one with `krt --state-dir {dir} up`; for a cluster pass --kubeconfig, --context or --cluster){logs}",
        dir = dir.display(),
        logs = if dir.join("logs").is_dir() { format!("; the last stack's logs are in {}", dir.join("logs").display()) } else { String::new() }
    )]
    NotRunning {
        /// The state directory.
        dir: PathBuf,
    },
    /// A file could not be read, parsed or written.
    #[error("{what} {}: {reason}", path.display())]
    File {
        /// What was done with it: `read`, `parse`, `write`, `remove`.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// No such Run.
    #[error("run {namespace}/{name} not found")]
    NotFound {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
    },
    /// The Run is of another mode than the call needs.
    #[error("run {namespace}/{name} is a {mode} run, not a {wanted} run")]
    WrongMode {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
        /// Its mode.
        mode: String,
        /// The mode the call needs.
        wanted: String,
    },
    /// The Run has no endpoint yet.
    #[error("run {run} has no endpoint yet ({phase})")]
    NoEndpoint {
        /// `namespace/name`.
        run: String,
        /// Its phase.
        phase: String,
    },
    /// A wait saw the Run end in another phase than the ones waited for.
    #[error("run {namespace}/{name} ended {phase} ({reason}: {message})")]
    Ended {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
        /// The phase it ended in.
        phase: String,
        /// Its reason.
        reason: String,
        /// Its message.
        message: String,
    },
    /// A wait ran out of time.
    #[error("run {namespace}/{name} did not reach {wanted:?} within {timeout:?} ({last})")]
    WaitTimedOut {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
        /// The phases waited for.
        wanted: Vec<String>,
        /// How long.
        timeout: Duration,
        /// What the wait saw last: the phase, and why the Run waits when its
        /// status says.
        last: String,
    },
    /// What was asked cannot be done on this target (the message says what
    /// to do instead).
    #[error("{0}")]
    Unsupported(String),
    /// An input (a manifest, a token, a CA bundle) is malformed.
    #[error("{0}")]
    Invalid(String),
    /// No credentials for the gateway.
    #[error("{0}")]
    Credentials(String),
    /// The cluster could not be reached or configured.
    #[error("{what}: {source}")]
    Kube {
        /// What was being done.
        what: String,
        /// Why it failed.
        source: kube::Error,
    },
    /// The kubeconfig could not be read or used.
    #[error("{what}: {reason}")]
    KubeConfig {
        /// What was being done.
        what: String,
        /// Why it failed.
        reason: String,
    },
}

/// `Result` with the client's error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// The file error of `what` on `path`.
    pub(crate) fn file(what: &'static str, path: &std::path::Path, reason: impl ToString) -> Self {
        Self::File {
            what,
            path: path.to_path_buf(),
            reason: reason.to_string(),
        }
    }

    /// The API error this is, if the gateway answered.
    pub fn api(&self) -> Option<&ApiError> {
        match self {
            Self::Api(e) => Some(e),
            _ => None,
        }
    }
}

/// Attaches what was being done to a Kubernetes call's failure.
pub(crate) trait KubeContext<T> {
    /// `what`, evaluated on failure only.
    fn doing(self, what: impl FnOnce() -> String) -> Result<T>;
}

impl<T> KubeContext<T> for Result<T, kube::Error> {
    fn doing(self, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|source| Error::Kube {
            what: what(),
            source,
        })
    }
}
