//! One Python worker process: an interpreter under a shim that imports the
//! handler once and answers invocation frames (see [`super::frame`] and
//! `worker.py`). Started fresh with the handler named on its command line,
//! or taken from the [`super::spare::SparePool`] and told what to load.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{ChildStdin, ChildStdout};

use super::frame::{self, FrameError, Header};
use crate::contain::{Contained, Launch, Shim};
use crate::function::{InvokeError, Spec, StartError, bounded};
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

/// What a worker answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// The handler's JSON output.
    Output(Vec<u8>),
    /// The handler raised.
    Raised {
        /// Exception type.
        kind: String,
        /// Bounded message.
        message: String,
    },
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
    let mut argv = vec![
        python.display().to_string(),
        "-u".into(),
        "-c".into(),
        WORKER_SOURCE.into(),
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
    })?;
    let child = tree.child();
    let io_err = || std::io::Error::other("worker pipes missing");
    let stdin = child.stdin.take().ok_or_else(io_err)?;
    let stdout = child.stdout.take().ok_or_else(io_err)?;
    if let Some(stderr) = child.stderr.take() {
        tokio::spawn(logs::forward(stderr, label.clone(), None));
    }
    Ok(Process {
        tree,
        stdin,
        stdout,
        label,
    })
}

fn parse_error(body: &[u8]) -> (String, String) {
    #[derive(serde::Deserialize)]
    struct E {
        #[serde(rename = "type")]
        kind: String,
        message: String,
    }
    match serde_json::from_slice::<E>(body) {
        Ok(e) => (bounded(&e.kind, 128), bounded(&e.message, 1024)),
        Err(_) => ("Error".into(), "handler failed".into()),
    }
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

    async fn send(&mut self, tag: u8, seq: u64, payload: &[u8]) -> std::io::Result<()> {
        let f = frame::encode(tag, seq, payload).map_err(std::io::Error::other)?;
        self.stdin.write_all(&f).await?;
        self.stdin.flush().await
    }

    /// Reads one frame of at most `max` payload bytes; a larger one is
    /// reported by its header alone (the pipe is then out of step).
    async fn read(&mut self, max: usize) -> std::io::Result<(Header, Option<Vec<u8>>)> {
        let mut head = [0u8; frame::HEADER];
        self.stdout.read_exact(&mut head).await?;
        let h = frame::header(&head).map_err(std::io::Error::other)?;
        if h.payload > max {
            return Ok((h, None));
        }
        let mut body = vec![0u8; h.payload];
        self.stdout.read_exact(&mut body).await?;
        Ok((h, Some(body)))
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
        self.send(frame::LOAD, 0, &body).await
    }

    /// Waits until the handler is imported.
    pub async fn ready(&mut self, within: Duration) -> Result<(), StartError> {
        let frame = match tokio::time::timeout(within, self.read(MAX_START_FRAME)).await {
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
        match frame {
            (
                Header {
                    tag: frame::READY, ..
                },
                _,
            ) => Ok(()),
            (
                Header {
                    tag: frame::LOAD_FAILED,
                    ..
                },
                body,
            ) => {
                let (kind, message) = parse_error(&body);
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
        if let Err(e) = self.send(frame::INVOKE, seq, input).await {
            return Err(InvokeError::Crashed(self.exit_reason(e).await));
        }
        let (h, body) = match self.read(max_output).await {
            Ok(f) => f,
            Err(e) => return Err(InvokeError::Crashed(self.exit_reason(e).await)),
        };
        if let Err(e @ FrameError::OutOfStep { .. }) = frame::answers(&h, seq) {
            return Err(InvokeError::Crashed(format!("{e}; worker replaced")));
        }
        let Some(body) = body else {
            return Err(InvokeError::OutputTooLarge(format!(
                "output of {} bytes exceeds the {max_output}-byte limit",
                h.payload
            )));
        };
        match h.tag {
            frame::OUTPUT => Ok(Answer::Output(body)),
            frame::ERROR => {
                let (kind, message) = parse_error(&body);
                Ok(Answer::Raised { kind, message })
            }
            _ => Err(InvokeError::Crashed(
                "worker sent an unexpected frame".into(),
            )),
        }
    }

    async fn exit_reason(&mut self, e: std::io::Error) -> String {
        match tokio::time::timeout(Duration::from_millis(500), self.tree.wait()).await {
            Ok(Ok(status)) => format!("worker exited ({status})"),
            _ => format!("worker pipe failed: {e}"),
        }
    }
}
