//! Session mode: an agent sandbox on a warm Pod. Each session owns a
//! workspace named by its Run UID and one FIFO queue through which commands
//! and file mutations run one at a time; reads, listings and status bypass
//! the queue. Closing rejects new work, cancels what is queued, terminates
//! what runs and removes the workspace.
//!
//! - [`queue`]: one session and its bounded queue ([`limits`]); [`worker`]
//!   consumes it.
//! - [`ops`], [`outcome`], [`exec`], [`files`]: the operations and their
//!   results, commands and file operations (run by the Runtime Server).
//! - [`hosted`]: the sessions this runtimed hosts, keyed by Run UID;
//!   [`prepare`] turns a session assignment into a started session.
//! - [`http`], [`ws`]: the session routes of the dataplane and the WebSocket;
//!   [`process`]: the background-process routes; [`watch`]: `files:watch`;
//!   [`ndjson`]: how their streams are written.

pub mod exec;
pub mod files;
pub mod hosted;
pub mod http;
pub mod limits;
pub mod ndjson;
pub mod ops;
pub mod outcome;
pub mod prepare;
pub mod process;
pub mod queue;
pub mod watch;
mod worker;
pub mod ws;

pub use hosted::{HostedSession, Sessions};
pub use queue::Session;
