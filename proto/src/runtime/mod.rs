//! The Runtime Server contract, `kruntimes.runtime.v1` (the services
//! `RuntimeServer`, `FunctionRuntime`, `SessionRuntime`, `TaskRuntime` and
//! `ArtifactRuntime`; see
//! `proto/kruntimes/runtime/v1/runtime.proto`), and the Rust types both sides
//! of that process boundary share: an invocation's outcome
//! ([`InvokeError`], [`invoke::encode`] / [`invoke::decode`]), the one error
//! table of every other call ([`ServerError`]), file mutations ([`FileOp`]),
//! the built-in [`Backend`]s, workspace paths ([`path`]), the Python
//! worker's pipe protocol ([`worker`]) and the framed Unix-socket wire of
//! the fast paths ([`lease`]).

mod backend;
mod error;
mod file_op;
pub mod invoke;
pub mod lease;
pub mod path;
mod process;
pub mod worker;

pub use backend::Backend;
pub use error::{ErrorKind, ServerError};
pub use file_op::FileOp;
pub use invoke::{InvokeError, InvokeOutcome};
pub use process::{MAX_TERMINAL_SIDE, PROCESS_SIGNALS, signal_number, terminal_size};

use tonic::transport::Channel;

use v1::artifact_runtime_client::ArtifactRuntimeClient;
use v1::function_runtime_client::FunctionRuntimeClient;
use v1::runtime_server_client::RuntimeServerClient;
use v1::session_runtime_client::SessionRuntimeClient;
use v1::task_runtime_client::TaskRuntimeClient;

/// Version 1 of the contract.
pub mod v1 {
    #![allow(missing_docs, clippy::all)]
    tonic::include_proto!("kruntimes.runtime.v1");
}

/// The contract a server speaks (`InfoResponse.contract`).
pub const CONTRACT: &str = "kruntimes.runtime.v1";
/// `InfoResponse.services`: the server serves function-mode Runs.
pub const FUNCTION_RUNTIME: &str = "kruntimes.runtime.v1.FunctionRuntime";
/// `InfoResponse.services`: the server serves session-mode Runs.
pub const SESSION_RUNTIME: &str = "kruntimes.runtime.v1.SessionRuntime";
/// `InfoResponse.services`: the server serves task-mode Runs.
pub const TASK_RUNTIME: &str = "kruntimes.runtime.v1.TaskRuntime";
/// `InfoResponse.services`: the server reads artifacts directories back.
pub const ARTIFACT_RUNTIME: &str = "kruntimes.runtime.v1.ArtifactRuntime";
/// The environment variable naming a Run's artifacts directory.
pub const ARTIFACTS_DIR_ENV: &str = "KRUNTIME_ARTIFACTS_DIR";
/// Files a `CollectArtifacts` walk stops at by default.
pub const DEFAULT_MAX_ARTIFACT_FILES: u32 = 1000;
/// Largest `data` chunk of a `CollectArtifacts` stream.
pub const ARTIFACT_CHUNK_BYTES: usize = 1024 * 1024;
/// Bytes of the end of each output stream a task's result keeps by default.
pub const DEFAULT_TASK_TAIL_BYTES: u32 = 4096;
/// Largest tail a task's result keeps per stream.
pub const MAX_TASK_TAIL_BYTES: u32 = 64 * 1024;

/// Largest message on the Runtime Server socket: a 32 MiB file plus
/// framing.
pub const MAX_MESSAGE_BYTES: usize = 40 * 1024 * 1024;

/// Clients of the four services of one Runtime Server, over one channel
/// and with the contract's message limits. Cloning is cheap.
#[derive(Debug, Clone)]
pub struct Clients {
    /// `RuntimeServer`: Info and Reset.
    pub server: RuntimeServerClient<Channel>,
    /// `FunctionRuntime`.
    pub functions: FunctionRuntimeClient<Channel>,
    /// `SessionRuntime`.
    pub sessions: SessionRuntimeClient<Channel>,
    /// `TaskRuntime`.
    pub tasks: TaskRuntimeClient<Channel>,
    /// `ArtifactRuntime`.
    pub artifacts: ArtifactRuntimeClient<Channel>,
}

impl Clients {
    /// Clients of the Runtime Server on the Unix socket `path`. The channel
    /// connects lazily and again after the server restarts; calls fail with
    /// UNAVAILABLE meanwhile.
    pub fn connect_lazy(path: impl Into<std::path::PathBuf>) -> Self {
        let path = path.into();
        // The URI is required by the API and never dialled: the connector
        // below opens the socket.
        let channel = tonic::transport::Endpoint::from_static("http://runtime-server.invalid")
            .connect_timeout(std::time::Duration::from_secs(2))
            .connect_with_connector_lazy(tower::service_fn(move |_: tonic::transport::Uri| {
                let path = path.clone();
                async move {
                    let stream = tokio::net::UnixStream::connect(path).await?;
                    Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
                }
            }));
        Self {
            server: RuntimeServerClient::new(channel.clone())
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES),
            functions: FunctionRuntimeClient::new(channel.clone())
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES),
            sessions: SessionRuntimeClient::new(channel.clone())
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES),
            tasks: TaskRuntimeClient::new(channel.clone())
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES),
            artifacts: ArtifactRuntimeClient::new(channel)
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES),
        }
    }
}
