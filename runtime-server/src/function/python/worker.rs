//! One Python worker process: an interpreter under a shim that imports the
//! handler once and answers invocation frames (the pipe protocol of
//! [`kruntimes_proto::runtime::worker`], `worker.py`). Started fresh with
//! the handler named on its command line, or taken from the
//! [`super::spare::SparePool`] and told what to load.

use std::collections::BTreeMap;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use kruntimes_proto::runtime::worker::{self as frame, Answer, ExchangeError};
use tokio::process::{ChildStdin, ChildStdout};

use crate::contain::{Contained, Launch, Passed, Shim};
use crate::function::{InvokeError, Spec, StartError};
use crate::logs;

const WORKER_SOURCE: &str = include_str!("worker.py");

/// Largest start-up frame (an import error's type and message).
const MAX_START_FRAME: usize = 64 * 1024;

/// A running interpreter and its protocol pipes.
#[derive(Debug)]
pub struct Process {
    tree: Contained,
    stdin: ChildStdin,
    stdout: ChildStdout,
    label: logs::Label,
}

/// Starts an interpreter running the worker. With `handler` it loads it at
/// once; without, it is a spare waiting for a load frame.
pub fn spawn(
    shim: &Shim,
    python: &Path,
    cwd: &Path,
    env: &BTreeMap<String, String>,
    handler: Option<(&str, &str)>,
    label: logs::Label,
) -> std::io::Result<Process> {
    // The handler's own stdout (its prints, its children's output): a pipe
    // of its own beside the protocol's, so the Run's log tells it from
    // stderr.
    let (out_rx, out_tx) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    let out = Passed::new(out_tx);
    let mut argv = vec![
        python.display().to_string(),
        "-u".into(),
        "-c".into(),
        WORKER_SOURCE.into(),
        out.number().to_string(),
    ];
    if let Some((module, function)) = handler {
        argv.extend([module.to_owned(), function.to_owned()]);
    }
    let mut tree = shim.spawn(Launch {
        argv: &argv,
        cwd,
        env,
        grace: Duration::ZERO,
        stdio: [Stdio::piped(), Stdio::piped(), Stdio::piped()],
        pass: Some(out),
    })?;
    let out_rx = tokio::net::unix::pipe::Receiver::from_owned_fd(out_rx)?;
    tokio::spawn(logs::forward(
        out_rx,
        logs::Stream::Stdout,
        label.clone(),
        None,
    ));
    let child = tree.child();
    let io_err = || std::io::Error::other("worker pipes missing");
    let stdin = child.stdin.take().ok_or_else(io_err)?;
    let stdout = child.stdout.take().ok_or_else(io_err)?;
    if let Some(stderr) = child.stderr.take() {
        tokio::spawn(logs::forward(
            stderr,
            logs::Stream::Stderr,
            label.clone(),
            None,
        ));
    }
    Ok(Process {
        tree,
        stdin,
        stdout,
        label,
    })
}

impl Process {
    /// Whether the interpreter still runs.
    pub fn alive(&mut self) -> bool {
        matches!(self.tree.child().try_wait(), Ok(None))
    }

    /// Kills the interpreter and everything it started.
    pub fn kill(&mut self) {
        self.tree.kill();
    }

    /// Kills the tree and waits until it is gone.
    pub async fn discard(mut self) {
        self.tree.kill_and_wait().await;
    }

    /// The worker's stdin (write end) and stdout (read end), for a lease.
    pub fn pipes(&self) -> [BorrowedFd<'_>; 2] {
        [self.stdin.as_fd(), self.stdout.as_fd()]
    }

    /// Hands a spare its handler, working directory and environment.
    pub async fn load(&mut self, spec: &Spec) -> std::io::Result<()> {
        self.label.set(&spec.run_uid);
        let load = serde_json::json!({
            "module": spec.handler.module,
            "function": spec.handler.function,
            "cwd": spec.workdir,
            "env": spec.env,
        });
        let body = serde_json::to_vec(&load).map_err(std::io::Error::other)?;
        frame::write(&mut self.stdin, frame::LOAD, 0, &body).await
    }

    /// Waits until the handler is imported.
    pub async fn ready(&mut self, within: Duration) -> Result<(), StartError> {
        let read = frame::read(&mut self.stdout, MAX_START_FRAME);
        let (header, body) = match tokio::time::timeout(within, read).await {
            Err(_) => return Err(StartError::Timeout(within)),
            Ok(Err(e)) => {
                return Err(StartError::Load(format!(
                    "worker exited during start-up: {e}"
                )));
            }
            Ok(Ok((_, None))) => {
                return Err(StartError::Load(
                    "worker sent an oversized start-up frame".into(),
                ));
            }
            Ok(Ok((h, Some(body)))) => (h, body),
        };
        match header.tag {
            frame::READY => Ok(()),
            frame::LOAD_FAILED => {
                let (kind, message) = frame::error_of(&body);
                Err(StartError::Load(format!("{kind}: {message}")))
            }
            _ => Err(StartError::Load(
                "worker sent an unexpected start-up frame".into(),
            )),
        }
    }

    /// One request and its reply. Any error leaves the pipe in an unknown
    /// state: the caller discards the process.
    pub async fn exchange(
        &mut self,
        seq: u64,
        input: &[u8],
        max_output: usize,
    ) -> Result<Answer, InvokeError> {
        let exchanged =
            frame::exchange(&mut self.stdin, &mut self.stdout, seq, input, max_output).await;
        match exchanged {
            Ok(a) => Ok(a),
            Err(ExchangeError::Pipe(e)) => Err(InvokeError::Crashed(self.exit_reason(e).await)),
            Err(e @ ExchangeError::TooLarge(..)) => Err(InvokeError::InvalidOutput(e.to_string())),
            Err(e) => Err(InvokeError::Crashed(format!("{e}; worker replaced"))),
        }
    }

    /// How the worker ended, waiting a moment for it.
    pub async fn ended(&mut self) -> Option<std::process::ExitStatus> {
        tokio::time::timeout(Duration::from_millis(500), self.tree.wait())
            .await
            .ok()
            .and_then(Result::ok)
    }

    async fn exit_reason(&mut self, e: std::io::Error) -> String {
        match self.ended().await {
            Some(status) => format!("worker exited ({status})"),
            None => format!("worker pipe failed: {e}"),
        }
    }
}
