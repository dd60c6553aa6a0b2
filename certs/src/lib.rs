//! Certificate material for kruntimes: rcgen-generated CAs, serving and client
//! certificates (used by `krt up`, tests and non-Helm installs), and the rustls
//! configurations built from PEM files, including mTLS and peer identity.
#![forbid(unsafe_code)]

pub mod install;
mod issue;
pub mod managed;
mod reload;
mod tls;

pub use issue::{Ca, Leaf, LeafSpec};
pub use reload::{Reloading, ReloadingCert, load_certified_key};
pub use tls::{
    TlsFiles, check_ca_bundle, client_config, load_certs, load_key, peer_common_name,
    server_config, server_config_reloading, write_private,
};

/// Errors of certificate generation and loading.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// rcgen failed to generate or sign.
    #[error("generate certificate: {0}")]
    Generate(#[from] rcgen::Error),
    /// A PEM file could not be read or parsed.
    #[error("read {path}: {reason}")]
    Read {
        /// File that failed.
        path: String,
        /// Why.
        reason: String,
    },
    /// rustls rejected the material.
    #[error("tls config: {0}")]
    Tls(#[from] rustls::Error),
    /// A client verifier could not be built.
    #[error("client verifier: {0}")]
    Verifier(String),
    /// Writing a file failed.
    #[error("write {path}: {source}")]
    Write {
        /// File that failed.
        path: String,
        /// Cause.
        source: std::io::Error,
    },
}

/// Result alias of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
