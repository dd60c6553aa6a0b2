//! Function mode: registrations keyed by Run UID, each with a built-in
//! backend (a persistent Python worker, or a Bash function), the
//! one-in-flight rule, per-Run bounds and idle expiry.
//!
//! - [`config`]: the engine's configuration and hard bounds.
//! - [`engine`]: the table of registered functions and its lifecycle.
//! - [`prepare`]: a `Register` request turned into a started function.
//! - [`registered`]: one registered function, its state and reports.
//! - [`invoke`]: serving one invocation.
//! - [`backend`]: the built-in backends.

pub mod backend;
pub mod config;
pub mod engine;
pub mod error;
pub mod invoke;
pub mod prepare;
pub mod registered;

pub use config::{EngineConfig, MAX_IO_BYTES};
pub use engine::Engine;
pub use error::EngineError;
pub use invoke::Invocation;

#[cfg(test)]
mod tests;
