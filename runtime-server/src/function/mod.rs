//! Function mode: the built-in backends (a persistent Python worker per
//! registration, warm Bash shells calling the function in themselves) behind one
//! [`Loaded`], and the table of registrations keyed by Run UID
//! ([`registry`]).
//!
//! - [`handler`]: the handler's name, validated for its [`Backend`].
//! - [`python`]: the worker, its protocol and its warm spares.
//! - [`bash`]: `file.function`, payload as one argument, warm shells.

pub mod bash;
pub mod handler;
pub mod python;
pub mod registry;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

pub use bash::BashFunction;
pub use handler::Handler;
pub use kruntimes_proto::runtime::{Backend, InvokeError};
pub use python::{Interpreter, Lease, PythonFunction};
pub use registry::Functions;

/// Everything a backend needs to start.
#[derive(Debug, Clone)]
pub struct Spec {
    /// Run UID, for logs.
    pub run_uid: String,
    /// The Run's working directory.
    pub workdir: PathBuf,
    /// Parsed handler.
    pub handler: Handler,
    /// The handler's whole environment (see [`crate::env::for_run`]).
    pub env: BTreeMap<String, String>,
    /// Bound on worker start-up (import) and Bash validation.
    pub start_timeout: Duration,
}

/// A failed registration.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The handler could not be loaded (import error, missing function).
    #[error("load handler: {0}")]
    Load(String),
    /// Spawning or talking to the process failed.
    #[error("start backend: {0}")]
    Io(#[from] std::io::Error),
    /// Start-up did not finish in time.
    #[error("handler did not load within {0:?}")]
    Timeout(Duration),
}

/// A loaded handler, served by its backend.
#[derive(Debug)]
pub enum Loaded {
    /// Persistent Python worker.
    Python(PythonFunction),
    /// Bash function.
    Bash(BashFunction),
}

impl Loaded {
    /// Starts (and validates) the handler.
    pub async fn start(
        kind: Backend,
        spec: Spec,
        interp: &Interpreter,
    ) -> Result<Self, StartError> {
        Ok(match kind {
            Backend::Python => Self::Python(PythonFunction::start(spec, interp.clone()).await?),
            Backend::Bash => Self::Bash(BashFunction::start(spec, interp.shim.clone()).await?),
        })
    }

    /// Runs one invocation.
    pub async fn invoke(
        &self,
        input: Vec<u8>,
        timeout: Duration,
        max_output: usize,
    ) -> kruntimes_proto::runtime::InvokeOutcome {
        match self {
            Self::Python(w) => w.invoke(input, timeout, max_output).await,
            Self::Bash(b) => b.invoke(&input, timeout, max_output).await,
        }
    }

    /// Whether a process waits for its calls now.
    pub fn worker_running(&self) -> bool {
        match self {
            Self::Python(w) => w.worker_running(),
            Self::Bash(b) => b.worker_running(),
        }
    }

    /// Leases the worker's pipes (Python only).
    pub async fn lease(&self) -> Result<Lease, InvokeError> {
        match self {
            Self::Python(w) => w.lease().await,
            Self::Bash(_) => Err(InvokeError::InvalidInput(
                "a Bash function has no worker to lease".into(),
            )),
        }
    }

    /// Kills every process the backend holds.
    pub async fn stop(&self) {
        match self {
            Self::Python(w) => w.stop().await,
            Self::Bash(b) => b.stop(),
        }
    }
}

/// Bounds an error message to `max` bytes.
pub(crate) fn bounded(s: &str, max: usize) -> String {
    kruntimes_proto::api::truncate_utf8(s.to_owned(), max)
}
