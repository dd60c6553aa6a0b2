//! Why the gateway could not start (or stopped): the one error of its
//! library surface. Requests never fail with it — those are answered with
//! the public API's error ([`kruntimes_proto::api::ApiError`]).

use std::path::PathBuf;

use crate::config::ConfigError;

/// Why the gateway could not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The flags do not make a gateway.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A file it needs could not be read.
    #[error("read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A listener's address could not be bound.
    #[error("cannot listen for {name} on {addr}: {source}")]
    Bind {
        /// The listener (`https`, `http`, `metrics`).
        name: &'static str,
        /// Its address.
        addr: String,
        /// Why.
        source: std::io::Error,
    },
    /// A part could not be built from its files or settings (certificates,
    /// keys, the policy, the Kubernetes client).
    #[error("{what}: {why}")]
    Setup {
        /// What was being built.
        what: &'static str,
        /// Why not.
        why: String,
    },
    /// The metrics registry refused a metric.
    #[error("metrics: {0}")]
    Metrics(#[from] prometheus::Error),
    /// A system call failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

impl Error {
    /// A part that could not be built, for `why`.
    pub fn setup(what: &'static str, why: impl std::fmt::Display) -> Self {
        Self::Setup {
            what,
            why: why.to_string(),
        }
    }
}

/// `Result` with the gateway's error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Reads `path` whole.
pub(crate) fn read(path: &std::path::Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|source| Error::Read {
        path: path.to_owned(),
        source,
    })
}
