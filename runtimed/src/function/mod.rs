//! Function mode: registrations keyed by Run UID, each registered on the
//! Runtime Server (which runs the Python worker or the Bash function), the
//! one-in-flight rule, per-Run bounds and idle expiry.
//!
//! - [`config`]: the engine's configuration and hard bounds.
//! - [`engine`]: the table of registered functions and its lifecycle.
//! - [`prepare`]: an assignment turned into the server's request.
//! - [`registered`]: one registered function, its state and reports.
//! - [`invoke`]: serving one invocation through the server; [`fast`]: the
//!   same on a Python function's leased worker pipes.

pub mod config;
pub mod engine;
pub mod error;
pub mod fast;
pub mod invoke;
pub mod prepare;
pub mod registered;

pub use config::{EngineConfig, MAX_IO_BYTES};
pub use engine::Engine;
#[cfg(test)]
pub use error::EngineError;
pub use invoke::Invocation;

#[cfg(test)]
mod tests;
