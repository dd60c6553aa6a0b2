//! The persistent Python worker: one interpreter per registration imports
//! the handler once and serves invocations over a framed pipe protocol
//! (see `worker.py`). A crash or timeout kills the process group; the next
//! invocation starts a fresh worker.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use super::{InvokeError, Spec, StartError, bounded, kill_group, logs};

const WORKER_SOURCE: &str = include_str!("worker.py");

/// Bytes of framing overhead beyond the payload (the tag).
const TAG: usize = 1;

#[derive(Debug)]
struct Process {
    child: Child,
    stdin: ChildStdin,
    stdout: ChildStdout,
}

impl Process {
    fn kill(&mut self) {
        kill_group(self.child.id());
    }
}

/// A registration's Python worker.
#[derive(Debug)]
pub struct PythonWorker {
    spec: Spec,
    process: Option<Process>,
}

enum Frame {
    Ok(Vec<u8>),
    TooLarge(usize),
}

async fn read_frame(stdout: &mut ChildStdout, max: usize) -> std::io::Result<Frame> {
    let mut len = [0u8; 4];
    stdout.read_exact(&mut len).await?;
    let len = u32::from_be_bytes(len) as usize;
    if len > max + TAG {
        return Ok(Frame::TooLarge(len));
    }
    let mut buf = vec![0u8; len];
    stdout.read_exact(&mut buf).await?;
    Ok(Frame::Ok(buf))
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

impl PythonWorker {
    /// Spawns the worker and waits until the handler is imported.
    pub async fn start(spec: Spec) -> Result<Self, StartError> {
        let mut w = Self {
            spec,
            process: None,
        };
        w.spawn().await?;
        Ok(w)
    }

    async fn spawn(&mut self) -> Result<(), StartError> {
        let spec = &self.spec;
        let mut child = Command::new(&spec.python)
            .arg("-u")
            .arg("-c")
            .arg(WORKER_SOURCE)
            .arg(&spec.handler.module)
            .arg(&spec.handler.function)
            .current_dir(&spec.workdir)
            .env_clear()
            .envs(spec.environment())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true)
            .spawn()?;
        let io_err = || std::io::Error::other("worker pipes missing");
        let stdin = child.stdin.take().ok_or_else(io_err)?;
        let stdout = child.stdout.take().ok_or_else(io_err)?;
        if let Some(stderr) = child.stderr.take() {
            tokio::spawn(logs::forward(stderr, spec.run_uid.clone(), None));
        }
        let mut process = Process {
            child,
            stdin,
            stdout,
        };
        let hello = tokio::time::timeout(
            spec.start_timeout,
            read_frame(&mut process.stdout, 64 * 1024),
        )
        .await;
        let frame = match hello {
            Err(_) => {
                process.kill();
                return Err(StartError::Timeout(spec.start_timeout));
            }
            Ok(Err(e)) => {
                process.kill();
                return Err(StartError::Load(format!(
                    "worker exited during start-up: {e}"
                )));
            }
            Ok(Ok(Frame::TooLarge(_))) => {
                process.kill();
                return Err(StartError::Load(
                    "worker sent an oversized start-up frame".into(),
                ));
            }
            Ok(Ok(Frame::Ok(f))) => f,
        };
        match frame.split_first() {
            Some((b'r', _)) => {
                self.process = Some(process);
                Ok(())
            }
            Some((b'f', body)) => {
                process.kill();
                let (kind, message) = parse_error(body);
                Err(StartError::Load(format!("{kind}: {message}")))
            }
            _ => {
                process.kill();
                Err(StartError::Load(
                    "worker sent an unexpected start-up frame".into(),
                ))
            }
        }
    }

    /// Runs one invocation on the worker, starting one first if needed.
    pub async fn invoke(
        &mut self,
        input: &[u8],
        timeout: Duration,
        max_output: usize,
    ) -> Result<Vec<u8>, InvokeError> {
        if self.process.is_none() {
            tracing::info!(run_uid = %self.spec.run_uid, "respawning python worker");
            self.spawn()
                .await
                .map_err(|e| InvokeError::Crashed(e.to_string()))?;
        }
        let Some(process) = self.process.as_mut() else {
            return Err(InvokeError::Crashed("worker not running".into()));
        };
        let exchange = async {
            let len = u32::try_from(input.len() + TAG)
                .map_err(|_| std::io::Error::other("input too large"))?;
            let mut frame = Vec::with_capacity(input.len() + 5);
            frame.extend_from_slice(&len.to_be_bytes());
            frame.push(b'i');
            frame.extend_from_slice(input);
            process.stdin.write_all(&frame).await?;
            process.stdin.flush().await?;
            read_frame(&mut process.stdout, max_output).await
        };
        let result = tokio::time::timeout(timeout, exchange).await;
        let outcome = match result {
            Err(_) => Err(InvokeError::Timeout(timeout)),
            Ok(Err(e)) => Err(InvokeError::Crashed(self.exit_reason(e).await)),
            Ok(Ok(Frame::TooLarge(n))) => Err(InvokeError::InvalidOutput(format!(
                "output of {} bytes exceeds the {max_output}-byte limit",
                n - TAG
            ))),
            Ok(Ok(Frame::Ok(frame))) => {
                return match frame.split_first() {
                    Some((b'o', body)) => Ok(body.to_vec()),
                    Some((b'e', body)) => {
                        let (kind, message) = parse_error(body);
                        Err(InvokeError::Function { kind, message })
                    }
                    _ => {
                        self.discard().await;
                        Err(InvokeError::Crashed(
                            "worker sent an unexpected frame".into(),
                        ))
                    }
                };
            }
        };
        // Timeouts, crashes and oversized output all leave the pipe in an
        // unknown state: kill the group and start afresh next time.
        self.discard().await;
        outcome
    }

    async fn exit_reason(&mut self, e: std::io::Error) -> String {
        let Some(p) = self.process.as_mut() else {
            return e.to_string();
        };
        match tokio::time::timeout(Duration::from_millis(500), p.child.wait()).await {
            Ok(Ok(status)) => format!("worker exited ({status})"),
            _ => format!("worker pipe failed: {e}"),
        }
    }

    async fn discard(&mut self) {
        if let Some(mut p) = self.process.take() {
            p.kill();
            let _ = p.child.wait().await;
        }
    }

    /// Stops the worker.
    pub async fn shutdown(&mut self) {
        self.discard().await;
    }
}
