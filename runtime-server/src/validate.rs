//! Every request validated into a typed one before anything runs: Run UIDs
//! (also directory names), attempts, handlers, environments, source and
//! workspace paths, deadlines and bounds. Pure.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use kruntimes_proto::runtime::v1 as pb;
use kruntimes_proto::runtime::{FileOp, InvokeError};

use crate::error::{Error, Result};
use crate::function::{Backend, Handler, handler};
use crate::session::path;
use crate::{env, source};

/// Handler loading bound when the request sets none.
pub const DEFAULT_START_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest deadline of anything the server runs.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(3600);
/// Captured output when the request sets no bound.
pub const DEFAULT_MAX_OUTPUT: usize = 1024 * 1024;

/// A validated `RegisterFunction`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Register {
    /// Run UID.
    pub run_uid: String,
    /// Attempt (≥ 1).
    pub attempt: u64,
    /// The backend.
    pub kind: Backend,
    /// The handler.
    pub handler: Handler,
    /// Inline source: its path (default: the handler's file) and text.
    pub source: Option<(Option<String>, String)>,
    /// The Run's variables.
    pub env: BTreeMap<String, String>,
    /// Bound on loading the handler.
    pub start_timeout: Duration,
    /// Give the function an artifacts directory.
    pub artifacts: bool,
}

/// What a task runs, decided from its request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Program {
    /// The inline source, written at this workspace path.
    Inline(String),
    /// A script file of the workspace and its arguments.
    Entrypoint {
        /// Workspace-relative path.
        path: String,
        /// Its arguments.
        args: Vec<String>,
    },
    /// Shell commands, one per line.
    Commands(String),
}

/// A validated `StartTask`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartTask {
    /// Run UID.
    pub run_uid: String,
    /// Attempt (≥ 1).
    pub attempt: u64,
    /// The backend.
    pub kind: Backend,
    /// What runs.
    pub program: Program,
    /// Inline source: its path and text (with [`Program::Inline`]).
    pub source: Option<(String, String)>,
    /// The Run's variables.
    pub env: BTreeMap<String, String>,
    /// Bytes kept of each stream's end.
    pub tail_bytes: usize,
    /// Whether the task gets an artifacts directory.
    pub artifacts: bool,
    /// Whether the files staged for this attempt move into its working
    /// directory.
    pub inputs: bool,
}

/// A validated `InvokeFunction`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invoke {
    /// Run UID.
    pub run_uid: String,
    /// The registration's handle.
    pub handle: String,
    /// JSON input.
    pub input: Vec<u8>,
    /// Deadline.
    pub timeout: Duration,
    /// Largest output.
    pub max_output: usize,
}

/// A validated `OpenSession`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Open {
    /// Run UID.
    pub run_uid: String,
    /// Attempt (≥ 1).
    pub attempt: u64,
    /// Inline source: path (default `main.sh`) and text.
    pub source: Option<(String, String)>,
    /// The session's variables.
    pub env: BTreeMap<String, String>,
    /// Whether the session gets an artifacts directory.
    pub artifacts: bool,
    /// Whether the files staged for this attempt move into its workspace.
    pub inputs: bool,
}

/// A validated `RunCommand`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Command {
    /// Run UID.
    pub run_uid: String,
    /// Program and arguments.
    pub argv: Vec<String>,
    /// Stdin bytes.
    pub stdin: Vec<u8>,
    /// Workspace-relative working directory.
    pub cwd: String,
    /// Overrides on top of the session's environment.
    pub env: BTreeMap<String, String>,
    /// Deadline.
    pub timeout: Duration,
    /// Captured bytes per stream.
    pub max_output: usize,
}

fn invalid(msg: impl Into<String>) -> Error {
    Error::Invalid(msg.into())
}

/// A Run UID, safe as a directory name.
pub fn run_uid(uid: &str) -> Result<String> {
    if kruntimes_proto::api::valid_run_uid(uid) {
        Ok(uid.to_owned())
    } else {
        Err(invalid(format!("run uid {uid:?} is malformed")))
    }
}

fn attempt(a: u64) -> Result<u64> {
    if a == 0 {
        return Err(invalid("attempt must be at least 1"));
    }
    Ok(a)
}

fn environment(vars: HashMap<String, String>) -> Result<BTreeMap<String, String>> {
    for (k, v) in &vars {
        if !env::valid_name(k) || v.contains('\0') {
            return Err(invalid(format!("invalid env variable {k:?}")));
        }
    }
    Ok(vars.into_iter().collect())
}

fn workspace_path(p: &str) -> Result<String> {
    path::normalize(p).map_err(|e| invalid(format!("{p}: {e}")))?;
    Ok(p.to_owned())
}

/// A deadline in milliseconds: required, at most [`MAX_TIMEOUT`].
fn deadline(ms: u32) -> Result<Duration> {
    if ms == 0 {
        return Err(invalid("timeout_ms is required"));
    }
    Ok(Duration::from_millis(ms.into()).min(MAX_TIMEOUT))
}

fn bound(bytes: u64) -> usize {
    match bytes {
        0 => DEFAULT_MAX_OUTPUT,
        n => usize::try_from(n)
            .unwrap_or(usize::MAX)
            .min(kruntimes_proto::runtime::MAX_MESSAGE_BYTES),
    }
}

fn inline(src: Option<pb::Source>) -> Result<Option<(Option<String>, String)>> {
    let Some(src) = src.filter(|s| !s.inline.is_empty()) else {
        return Ok(None);
    };
    if src.path.is_empty() {
        return Ok(Some((None, src.inline)));
    }
    source::validate_inline_path(&src.path).map_err(|e| invalid(e.to_string()))?;
    Ok(Some((Some(src.path), src.inline)))
}

/// Validates `RegisterFunction`.
pub fn register(req: pb::RegisterFunctionRequest) -> Result<Register> {
    let run = req.run.ok_or_else(|| invalid("run is required"))?;
    let named = if req.backend.is_empty() {
        &run.runtime
    } else {
        &req.backend
    };
    let kind = Backend::parse(named)
        .ok_or_else(|| invalid(format!("runtime {named:?} has no built-in backend")))?;
    Ok(Register {
        run_uid: run_uid(&run.uid)?,
        attempt: attempt(req.attempt)?,
        kind,
        handler: handler::parse_handler(kind, &req.handler).map_err(Error::Invalid)?,
        source: inline(req.source)?,
        env: environment(req.env)?,
        start_timeout: match req.start_timeout_ms {
            0 => DEFAULT_START_TIMEOUT,
            ms => Duration::from_millis(ms.into()).min(MAX_TIMEOUT),
        },
        artifacts: req.artifacts,
    })
}

/// Validates `StartTask`: inline source runs as it is (`entrypoint` and
/// `args` ignored); else `entrypoint` with `args`; else `args` as shell
/// commands, which only a shell-style backend runs (a refusal, not a
/// malformed request, for another: the Run's spec asked for it).
pub fn start_task(req: pb::StartTaskRequest) -> Result<StartTask> {
    use kruntimes_proto::runtime::{DEFAULT_TASK_TAIL_BYTES, MAX_TASK_TAIL_BYTES};
    let run = req.run.ok_or_else(|| invalid("run is required"))?;
    let named = if req.backend.is_empty() {
        &run.runtime
    } else {
        &req.backend
    };
    let kind = Backend::parse(named)
        .ok_or_else(|| invalid(format!("runtime {named:?} has no built-in backend")))?;
    if req.args.iter().any(|a| a.contains('\0')) {
        return Err(invalid("args contain NUL"));
    }
    let source = inline(req.source)?.map(|(p, text)| {
        let default = match kind {
            Backend::Python => "main.py",
            Backend::Bash => "main.sh",
        };
        (p.unwrap_or_else(|| default.into()), text)
    });
    let program = match (&source, req.entrypoint.as_str()) {
        (Some((path, _)), _) => Program::Inline(path.clone()),
        (None, "") if req.args.is_empty() => {
            return Err(invalid("a task needs inline source, an entrypoint or args"));
        }
        (None, "") => match kind {
            Backend::Bash => Program::Commands(req.args.join("\n")),
            Backend::Python => {
                return Err(Error::Load(
                    "the python runtime runs a script: set spec.source.inline or \
                     spec.mode.task.entrypoint (args alone are shell commands, for a \
                     shell-style Runtime such as bash)"
                        .into(),
                ));
            }
        },
        (None, entrypoint) => {
            let path = path::normalize(entrypoint)
                .map_err(|e| invalid(format!("entrypoint {entrypoint:?}: {e}")))?;
            if path.as_os_str().is_empty() {
                return Err(invalid("entrypoint names no file"));
            }
            Program::Entrypoint {
                path: path.to_string_lossy().into_owned(),
                args: req.args,
            }
        }
    };
    let tail = match req.tail_bytes {
        0 => DEFAULT_TASK_TAIL_BYTES,
        n => n.min(MAX_TASK_TAIL_BYTES),
    };
    Ok(StartTask {
        run_uid: run_uid(&run.uid)?,
        attempt: attempt(req.attempt)?,
        kind,
        program,
        source,
        env: environment(req.env)?,
        tail_bytes: tail as usize,
        artifacts: req.artifacts,
        inputs: req.inputs,
    })
}

/// Validates `InvokeFunction`: a malformed request is the invocation's
/// failure (an answer), never a failed call.
pub fn invoke(req: pb::InvokeFunctionRequest) -> Result<Invoke, InvokeError> {
    let bad = |e: Error| InvokeError::InvalidInput(e.to_string());
    if req.handle.is_empty() {
        return Err(bad(invalid("handle is required")));
    }
    // JSON never holds a raw NUL; a Bash variable cannot hold one at all.
    if req.input.contains(&0) {
        return Err(bad(invalid("input holds a NUL byte, so it is not JSON")));
    }
    Ok(Invoke {
        run_uid: run_uid(&req.run_uid).map_err(bad)?,
        handle: req.handle,
        input: req.input,
        timeout: deadline(req.timeout_ms).map_err(bad)?,
        max_output: bound(req.max_output_bytes),
    })
}

/// Validates `OpenSession`.
pub fn open(req: pb::OpenSessionRequest) -> Result<Open> {
    let run = req.run.ok_or_else(|| invalid("run is required"))?;
    Ok(Open {
        run_uid: run_uid(&run.uid)?,
        attempt: attempt(req.attempt)?,
        source: inline(req.source)?.map(|(p, text)| (p.unwrap_or_else(|| "main.sh".into()), text)),
        env: environment(req.env)?,
        artifacts: req.artifacts,
        inputs: req.inputs,
    })
}

/// Validates `StageInputs`' first message: the Run and attempt whose
/// files follow.
pub fn stage_target(first: Option<pb::StageChunk>) -> Result<(String, u64)> {
    match first.and_then(|c| c.part) {
        Some(pb::stage_chunk::Part::Target(t)) => Ok((run_uid(&t.run_uid)?, attempt(t.attempt)?)),
        _ => Err(invalid(
            "the first message of StageInputs must be a StageTarget",
        )),
    }
}

/// Longest staged path, bytes.
pub const MAX_STAGED_PATH: usize = 4096;
/// Longest segment of a staged path, bytes (the file system's name bound).
pub const MAX_STAGED_SEGMENT: usize = 255;

/// A staged file's path: relative, `/`-separated, without an empty, `.`
/// or `..` segment or a NUL; its segments.
pub fn staged_path(p: &str) -> Result<Vec<String>> {
    let why = if p.is_empty() {
        Some("the path is empty")
    } else if p.starts_with('/') {
        Some("the path must be relative to the working directory")
    } else if p.len() > MAX_STAGED_PATH {
        Some("the path is longer than 4096 bytes")
    } else if p.contains('\0') {
        Some("the path contains NUL")
    } else if p.split('/').any(|s| s == "..") {
        Some("the path must not contain '..'")
    } else if p.split('/').any(|s| s.is_empty() || s == ".") {
        Some("the path must not contain an empty or '.' segment")
    } else if p.split('/').any(|s| s.len() > MAX_STAGED_SEGMENT) {
        Some("a segment of the path is longer than 255 bytes")
    } else {
        None
    };
    match why {
        Some(why) => Err(invalid(format!("input {p:?}: {why}"))),
        None => Ok(p.split('/').map(str::to_owned).collect()),
    }
}

/// Validates `RunCommand`.
pub fn command(req: pb::RunCommandRequest) -> Result<Command> {
    match req.argv.first() {
        Some(p) if !p.is_empty() => {}
        _ => return Err(invalid("argv must name a program")),
    }
    if req.argv.iter().any(|a| a.contains('\0')) {
        return Err(invalid("argv contains NUL"));
    }
    Ok(Command {
        run_uid: run_uid(&req.run_uid)?,
        argv: req.argv,
        stdin: req.stdin,
        cwd: workspace_path(&req.cwd)?,
        env: environment(req.env)?,
        timeout: deadline(req.timeout_ms)?,
        max_output: bound(req.max_output_bytes),
    })
}

/// Validates `StartProcess`.
pub fn process(req: pb::StartProcessRequest) -> Result<(String, crate::session::process::Start)> {
    match req.argv.first() {
        Some(p) if !p.is_empty() => {}
        _ => return Err(invalid("argv must name a program")),
    }
    if req.argv.iter().any(|a| a.contains('\0')) {
        return Err(invalid("argv contains NUL"));
    }
    let pty = match req.pty {
        None => None,
        Some(size) => Some(terminal_size(&size)?),
    };
    Ok((
        run_uid(&req.run_uid)?,
        crate::session::process::Start {
            argv: req.argv,
            cwd: workspace_path(&req.cwd)?,
            env: environment(req.env)?,
            stdin: req.stdin,
            pty,
            display: req.display,
        },
    ))
}

/// A terminal's rows and columns
/// ([`kruntimes_proto::runtime::terminal_size`]).
pub fn terminal_size(size: &pb::PtySize) -> Result<(u16, u16)> {
    kruntimes_proto::runtime::terminal_size(size.rows, size.cols).map_err(invalid)
}

/// Validates `FileOperation`.
pub fn file_op(req: pb::FileOperationRequest) -> Result<(String, FileOp)> {
    let (uid, op) = FileOp::from_request(req).ok_or_else(|| invalid("op is required"))?;
    let uid = run_uid(&uid)?;
    match &op {
        FileOp::Write { path, .. } | FileOp::Mkdir { path } | FileOp::Delete { path } => {
            workspace_path(path)?;
        }
        FileOp::Rename { from, to } => {
            workspace_path(from)?;
            workspace_path(to)?;
        }
    }
    Ok((uid, op))
}

#[cfg(test)]
mod tests;
