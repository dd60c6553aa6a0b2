//! The kruntimes control plane, in its two deployments: the embedded one of
//! `krt up` ([`embedded`]: a directory of Run manifests, runtimed driven
//! over gRPC) and the Kubernetes operator ([`cluster`]: Runs and Runtimes as
//! custom resources, Runtime Deployments, finalizers). Both are thin
//! adapters over `kruntimes-core`'s one decision pass (lifecycle and
//! scheduler) — each builds a snapshot and carries the operations out — and
//! both publish the ownership table the gateway routes from. The operator's entry is
//! [`run`], from flags ([`Args`]) validated into a [`Config`].
#![forbid(unsafe_code)]

pub mod cluster;
mod config;
mod daemon;
pub mod embedded;
mod error;

pub use config::{Args, Config, ConfigError, InternalTls, InternalTlsConfig, PublicTlsArg};
pub use daemon::run;
pub use error::{Error, Result};
