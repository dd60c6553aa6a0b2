//! The persistent Python worker: one interpreter per registration imports
//! the handler once and serves invocations over a framed pipe protocol
//! (see `worker.py`). A crash or timeout kills the process group; the next
//! invocation starts a fresh worker.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
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
    label: logs::Label,
}

/// Starts an interpreter running the worker. With `handler` it loads it at
/// once; without, it is a spare waiting for a load frame.
fn spawn_process(
    python: &Path,
    cwd: &Path,
    env: Vec<(String, String)>,
    handler: Option<(&str, &str)>,
    label: logs::Label,
) -> std::io::Result<Process> {
    let mut cmd = Command::new(python);
    cmd.arg("-u").arg("-c").arg(WORKER_SOURCE);
    if let Some((module, function)) = handler {
        cmd.arg(module).arg(function);
    }
    let mut child = cmd
        .current_dir(cwd)
        .env_clear()
        .envs(env)
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
        tokio::spawn(logs::forward(stderr, label.clone(), None));
    }
    Ok(Process {
        child,
        stdin,
        stdout,
        label,
    })
}

/// Pre-started interpreters, so registering a Python function (and
/// respawning a worker) only pays for importing the handler, not for
/// starting Python (~80 ms here).
pub struct SparePool {
    python: PathBuf,
    root: PathBuf,
    target: usize,
    spares: Mutex<Vec<Process>>,
}

impl std::fmt::Debug for SparePool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SparePool")
            .field("python", &self.python)
            .field("target", &self.target)
            .finish_non_exhaustive()
    }
}

impl SparePool {
    /// A pool keeping `target` spares of `python`, started in `root`.
    pub fn new(python: PathBuf, root: PathBuf, target: usize) -> Arc<Self> {
        let pool = Arc::new(Self {
            python,
            root,
            target,
            spares: Mutex::new(Vec::new()),
        });
        pool.fill();
        pool
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Process>> {
        self.spares.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Tops the pool up to its target.
    pub fn fill(&self) {
        let mut spares = self.lock();
        while spares.len() < self.target {
            let env = vec![
                (
                    "PATH".to_owned(),
                    std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".into()),
                ),
                ("LANG".to_owned(), "C.UTF-8".to_owned()),
            ];
            match spawn_process(
                &self.python,
                &self.root,
                env,
                None,
                logs::Label::new("spare"),
            ) {
                Ok(p) => spares.push(p),
                Err(e) => {
                    tracing::warn!(error = %e, "could not start a spare python worker");
                    return;
                }
            }
        }
    }

    /// A live spare, if any; the pool refills itself afterwards.
    fn take(self: &Arc<Self>) -> Option<Process> {
        let found = {
            let mut spares = self.lock();
            let mut found = None;
            // Oldest first: it has had the longest to finish booting.
            while !spares.is_empty() {
                let mut p = spares.remove(0);
                if matches!(p.child.try_wait(), Ok(None)) {
                    found = Some(p);
                    break;
                }
                p.kill();
            }
            found
        };
        let pool = self.clone();
        tokio::spawn(async move { pool.fill() });
        found
    }
}

impl Drop for SparePool {
    fn drop(&mut self) {
        for p in self.lock().iter() {
            p.kill();
        }
    }
}

impl Process {
    fn kill(&self) {
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
        let label = logs::Label::new(&spec.run_uid);
        let spare = spec.spares.as_ref().and_then(|pool| pool.take());
        let mut process = match spare {
            Some(mut p) => {
                p.label.set(&spec.run_uid);
                let load = serde_json::json!({
                    "module": spec.handler.module,
                    "function": spec.handler.function,
                    "cwd": spec.workdir,
                    "env": spec.environment().into_iter().collect::<std::collections::BTreeMap<_, _>>(),
                });
                let body = serde_json::to_vec(&load).map_err(std::io::Error::other)?;
                let len = u32::try_from(body.len() + TAG).map_err(std::io::Error::other)?;
                let mut frame = Vec::with_capacity(body.len() + 5);
                frame.extend_from_slice(&len.to_be_bytes());
                frame.push(b'l');
                frame.extend_from_slice(&body);
                p.stdin.write_all(&frame).await?;
                p.stdin.flush().await?;
                p
            }
            None => spawn_process(
                &spec.python,
                &spec.workdir,
                spec.environment(),
                Some((&spec.handler.module, &spec.handler.function)),
                label,
            )?,
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
