//! Why runtimed could not start or stopped: the one error of its library
//! surface. Requests never fail with it — those are answered with the
//! public API's error ([`kruntimes_proto::api::ApiError`]).

use std::net::SocketAddr;

use crate::config::ConfigError;

/// Why runtimed could not start, or stopped.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The flags do not make a runtimed.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The listener could not be had: bound, or taken over.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The socket handed over (`LISTEN_FDS`) is not one runtimed can serve.
    #[error("{0}")]
    HandedOver(String),
    /// The serving certificate or the client CA could not be loaded.
    #[error("tls: {0}")]
    Tls(String),
    /// No Kubernetes client.
    #[error(transparent)]
    KubeClient(#[from] kruntimes_support::kube::ClientError),
    /// The Kubernetes loop failed.
    #[error("kubernetes loop: {0}")]
    Cluster(#[from] crate::cluster::Error),
    /// The process could not be confined.
    #[error(transparent)]
    Confine(#[from] kruntimes_process::confine::ConfineError),
    /// A system call failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// `Result` with runtimed's error.
pub type Result<T, E = Error> = std::result::Result<T, E>;
