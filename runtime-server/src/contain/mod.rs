//! Containment: every user process — a Python worker, a Bash call, a
//! session command — runs under a [`shim`] of its own, and the server holds
//! it as a [`Contained`]: dropping it (or [`Contained::kill`]) closes the
//! control pipe and the shim kills the whole tree at once;
//! [`Contained::terminate`] asks for SIGTERM, a grace period, then SIGKILL.
//! Whatever the child started, double-forked and `setsid` children
//! included, stays in that tree ([`tree`]).

pub mod shim;
pub mod tree;

use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use nix::fcntl::{FcntlArg, FdFlag, OFlag, fcntl};
use tokio::process::{Child, Command};

/// How this server starts its shim: an executable and the arguments before
/// `shim` (`runtime-server shim …`, `krt runtime-server shim …`).
#[derive(Debug, Clone)]
pub struct Shim {
    program: PathBuf,
    prefix: Vec<String>,
}

/// What to run under a shim.
#[derive(Debug)]
pub struct Launch<'a> {
    /// Program and arguments (`argv[0]` is looked up on the child's PATH).
    pub argv: &'a [String],
    /// Working directory.
    pub cwd: &'a Path,
    /// The child's whole environment.
    pub env: &'a BTreeMap<String, String>,
    /// On [`Contained::terminate`], how long the tree may take to end.
    pub grace: Duration,
    /// The child's stdin, stdout and stderr.
    pub stdio: [Stdio; 3],
    /// One more descriptor the child inherits under its own number (a
    /// Python worker's stdout beside its protocol pipes): the child learns
    /// the number from its arguments ([`Passed::number`]).
    pub pass: Option<Passed>,
}

/// A descriptor a [`Launch`] hands its child beside stdio.
#[derive(Debug)]
pub struct Passed(OwnedFd);

impl Passed {
    /// Hands `fd` to the child.
    pub fn new(fd: OwnedFd) -> Self {
        Self(fd)
    }

    /// The number the child finds it under.
    pub fn number(&self) -> i32 {
        self.0.as_raw_fd()
    }
}

impl Shim {
    /// The shim of `program` run with `prefix` before `shim`.
    pub fn new(program: impl Into<PathBuf>, prefix: &[&str]) -> Self {
        Self {
            program: program.into(),
            prefix: prefix.iter().map(|s| s.to_string()).collect(),
        }
    }

    /// The shim of this very executable.
    pub fn current(prefix: &[&str]) -> std::io::Result<Self> {
        Ok(Self::new(std::env::current_exe()?, prefix))
    }

    /// The shim's command for `argv` (its control pipe's read end made
    /// inheritable, `pass` too), and the pipe's ends.
    fn command(
        &self,
        argv: &[String],
        grace: Duration,
        pass: Option<&Passed>,
        tty: bool,
    ) -> std::io::Result<(Command, OwnedFd, OwnedFd)> {
        let (read, write) = nix::unistd::pipe2(OFlag::O_CLOEXEC)?;
        // Only the read end is inherited; the write end never leaves the
        // server, so the pipe closes exactly when the server lets go.
        fcntl(&read, FcntlArg::F_SETFD(FdFlag::empty()))?;
        // Inherited the same way; the shim keeps it open for the child.
        if let Some(Passed(fd)) = pass {
            fcntl(fd, FcntlArg::F_SETFD(FdFlag::empty()))?;
        }
        let mut cmd = Command::new(&self.program);
        cmd.args(&self.prefix)
            .arg("shim")
            .arg("--control-fd")
            .arg(read.as_raw_fd().to_string());
        if let Some(passed) = pass {
            cmd.arg("--pass-fd").arg(passed.number().to_string());
        }
        if tty {
            cmd.arg("--tty");
        }
        cmd.arg("--grace-ms")
            .arg(grace.as_millis().to_string())
            .arg("--")
            .args(argv)
            .kill_on_drop(false);
        Ok((cmd, read, write))
    }

    /// Starts `launch` under a new shim, in a process group of its own (a
    /// terminal's signals never reach user code directly).
    pub fn spawn(&self, launch: Launch<'_>) -> std::io::Result<Contained> {
        let (mut cmd, read, write) =
            self.command(launch.argv, launch.grace, launch.pass.as_ref(), false)?;
        let [stdin, stdout, stderr] = launch.stdio;
        cmd.current_dir(launch.cwd)
            .env_clear()
            .envs(launch.env)
            .stdin(stdin)
            .stdout(stdout)
            .stderr(stderr)
            .process_group(0);
        let child = cmd.spawn();
        drop(read);
        drop(launch.pass);
        Ok(Contained {
            child: child?,
            control: Some(write),
        })
    }

    /// Starts `launch` under a new shim on a new terminal of `size`: the
    /// shim leads a session of its own with the terminal as its controlling
    /// terminal and stdio, and its child inherits both (so a shell has job
    /// control). `launch.stdio` and `launch.pass` are not used. Returns the
    /// tree and the terminal's controlling side.
    pub fn spawn_on_terminal(
        &self,
        launch: Launch<'_>,
        size: pty_process::Size,
    ) -> std::io::Result<(Contained, pty_process::Pty)> {
        let (pty, pts) = pty_process::open().map_err(terminal_error)?;
        pty.resize(size).map_err(terminal_error)?;
        let (mut cmd, read, write) = self.command(launch.argv, launch.grace, None, true)?;
        cmd.current_dir(launch.cwd).env_clear().envs(launch.env);
        // No process group of its own: the terminal's session makes one
        // (a group leader could not start a session).
        let child = pty_process::Command::from(cmd).spawn(pts);
        drop(read);
        Ok((
            Contained {
                child: child.map_err(terminal_error)?,
                control: Some(write),
            },
            pty,
        ))
    }
}

/// A terminal's error as I/O.
fn terminal_error(e: pty_process::Error) -> std::io::Error {
    match e {
        pty_process::Error::Io(io) => io,
        other => std::io::Error::other(other.to_string()),
    }
}

/// A shim and the tree under it. Dropping it kills the tree.
#[derive(Debug)]
pub struct Contained {
    child: Child,
    control: Option<OwnedFd>,
}

impl Contained {
    /// The shim's process (for its pipes and its pid).
    pub fn child(&mut self) -> &mut Child {
        &mut self.child
    }

    /// The shim's pid, while it runs.
    pub fn id(&self) -> Option<u32> {
        self.child.id()
    }

    /// Kills the whole tree at once (the shim sees its control pipe close).
    pub fn kill(&mut self) {
        self.control.take();
    }

    /// SIGTERM to the tree, then SIGKILL after the launch's grace period.
    pub fn terminate(&self) {
        if let Some(pid) = self.child.id().and_then(|p| i32::try_from(p).ok()) {
            // ESRCH (already gone) is the only expected failure.
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
    }

    /// Waits for the shim, which exits once its tree is gone, with the
    /// child's status (`128 + N` for signal N).
    pub async fn wait(&mut self) -> std::io::Result<ExitStatus> {
        self.child.wait().await
    }

    /// Kills the tree and waits until it is gone.
    pub async fn kill_and_wait(&mut self) {
        self.kill();
        let _ = self.child.wait().await;
    }
}
