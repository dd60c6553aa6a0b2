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
//! - [`cli`]: flags and the main loop; [`service`]: the contract's three
//!   gRPC services over [`validate`]d requests, served as one by
//!   [`routes`]; [`error`]: the one error and its status codes;
//!   [`lease`]: the worker fast path, Python workers' pipes handed to
//!   runtimed with SCM_RIGHTS; [`direct`]: the direct invoke path,
//!   `InvokeFunction` without HTTP/2 (Bash functions' hot path).
//! - [`function`]: registrations and their backends; [`session`]:
//!   workspaces, commands and files.
//! - [`confine`]: what of the file system the server and its user code
//!   may reach.
//! - [`contain`], [`env`], [`source`], [`logs`], [`held`]: process trees,
//!   the user processes' environment, inline source, their stderr, what is
//!   held per Run UID.
#![forbid(unsafe_code)]

pub mod accept;
pub mod cli;
pub mod confine;
pub mod contain;
pub mod direct;
pub mod env;
pub mod error;
pub mod function;
pub mod held;
pub mod lease;
pub mod logs;
pub mod routes;
pub mod service;
pub mod session;
pub mod source;
pub mod validate;

pub use error::{Error, Result};
