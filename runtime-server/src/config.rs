//! The server's configuration: flags ([`Args`]; each serving flag also read
//! from a `KRUNTIMES_RUNTIME_SERVER_*` variable) validated once into a typed
//! [`Config`] ([`ServeArgs::into_config`]); nothing past this module reads a
//! flag. Shared by the `runtime-server` binary and `krt runtime-server`.
//!
//! The hidden `shim` mode's flags have no variables on purpose: a shim is
//! started by the server for one user process, and must never take its
//! settings from an environment that user code shapes.

use std::path::PathBuf;

use clap::Parser;

use crate::contain::shim::ShimArgs;

/// `runtime-server` flags.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "runtime-server",
    about = "kruntimes Runtime Server: runs user code for runtimed",
    subcommand_negates_reqs = true,
    args_conflicts_with_subcommands = true
)]
pub struct Args {
    /// Hidden modes.
    #[command(subcommand)]
    pub mode: Option<Mode>,
    /// Serving flags.
    #[command(flatten)]
    pub serve: ServeArgs,
}

/// The hidden modes.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum Mode {
    /// Run one user process in a process tree killed whole.
    #[command(hide = true)]
    Shim(ShimArgs),
}

/// Where and how to serve. Defaults are documented once, here.
#[derive(Debug, Clone, clap::Args)]
pub struct ServeArgs {
    /// Unix socket to serve on (an old socket there is replaced). Required
    /// to serve.
    #[arg(long, env = "KRUNTIMES_RUNTIME_SERVER_SOCKET")]
    pub socket: Option<PathBuf>,
    /// Mode of the sockets, octal: `600` (this user only) or `660` (also
    /// the group: runtimed runs as another user of the same group in a
    /// Runtime Pod).
    #[arg(long, env = "KRUNTIMES_RUNTIME_SERVER_SOCKET_MODE", default_value = "600", value_parser = parse_socket_mode)]
    pub socket_mode: u32,
    /// Root of the Runs' working directories and session workspaces.
    /// Required to serve.
    #[arg(long, env = "KRUNTIMES_RUNTIME_SERVER_WORK_ROOT")]
    pub work_root: Option<PathBuf>,
    /// Python interpreter.
    #[arg(
        long,
        env = "KRUNTIMES_RUNTIME_SERVER_PYTHON",
        default_value = "python3"
    )]
    pub python: PathBuf,
    /// Pre-started Python interpreters kept ready for registrations (0:
    /// none; each registration then starts its own).
    #[arg(
        long,
        env = "KRUNTIMES_RUNTIME_SERVER_PYTHON_SPARES",
        default_value_t = 2
    )]
    pub python_spares: usize,
    /// Do not confine the server (no Landlock allowlist, capabilities kept):
    /// only for a server whose container confines it already.
    #[arg(long, env = "KRUNTIMES_RUNTIME_SERVER_NO_CONFINE")]
    pub no_confine: bool,
    /// A further tree user code may read (repeatable; the variable takes a
    /// comma-separated list).
    #[arg(
        long = "allow-read",
        value_name = "PATH",
        env = "KRUNTIMES_RUNTIME_SERVER_ALLOW_READ",
        value_delimiter = ','
    )]
    pub allow_read: Vec<PathBuf>,
    /// Directory of the per-Run logs of handler output (`<uid>.log`);
    /// default `WORK_ROOT/.logs`.
    #[arg(long, env = "KRUNTIMES_RUNTIME_SERVER_RUN_LOGS")]
    pub run_logs: Option<PathBuf>,
    /// A path no allowlisted tree may contain or lie beneath (repeatable;
    /// the variable takes a comma-separated list): the state directory of
    /// the stack that starts this server.
    #[arg(
        long = "protect",
        value_name = "PATH",
        env = "KRUNTIMES_RUNTIME_SERVER_PROTECT",
        value_delimiter = ','
    )]
    pub protect: Vec<PathBuf>,
}

fn parse_socket_mode(s: &str) -> Result<u32, String> {
    match s {
        "600" | "0600" => Ok(0o600),
        "660" | "0660" => Ok(0o660),
        _ => Err(format!("{s:?}: the socket mode is 600 or 660")),
    }
}

/// Why flags do not make a server.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// No `--socket`.
    #[error("--socket is required")]
    NoSocket,
    /// `--socket` names a directory, not a file in one.
    #[error("--socket {0:?} names no file")]
    SocketNamesNoFile(PathBuf),
    /// No `--work-root`.
    #[error("--work-root is required")]
    NoWorkRoot,
}

/// A server's validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// The contract's socket.
    pub socket: PathBuf,
    /// The file name of [`Self::socket`]; the fast paths' sockets are named
    /// after it, beside it.
    pub socket_name: String,
    /// Mode of every socket (0o600 or 0o660).
    pub socket_mode: u32,
    /// Root of the Runs' working directories and session workspaces.
    pub work_root: PathBuf,
    /// Python interpreter.
    pub python: PathBuf,
    /// Warm spare interpreters (0: none).
    pub python_spares: usize,
    /// Whether `main` confines the process before serving.
    pub confine: bool,
    /// Further trees user code may read.
    pub allow_read: Vec<PathBuf>,
    /// Directory of the per-Run logs.
    pub run_logs: PathBuf,
    /// Paths no allowlisted tree may reach.
    pub protect: Vec<PathBuf>,
}

impl ServeArgs {
    /// Validates the flags once.
    pub fn into_config(self) -> Result<Config, ConfigError> {
        let socket = self.socket.ok_or(ConfigError::NoSocket)?;
        let socket_name = socket
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .ok_or_else(|| ConfigError::SocketNamesNoFile(socket.clone()))?;
        let work_root = self.work_root.ok_or(ConfigError::NoWorkRoot)?;
        let run_logs = self.run_logs.unwrap_or_else(|| work_root.join(".logs"));
        Ok(Config {
            socket,
            socket_name,
            socket_mode: self.socket_mode,
            work_root,
            python: self.python,
            python_spares: self.python_spares,
            confine: !self.no_confine,
            allow_read: self.allow_read,
            run_logs,
            protect: self.protect,
        })
    }
}

impl Config {
    /// A configuration for `socket` and `work_root` with every default: the
    /// server in process (tests, embedding), unconfined.
    pub fn new(
        socket: impl Into<PathBuf>,
        work_root: impl Into<PathBuf>,
    ) -> Result<Config, ConfigError> {
        ServeArgs {
            socket: Some(socket.into()),
            socket_mode: 0o600,
            work_root: Some(work_root.into()),
            python: "python3".into(),
            python_spares: 2,
            no_confine: true,
            allow_read: Vec::new(),
            run_logs: None,
            protect: Vec::new(),
        }
        .into_config()
    }
}

#[cfg(test)]
mod tests;
