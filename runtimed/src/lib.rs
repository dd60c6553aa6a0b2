//! runtimed, the trusted agent in every Runtime Pod. It registers
//! function-mode Runs and hosts session-mode Runs (a FIFO queue of commands
//! and file operations) on the Pod's Runtime Server, which runs all user
//! code; runtimed itself starts no user process. It enforces per-Run bounds,
//! the one-in-flight rule and fencing, serves the dataplane the gateway
//! forwards to (HTTP/1.1 + mTLS), serves the control plane's `Agent`
//! interface, and publishes its local ownership table over
//! `OwnershipTable/Watch`.
//!
//! The folders follow those concerns; arrows point one way:
//! [`dataplane`] uses [`function`] and [`session`], which never use
//! `dataplane` or each other; [`cluster`] (the Kubernetes adapter) drives
//! `function` and `session`; [`cli`] wires everything together. What both
//! modes need lives in small modules below them: [`host`] (assigning and
//! releasing a Run, whatever its mode), [`local`] (this Pod and its
//! ownership table), [`registration`] (the registration table and its
//! rules), [`runtime`] (the link to the Runtime Server), [`api_error`] (the
//! API error and its rendering) and [`periodic`] (background passes).
//!
//! Its surface is small: flags ([`Args`]) validated into a [`Config`], the
//! listener handed over by whoever started it
//! ([`handed_over_listener`]), and [`run`] ([`daemon`]).
#![forbid(unsafe_code)]

mod api_error;
pub mod artifacts;
mod cluster;
mod config;
mod daemon;
mod dataplane;
mod error;
mod function;
mod host;
mod listener;
mod local;
mod metrics;
mod periodic;
mod registration;
mod runtime;
mod session;
mod task;

pub use cluster::assigned_to;
pub use config::{Args, Config, ConfigError, KubernetesConfig, TlsConfig};
pub use daemon::run;
pub use dataplane::PeerPolicy;
pub use error::{Error, Result};
pub use function::EngineConfig;
pub use kruntimes_process::init_logging;
pub use listener::handed_over_listener;
