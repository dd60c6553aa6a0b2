//! runtimed, the daemon in every Runtime Pod. It registers function-mode Runs
//! with its built-in backends (a persistent Python worker per registration,
//! Bash functions), enforces per-Run bounds and fencing, serves the dataplane
//! the gateway forwards to (HTTP/2 + mTLS), implements the `FunctionRuntime`
//! contract, and publishes its local ownership table over `OwnershipTable/Watch`.
#![forbid(unsafe_code)]

pub mod backend;
pub mod cli;
pub mod cluster;
pub mod dataplane;
pub mod engine;
pub mod grpc;
pub mod registry;
pub mod server;
pub mod session;
pub mod session_http;
pub mod session_ws;
pub mod sessions;
pub mod source;

pub use engine::{Engine, EngineConfig};
pub use server::{ServeConfig, serve};
