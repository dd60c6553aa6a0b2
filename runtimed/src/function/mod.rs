//! Function mode: registrations keyed by Run UID, each with a built-in
//! backend (a persistent Python worker, or a Bash function), the
//! one-in-flight rule, per-Run bounds and idle expiry.
//!
//! - [`engine`]: the registrations and their invocations.
//! - [`backend`]: the built-in backends.

pub mod backend;
pub mod engine;

pub use engine::{Engine, EngineConfig, EngineError, Invocation, MAX_IO_BYTES, RegisterError};
