//! The built-in Runtime Server: the untrusted side of a Runtime Pod. It runs
//! user code — a persistent Python worker per function registration (with
//! warm spare interpreters), Bash functions, session commands and file
//! operations — for its one client, runtimed, over the
//! Runtime Server contract (`kruntimes.runtime.v1`) on a Unix socket. It holds
//! no token, key or secret; runtimed keeps identity, TLS, fencing, queues and
//! bounds.
//!
//! Every user process runs under a shim in a process tree that is killed
//! whole ([`contain`]). An invocation holds its worker from request to
//! reply, frames matched by sequence number; a caller that goes away takes
//! the worker's tree with it, so it can never shift the worker's replies
//! onto the next caller.
//!
//! - [`Args`] validated once into a [`Config`], and [`main`]/[`serve`]
//!   (the `daemon` module); `service`: the contract's five
//!   gRPC services over [`validate`]d requests, served as one by
//!   `routes`; [`error`]: the one error and its status codes;
//!   `lease`: the worker fast path, Python workers' pipes handed to
//!   runtimed with SCM_RIGHTS; `direct`: the direct invoke path,
//!   `InvokeFunction` without HTTP/2 (Bash functions' hot path).
//! - [`function`]: registrations and their backends; `session`:
//!   workspaces, commands and files; `task`: one process per Run attempt;
//!   `artifacts`: a task's or a session's artifacts directory, walked
//!   without following a link; `inputs`: the files staged for a Run
//!   before it starts, moved into its working directory.
//! - `confine`: what of the file system the server and its user code
//!   may reach.
//! - [`contain`], `env`, `source`, `logs`, `held`: process trees,
//!   the user processes' environment, inline source, their stderr, what is
//!   held per Run UID.
//!
//! No other crate links more than [`main`] and its [`Args`] (`krt runtime-server`; runtimed
//! talks to this server only over the contract); [`contain`], [`function`],
//! [`validate`] and [`error`] are public for this crate's own integration
//! tests (`tests/shim.rs`, `tests/functions.rs`), which drive real process
//! trees and interpreters through them.
#![forbid(unsafe_code)]

mod accept;
mod artifacts;
mod config;
mod confine;
pub mod contain;
mod daemon;
mod direct;
mod env;
pub mod error;
pub mod function;
mod held;
mod inputs;
mod lease;
mod logs;
mod routes;
mod service;
mod session;
mod source;
mod task;
pub mod validate;

pub use config::{Args, Config, ConfigError, Mode, ServeArgs};
pub use daemon::{ServeError, init_logging, main, serve, shutdown_signal};
pub use error::{Error, Result};
