//! The `operations:execute` / `operations:stream` request and its
//! validation into an [`Operation`]. Pure. Results and stream events are in
//! [`super::outcome`].

use std::collections::BTreeMap;

use kruntimes_proto::runtime::FileOp;
use serde::Deserialize;

/// Largest file written or read through the API.
pub use kruntimes_proto::api::MAX_SESSION_FILE_BYTES as MAX_FILE_BYTES;
/// Largest stdin of a command.
pub const MAX_STDIN_BYTES: usize = 1024 * 1024;
/// Captured bytes per output stream.
pub const MAX_OUTPUT_BYTES: usize = 1024 * 1024;
/// Longest argv (entries) / shell command (bytes).
pub const MAX_ARGV: usize = 4096;

/// `command`: exactly one of `argv` or `shell`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommandSpec {
    /// Program and arguments, executed without a shell.
    #[serde(default)]
    pub argv: Option<Vec<String>>,
    /// A `bash -c` script.
    #[serde(default)]
    pub shell: Option<String>,
}

/// A path-only operation.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PathOp {
    /// Workspace-relative path.
    pub path: String,
}

/// `writeFile`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WriteFile {
    /// Workspace-relative path.
    pub path: String,
    /// Content, base64.
    pub content_base64: String,
}

/// `rename`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rename {
    /// Source.
    pub from: String,
    /// Destination.
    pub to: String,
}

/// The body of `operations:execute` / `operations:stream`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OperationRequest {
    /// Run a command.
    #[serde(default)]
    pub command: Option<CommandSpec>,
    /// Command stdin.
    #[serde(default)]
    pub stdin: Option<String>,
    /// Command working directory (workspace-relative).
    #[serde(default)]
    pub cwd: Option<String>,
    /// Command environment overrides.
    #[serde(default)]
    pub env: Option<BTreeMap<String, String>>,
    /// Command timeout.
    #[serde(default)]
    pub timeout_seconds: Option<u64>,
    /// Write a file.
    #[serde(default)]
    pub write_file: Option<WriteFile>,
    /// Create a directory (and its parents).
    #[serde(default)]
    pub mkdir: Option<PathOp>,
    /// Delete a file or directory tree.
    #[serde(default)]
    pub delete: Option<PathOp>,
    /// Rename a file or directory.
    #[serde(default)]
    pub rename: Option<Rename>,
}

/// A validated operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Operation {
    /// A command.
    Command {
        /// Program and arguments (`bash -c …` for shell commands).
        argv: Vec<String>,
        /// Stdin bytes.
        stdin: Vec<u8>,
        /// Working directory.
        cwd: String,
        /// Environment overrides.
        env: BTreeMap<String, String>,
        /// Requested timeout, seconds.
        timeout_seconds: Option<u64>,
    },
    /// A file mutation, as the Runtime Server takes it.
    File(FileOp),
    /// A background process to start.
    StartProcess {
        /// Program and arguments.
        argv: Vec<String>,
        /// Working directory.
        cwd: String,
        /// Environment overrides.
        env: BTreeMap<String, String>,
        /// Keep stdin open.
        stdin: bool,
        /// A terminal's size.
        pty: Option<PtySize>,
        /// Its command as the list shows it (the request's JSON).
        display: String,
    },
}

impl Operation {
    /// Kind for audit logs (never the command text or file contents).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Command { .. } => "command",
            Self::StartProcess { .. } => "process",
            Self::File(f) => f.kind(),
        }
    }

    /// The workspace paths it names.
    pub fn paths(&self) -> Vec<&str> {
        match self {
            Self::Command { cwd, .. } | Self::StartProcess { cwd, .. } => vec![cwd],
            Self::File(
                FileOp::Write { path, .. } | FileOp::Mkdir { path } | FileOp::Delete { path },
            ) => {
                vec![path]
            }
            Self::File(FileOp::Rename { from, to }) => vec![from, to],
        }
    }
}

/// The argv of a command: its `argv`, or `bash -c` with its `shell`.
fn argv(cmd: CommandSpec) -> Result<Vec<String>, String> {
    match (cmd.argv, cmd.shell) {
        (Some(argv), None) => {
            if argv.is_empty() || argv[0].is_empty() {
                return Err("command.argv must name a program".into());
            }
            if argv.len() > MAX_ARGV || argv.iter().any(|a| a.contains('\0')) {
                return Err("command.argv is too long or contains NUL".into());
            }
            Ok(argv)
        }
        (None, Some(shell)) => {
            if shell.len() > 1024 * 1024 || shell.contains('\0') {
                return Err("command.shell is too long or contains NUL".into());
            }
            Ok(vec!["bash".into(), "-c".into(), shell])
        }
        _ => Err("command needs exactly one of argv or shell".into()),
    }
}

fn check_env(env: &BTreeMap<String, String>) -> Result<(), String> {
    if env
        .keys()
        .any(|k| k.is_empty() || k.contains('=') || k.contains('\0'))
        || env.values().any(|v| v.contains('\0'))
    {
        return Err("env names must be non-empty without '=' or NUL".into());
    }
    Ok(())
}

/// A terminal's size in a start request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct PtySize {
    /// Rows (1–1000).
    pub rows: u32,
    /// Columns (1–1000).
    pub cols: u32,
}

impl PtySize {
    /// Checks both sides ([`kruntimes_proto::runtime::terminal_size`]).
    pub fn check(self) -> Result<Self, String> {
        kruntimes_proto::runtime::terminal_size(self.rows, self.cols)?;
        Ok(self)
    }
}

/// The body of `POST …/processes`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProcessRequest {
    /// What to run.
    pub command: CommandSpec,
    /// Working directory (workspace-relative).
    #[serde(default)]
    pub cwd: Option<String>,
    /// Environment overrides.
    #[serde(default)]
    pub env: Option<BTreeMap<String, String>>,
    /// Keep stdin open for `:input`.
    #[serde(default)]
    pub stdin: bool,
    /// Run on a terminal of this size.
    #[serde(default)]
    pub pty: Option<PtySize>,
}

/// Validates a start request into an operation.
pub fn validate_process(req: ProcessRequest) -> Result<Operation, String> {
    let display = match (&req.command.argv, &req.command.shell) {
        (Some(argv), None) => serde_json::json!({ "argv": argv }),
        (_, shell) => serde_json::json!({ "shell": shell }),
    };
    let argv = argv(req.command)?;
    let env = req.env.unwrap_or_default();
    check_env(&env)?;
    let pty = req.pty.map(PtySize::check).transpose()?;
    Ok(Operation::StartProcess {
        argv,
        cwd: req.cwd.unwrap_or_default(),
        env,
        // A terminal always takes input.
        stdin: req.stdin && pty.is_none(),
        pty,
        display: display.to_string(),
    })
}

/// Validates a request into an operation.
pub fn validate(req: OperationRequest) -> Result<Operation, String> {
    use base64::Engine as _;
    let n = [
        req.command.is_some(),
        req.write_file.is_some(),
        req.mkdir.is_some(),
        req.delete.is_some(),
        req.rename.is_some(),
    ]
    .iter()
    .filter(|b| **b)
    .count();
    if n != 1 {
        return Err("exactly one of command, writeFile, mkdir, delete, rename is required".into());
    }
    let command_only = req.stdin.is_some()
        || req.cwd.is_some()
        || req.env.is_some()
        || req.timeout_seconds.is_some();
    if let Some(cmd) = req.command {
        let argv = argv(cmd)?;
        let stdin = req.stdin.unwrap_or_default().into_bytes();
        if stdin.len() > MAX_STDIN_BYTES {
            return Err("stdin exceeds 1 MiB".into());
        }
        let env = req.env.unwrap_or_default();
        check_env(&env)?;
        return Ok(Operation::Command {
            argv,
            stdin,
            cwd: req.cwd.unwrap_or_default(),
            env,
            timeout_seconds: req.timeout_seconds,
        });
    }
    if command_only {
        return Err("stdin, cwd, env and timeoutSeconds apply to commands only".into());
    }
    if let Some(w) = req.write_file {
        let content = base64::engine::general_purpose::STANDARD
            .decode(w.content_base64.as_bytes())
            .map_err(|e| format!("writeFile.contentBase64: {e}"))?;
        if content.len() > MAX_FILE_BYTES {
            return Err(format!(
                "writeFile: {}",
                kruntimes_proto::api::session_file_too_large(content.len() as u64)
            ));
        }
        return Ok(Operation::File(FileOp::Write {
            path: w.path,
            content,
        }));
    }
    if let Some(m) = req.mkdir {
        return Ok(Operation::File(FileOp::Mkdir { path: m.path }));
    }
    if let Some(d) = req.delete {
        return Ok(Operation::File(FileOp::Delete { path: d.path }));
    }
    match req.rename {
        Some(r) => Ok(Operation::File(FileOp::Rename {
            from: r.from,
            to: r.to,
        })),
        None => Err("no operation".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(v: serde_json::Value) -> Result<Operation, String> {
        let r: OperationRequest = serde_json::from_value(v).map_err(|e| e.to_string())?;
        validate(r)
    }

    #[test]
    fn commands_are_argv_or_shell() {
        let op = req(
            serde_json::json!({"command": {"argv": ["ls", "-l"]}, "cwd": "d", "timeoutSeconds": 3}),
        )
        .unwrap();
        assert!(
            matches!(op, Operation::Command { ref argv, ref cwd, timeout_seconds: Some(3), .. } if argv == &["ls", "-l"] && cwd == "d")
        );
        let op = req(serde_json::json!({"command": {"shell": "echo hi"}})).unwrap();
        assert!(
            matches!(op, Operation::Command { ref argv, .. } if argv == &["bash", "-c", "echo hi"])
        );
        assert!(req(serde_json::json!({"command": {"argv": ["a"], "shell": "b"}})).is_err());
        assert!(req(serde_json::json!({"command": {}})).is_err());
        assert!(req(serde_json::json!({"command": {"argv": []}})).is_err());
    }

    #[test]
    fn exactly_one_operation_and_no_stray_fields() {
        assert!(req(serde_json::json!({})).is_err());
        assert!(req(serde_json::json!({"mkdir": {"path": "a"}, "delete": {"path": "b"}})).is_err());
        assert!(req(serde_json::json!({"mkdir": {"path": "a"}, "stdin": "x"})).is_err());
        assert!(req(serde_json::json!({"bogus": 1})).is_err());
        assert_eq!(
            req(serde_json::json!({"delete": {"path": "a"}})).unwrap(),
            Operation::File(FileOp::Delete { path: "a".into() })
        );
        assert_eq!(
            req(serde_json::json!({"rename": {"from": "a", "to": "b"}})).unwrap(),
            Operation::File(FileOp::Rename {
                from: "a".into(),
                to: "b".into()
            })
        );
    }

    #[test]
    fn write_file_decodes_and_bounds_content() {
        let op =
            req(serde_json::json!({"writeFile": {"path": "f", "contentBase64": "aGk="}})).unwrap();
        assert_eq!(
            op,
            Operation::File(FileOp::Write {
                path: "f".into(),
                content: b"hi".to_vec()
            })
        );
        assert!(
            req(serde_json::json!({"writeFile": {"path": "f", "contentBase64": "!!"}})).is_err()
        );
    }
}
