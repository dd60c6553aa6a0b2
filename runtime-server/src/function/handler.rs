//! Built-in function backends: a persistent Python worker per registration
//! and Bash functions sourced per call. Both run in their own process group
//! so a timeout kills everything the handler started.

mod bash;
mod logs;
mod python;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

pub use bash::BashFunction;
pub use python::{PythonWorker, SparePool};

/// Which built-in backend serves a Runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Kind {
    /// `module.function`, persistent worker.
    Python,
    /// `file.function`, `file.sh` sourced per call.
    Bash,
}

impl Kind {
    /// The backend for a Runtime name; custom Runtimes are served by their
    /// own Runtime Server, not by runtimed's built-ins.
    pub fn for_runtime(runtime: &str) -> Option<Self> {
        match runtime {
            "python" => Some(Self::Python),
            "bash" => Some(Self::Bash),
            _ => None,
        }
    }
}

/// A validated `a.b` handler.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handler {
    /// Module (Python) or file stem (Bash).
    pub module: String,
    /// Function name.
    pub function: String,
}

fn identifier(s: &str) -> bool {
    let mut b = s.bytes();
    matches!(b.next(), Some(c) if c.is_ascii_alphabetic() || c == b'_')
        && b.all(|c| c.is_ascii_alphanumeric() || c == b'_')
}

/// Parses a handler. Python modules may be dotted packages; Bash files are a
/// single file stem (letters, digits, `_`, `-`). Function names are
/// identifiers. Nothing here is ever interpreted as shell source.
pub fn parse_handler(kind: Kind, handler: &str) -> Result<Handler, String> {
    if handler.len() > 256 {
        return Err("handler is longer than 256 bytes".into());
    }
    let (module, function) = handler
        .rsplit_once('.')
        .ok_or_else(|| format!("handler {handler:?} must look like module.function"))?;
    if !identifier(function) {
        return Err(format!(
            "handler function {function:?} is not an identifier"
        ));
    }
    let module_ok = match kind {
        Kind::Python => module.split('.').all(identifier),
        Kind::Bash => {
            !module.is_empty()
                && !module.starts_with('-')
                && module
                    .bytes()
                    .all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-')
        }
    };
    if !module_ok {
        return Err(format!("handler module {module:?} is not valid"));
    }
    Ok(Handler {
        module: module.to_owned(),
        function: function.to_owned(),
    })
}

/// Everything a backend needs to start.
#[derive(Debug, Clone)]
pub struct Spec {
    /// Run UID, for logs.
    pub run_uid: String,
    /// The Run's working directory.
    pub workdir: PathBuf,
    /// Parsed handler.
    pub handler: Handler,
    /// Environment of the handler (the daemon's own environment is not inherited).
    pub env: BTreeMap<String, String>,
    /// Python interpreter.
    pub python: PathBuf,
    /// Bound on worker start-up (import) and Bash validation.
    pub start_timeout: Duration,
    /// Pre-started Python interpreters, when enabled.
    pub spares: Option<std::sync::Arc<SparePool>>,
}

impl Spec {
    /// The clean environment handed to handler processes.
    fn environment(&self) -> Vec<(String, String)> {
        let mut env = vec![
            (
                "PATH".to_owned(),
                std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".into()),
            ),
            ("HOME".to_owned(), self.workdir.display().to_string()),
            ("LANG".to_owned(), "C.UTF-8".to_owned()),
            ("KRUNTIMES_RUN_UID".to_owned(), self.run_uid.clone()),
        ];
        env.extend(self.env.iter().map(|(k, v)| (k.clone(), v.clone())));
        env
    }
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

/// A failed invocation.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum InvokeError {
    /// The handler raised or exited non-zero (bounded type and message).
    #[error("{kind}: {message}")]
    Function {
        /// Exception type, or `ExitStatus`.
        kind: String,
        /// Bounded message.
        message: String,
    },
    /// The worker died during the invocation; it is respawned for the next.
    #[error("worker crashed: {0}")]
    Crashed(String),
    /// The deadline passed; the process group was killed.
    #[error("invocation exceeded its {0:?} deadline")]
    Timeout(Duration),
    /// Output larger than the bound or not JSON.
    #[error("invalid output: {0}")]
    InvalidOutput(String),
    /// Input is not JSON.
    #[error("invalid input: {0}")]
    InvalidInput(String),
}

/// A started backend.
#[derive(Debug)]
pub enum Backend {
    /// Persistent Python worker.
    Python(Box<PythonWorker>),
    /// Bash function.
    Bash(BashFunction),
}

impl Backend {
    /// Starts (and validates) the handler.
    pub async fn start(kind: Kind, spec: Spec) -> Result<Self, StartError> {
        Ok(match kind {
            Kind::Python => Self::Python(Box::new(PythonWorker::start(spec).await?)),
            Kind::Bash => Self::Bash(BashFunction::start(spec).await?),
        })
    }

    /// Runs one invocation.
    pub async fn invoke(
        &mut self,
        input: &[u8],
        timeout: Duration,
        max_output: usize,
    ) -> Result<Vec<u8>, InvokeError> {
        match self {
            Self::Python(w) => w.invoke(input, timeout, max_output).await,
            Self::Bash(b) => b.invoke(input, timeout, max_output).await,
        }
    }

    /// Kills any process the backend holds.
    pub async fn shutdown(&mut self) {
        match self {
            Self::Python(w) => w.shutdown().await,
            Self::Bash(_) => {}
        }
    }
}

/// Kills a whole process group (the handler and everything it started).
pub(crate) fn kill_group(pid: Option<u32>) {
    if let Some(pid) = pid.and_then(|p| i32::try_from(p).ok()) {
        // ESRCH (already gone) is the only expected failure.
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

/// Bounds an error message to `max` bytes.
pub(crate) fn bounded(s: &str, max: usize) -> String {
    kruntimes_proto::api::truncate_utf8(s.to_owned(), max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handlers_are_module_dot_function() {
        let h = parse_handler(Kind::Python, "pkg.main.invoke").unwrap();
        assert_eq!(h.module, "pkg.main");
        assert_eq!(h.function, "invoke");
        let h = parse_handler(Kind::Bash, "hello-world.greet").unwrap();
        assert_eq!(h.module, "hello-world");
        for bad in [
            "invoke",
            "main.",
            ".invoke",
            "main.in voke",
            "main.1x",
            "ma;in.f",
            "a..b",
        ] {
            assert!(parse_handler(Kind::Python, bad).is_err(), "{bad}");
        }
        for bad in ["../x.f", "a/b.f", "-rf.f", "$(id).f", "x.f;id", "x.`id`"] {
            assert!(parse_handler(Kind::Bash, bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn only_builtin_runtimes_have_backends() {
        assert_eq!(Kind::for_runtime("python"), Some(Kind::Python));
        assert_eq!(Kind::for_runtime("bash"), Some(Kind::Bash));
        assert_eq!(Kind::for_runtime("node"), None);
    }
}
