//! Session mode: an agent sandbox on a warm Pod. Each session owns a
//! workspace named by its Run UID and one FIFO queue through which commands
//! and file mutations run one at a time; reads, listings and status bypass
//! the queue. Closing rejects new work, cancels what is queued, terminates
//! what runs and removes the workspace.

pub mod exec;
pub mod files;
pub mod ops;
pub mod path;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot, watch};

use ops::{OpState, Operation, OperationResult};

/// Per-session bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionLimits {
    /// Operations waiting in the FIFO queue (429 beyond).
    pub queue_size: usize,
    /// Command timeout when the request sets none.
    pub operation_timeout: Duration,
    /// Largest command timeout a request may ask for.
    pub max_operation_timeout: Duration,
}

impl Default for SessionLimits {
    fn default() -> Self {
        Self {
            queue_size: 16,
            operation_timeout: Duration::from_secs(300),
            max_operation_timeout: Duration::from_secs(3600),
        }
    }
}

/// Why work was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SubmitError {
    /// The session is closing or closed.
    #[error("session is closing")]
    Closed,
    /// The FIFO queue is full.
    #[error("session queue is full")]
    QueueFull,
}

struct Job {
    id: String,
    op: Operation,
    events: Option<mpsc::Sender<exec::Chunk>>,
    done: oneshot::Sender<OperationResult>,
    cancel: watch::Receiver<bool>,
}

/// Cancellation handles of the operations not yet finished.
type OpCancels = Arc<Mutex<BTreeMap<String, watch::Sender<bool>>>>;

/// What a session reports about itself.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionStatus {
    /// Operations waiting or running.
    pub pending_operations: usize,
    /// Milliseconds since the last operation finished (or the session opened).
    pub idle_ms: u64,
    /// Whether it is closing.
    pub closing: bool,
}

/// One session.
pub struct Session {
    root: PathBuf,
    env: BTreeMap<String, String>,
    limits: SessionLimits,
    tx: Mutex<Option<mpsc::Sender<Job>>>,
    cancel: watch::Sender<bool>,
    closing: AtomicBool,
    pending: Arc<std::sync::atomic::AtomicUsize>,
    last_activity: Arc<Mutex<Instant>>,
    seq: AtomicU64,
    worker: Mutex<Option<tokio::task::JoinHandle<()>>>,
    run_uid: String,
    op_cancels: OpCancels,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("run_uid", &self.run_uid)
            .finish_non_exhaustive()
    }
}

/// How a session ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseMode {
    /// Finish the accepted operations first.
    Drain,
    /// Cancel queued work and terminate the running command.
    Cancel,
}

impl Session {
    /// Creates the workspace and starts the queue worker. `env` is the full
    /// environment of commands (clean, plus the Run's `spec.env`).
    pub fn open(
        run_uid: &str,
        workspace: &Path,
        env: BTreeMap<String, String>,
        limits: SessionLimits,
    ) -> std::io::Result<Arc<Self>> {
        std::fs::create_dir_all(workspace)?;
        let root = workspace.canonicalize()?;
        // Room for the running operation plus `queue_size` waiting ones; the
        // `pending` count enforces the bound.
        let (tx, rx) = mpsc::channel::<Job>(limits.queue_size.clamp(1, 1024) + 1);
        let (cancel, cancel_rx) = watch::channel(false);
        let pending = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let last_activity = Arc::new(Mutex::new(Instant::now()));
        let op_cancels: OpCancels = Arc::default();
        let mut env = env;
        env.entry("HOME".into())
            .or_insert_with(|| root.display().to_string());
        let session = Arc::new(Self {
            root: root.clone(),
            env: env.clone(),
            limits,
            tx: Mutex::new(Some(tx)),
            cancel,
            closing: AtomicBool::new(false),
            pending: pending.clone(),
            last_activity: last_activity.clone(),
            seq: AtomicU64::new(0),
            worker: Mutex::new(None),
            run_uid: run_uid.to_owned(),
            op_cancels: op_cancels.clone(),
        });
        let worker = tokio::spawn(work(
            rx,
            cancel_rx,
            root,
            env,
            limits,
            pending,
            last_activity,
            run_uid.to_owned(),
            op_cancels,
        ));
        *session.worker.lock().unwrap_or_else(|p| p.into_inner()) = Some(worker);
        Ok(session)
    }

    /// The canonical workspace root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Admits an operation to the FIFO queue; returns its id and a receiver
    /// of its result. `events` receives output chunks as they happen.
    pub fn submit(
        &self,
        op: Operation,
        events: Option<mpsc::Sender<exec::Chunk>>,
    ) -> Result<(String, oneshot::Receiver<OperationResult>), SubmitError> {
        if self.closing.load(Ordering::Acquire) {
            return Err(SubmitError::Closed);
        }
        let tx = self
            .tx
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .ok_or(SubmitError::Closed)?;
        // One running + queue_size waiting.
        if self.pending.load(Ordering::Acquire) > self.limits.queue_size {
            return Err(SubmitError::QueueFull);
        }
        let id = format!("op-{}", self.seq.fetch_add(1, Ordering::Relaxed) + 1);
        let (done, rx) = oneshot::channel();
        let (cancel_tx, cancel) = watch::channel(false);
        self.pending.fetch_add(1, Ordering::AcqRel);
        self.op_cancels
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id.clone(), cancel_tx);
        match tx.try_send(Job {
            id: id.clone(),
            op,
            events,
            done,
            cancel,
        }) {
            Ok(()) => Ok((id, rx)),
            Err(e) => {
                self.pending.fetch_sub(1, Ordering::AcqRel);
                self.op_cancels
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&id);
                Err(match e {
                    mpsc::error::TrySendError::Full(_) => SubmitError::QueueFull,
                    mpsc::error::TrySendError::Closed(_) => SubmitError::Closed,
                })
            }
        }
    }

    /// Cancels one queued or running operation; `false` when it is unknown
    /// or already finished.
    pub fn cancel_operation(&self, id: &str) -> bool {
        match self
            .op_cancels
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(id)
        {
            Some(tx) => tx.send(true).is_ok(),
            None => false,
        }
    }

    /// Status, outside the queue.
    pub fn status(&self) -> SessionStatus {
        SessionStatus {
            pending_operations: self.pending.load(Ordering::Acquire),
            idle_ms: self
                .last_activity
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .elapsed()
                .as_millis() as u64,
            closing: self.closing.load(Ordering::Acquire),
        }
    }

    /// Idle time when nothing is pending.
    pub fn idle_for(&self) -> Option<Duration> {
        (self.pending.load(Ordering::Acquire) == 0).then(|| {
            self.last_activity
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .elapsed()
        })
    }

    /// Reads a file, outside the queue.
    pub fn read_file(&self, path: &str) -> Result<Vec<u8>, files::FileError> {
        files::read(&self.root, path)
    }

    /// Lists a directory, outside the queue.
    pub fn list(
        &self,
        path: &str,
        limit: Option<usize>,
        page_token: Option<&str>,
    ) -> Result<files::Listing, files::FileError> {
        files::list(&self.root, path, limit, page_token)
    }

    /// Closes: rejects new work, drains or cancels accepted work, removes the
    /// workspace.
    pub async fn close(&self, mode: CloseMode) {
        self.closing.store(true, Ordering::Release);
        if mode == CloseMode::Cancel {
            let _ = self.cancel.send(true);
        }
        // Dropping the sender lets the worker finish what is queued.
        self.tx.lock().unwrap_or_else(|p| p.into_inner()).take();
        let worker = self.worker.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(w) = worker {
            let _ = w.await;
        }
        let _ = std::fs::remove_dir_all(&self.root);
        tracing::info!(run_uid = %self.run_uid, ?mode, "session closed");
    }

    /// The environment commands run with (tests).
    pub fn env(&self) -> &BTreeMap<String, String> {
        &self.env
    }
}

#[allow(clippy::too_many_arguments)]
async fn work(
    mut rx: mpsc::Receiver<Job>,
    cancel: watch::Receiver<bool>,
    root: PathBuf,
    env: BTreeMap<String, String>,
    limits: SessionLimits,
    pending: Arc<std::sync::atomic::AtomicUsize>,
    last_activity: Arc<Mutex<Instant>>,
    run_uid: String,
    op_cancels: OpCancels,
) {
    while let Some(job) = rx.recv().await {
        let started = Instant::now();
        let kind = job.op.kind();
        let result = if *cancel.borrow() {
            OperationResult::bare(
                &job.id,
                OpState::Cancelled,
                0,
                Some("session closed".into()),
            )
        } else if *job.cancel.borrow() {
            OperationResult::bare(
                &job.id,
                OpState::Cancelled,
                0,
                Some("operation cancelled".into()),
            )
        } else {
            // Either the session closing or this operation's cancel stops it.
            let (merged_tx, merged) = watch::channel(false);
            let mut session_cancel = cancel.clone();
            let mut op_cancel = job.cancel.clone();
            let watcher = tokio::spawn(async move {
                tokio::select! {
                    _ = session_cancel.wait_for(|c| *c) => {}
                    _ = op_cancel.wait_for(|c| *c) => {}
                }
                let _ = merged_tx.send(true);
            });
            let r = execute(&job, &root, &env, &limits, merged).await;
            watcher.abort();
            r
        };
        op_cancels
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&job.id);
        tracing::info!(
            run_uid = %run_uid,
            operation_id = %job.id,
            kind,
            state = ?result.state,
            exit_code = result.exit_code,
            duration_ms = started.elapsed().as_millis() as u64,
            "session operation"
        );
        *last_activity.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
        pending.fetch_sub(1, Ordering::AcqRel);
        let _ = job.done.send(result);
    }
}

async fn execute(
    job: &Job,
    root: &Path,
    env: &BTreeMap<String, String>,
    limits: &SessionLimits,
    cancel: watch::Receiver<bool>,
) -> OperationResult {
    let started = Instant::now();
    let file_result = |r: Result<(), files::FileError>| match r {
        Ok(()) => OperationResult::bare(
            &job.id,
            OpState::Succeeded,
            started.elapsed().as_millis() as u64,
            None,
        ),
        Err(e) => OperationResult::bare(
            &job.id,
            OpState::Failed,
            started.elapsed().as_millis() as u64,
            Some(e.to_string()),
        ),
    };
    match &job.op {
        Operation::Command {
            argv,
            stdin,
            cwd,
            env: overrides,
            timeout_seconds,
        } => {
            let dir = match path::resolve(root, cwd, true) {
                Ok(r) if r.path.is_dir() => r.path,
                Ok(_) => {
                    return file_result(Err(files::FileError::Io(format!(
                        "cwd {cwd} is not a directory"
                    ))));
                }
                Err(e) => return file_result(Err(e.into())),
            };
            let mut full = env.clone();
            full.extend(overrides.iter().map(|(k, v)| (k.clone(), v.clone())));
            let timeout = timeout_seconds
                .map(Duration::from_secs)
                .unwrap_or(limits.operation_timeout)
                .min(limits.max_operation_timeout);
            exec::run(
                exec::CommandRun {
                    operation_id: &job.id,
                    argv,
                    stdin,
                    cwd: &dir,
                    env: &full,
                    timeout,
                },
                job.events.clone(),
                cancel,
            )
            .await
        }
        Operation::WriteFile { path, content } => file_result(files::write(root, path, content)),
        Operation::Mkdir { path } => file_result(files::mkdir(root, path)),
        Operation::Delete { path } => file_result(files::delete(root, path)),
        Operation::Rename { from, to } => file_result(files::rename(root, from, to)),
    }
}

#[cfg(test)]
mod tests;
