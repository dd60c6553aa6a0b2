//! One session's FIFO queue: admission (bounded), per-operation
//! cancellation, status and file reads outside the queue, and close (drain
//! or cancel, then the Runtime Server removes the workspace). The queue's
//! consumer is [`super::worker`].

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kruntimes_proto::api::ErrorCode;
use kruntimes_proto::runtime::v1 as rt;
use tokio::sync::{mpsc, oneshot, watch};

pub use super::limits::SessionLimits;
use super::ops::Operation;
use super::outcome::OperationResult;
use super::worker::{Job, OpCancels, Worker};
use super::{exec, files};
use crate::api_error::ApiError;
use crate::registration::Release;
use crate::runtime::Link;

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

impl From<SubmitError> for ApiError {
    fn from(e: SubmitError) -> Self {
        let code = match e {
            SubmitError::QueueFull => ErrorCode::Busy,
            SubmitError::Closed => ErrorCode::NotReady,
        };
        Self::new(code, e.to_string())
    }
}

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
    link: Arc<Link>,
    limits: SessionLimits,
    tx: Mutex<Option<mpsc::Sender<Job>>>,
    cancel: watch::Sender<bool>,
    closing: AtomicBool,
    pending: Arc<AtomicUsize>,
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

impl Session {
    /// Starts the queue worker of a session the Runtime Server behind
    /// `link` has opened.
    pub fn open(run_uid: &str, link: Arc<Link>, limits: SessionLimits) -> Arc<Self> {
        // Room for the running operation plus `queue_size` waiting ones; the
        // `pending` count enforces the bound.
        let (tx, rx) = mpsc::channel::<Job>(limits.queue_size.clamp(1, 1024) + 1);
        let (cancel, cancel_rx) = watch::channel(false);
        let pending = Arc::new(AtomicUsize::new(0));
        let last_activity = Arc::new(Mutex::new(Instant::now()));
        let op_cancels: OpCancels = Arc::default();
        let session = Arc::new(Self {
            link: link.clone(),
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
        let worker = tokio::spawn(
            Worker {
                link,
                limits,
                pending,
                last_activity,
                run_uid: run_uid.to_owned(),
                op_cancels,
            }
            .run(rx, cancel_rx),
        );
        *session.worker.lock().unwrap_or_else(|p| p.into_inner()) = Some(worker);
        session
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

    /// Marks the session active now: a call that bypasses the queue but is
    /// someone at work (typing into a terminal, following a process) keeps
    /// the idle timeout away as an operation does.
    pub fn touch(&self) {
        *self.last_activity.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
    }

    /// A client of the Runtime Server that holds the session, for the calls
    /// that bypass the queue.
    pub fn runtime(&self) -> crate::runtime::Client {
        self.link.client()
    }

    /// Reads a file, outside the queue.
    pub async fn read_file(&self, path: &str) -> Result<Vec<u8>, ApiError> {
        files::read(self.link.client(), &self.run_uid, path).await
    }

    /// Lists a directory, outside the queue.
    pub async fn list(
        &self,
        path: &str,
        limit: Option<usize>,
        page_token: Option<&str>,
    ) -> Result<files::Listing, ApiError> {
        files::list(self.link.client(), &self.run_uid, path, limit, page_token).await
    }

    /// Closes: rejects new work, drains or cancels accepted work, then the
    /// Runtime Server kills what is left and removes the workspace.
    pub async fn close(&self, mode: Release) {
        self.finish(mode).await;
        self.close_on_server(mode).await;
    }

    /// Rejects new work and drains or cancels accepted work; the workspace
    /// stays (its artifacts may be read) until [`Self::close_on_server`].
    pub async fn finish(&self, mode: Release) {
        self.closing.store(true, Ordering::Release);
        if mode == Release::Cancel {
            let _ = self.cancel.send(true);
        }
        // Dropping the sender lets the worker finish what is queued.
        self.tx.lock().unwrap_or_else(|p| p.into_inner()).take();
        let worker = self.worker.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(w) = worker {
            let _ = w.await;
        }
    }

    /// Has the Runtime Server kill what is left and remove the workspace.
    pub async fn close_on_server(&self, mode: Release) {
        let req = rt::CloseSessionRequest {
            run_uid: self.run_uid.clone(),
        };
        if let Err(e) = self.link.client().sessions.close_session(req).await {
            tracing::warn!(run_uid = %self.run_uid, error = %e.message(), "runtime server did not close the session");
        }
        tracing::info!(run_uid = %self.run_uid, ?mode, "session closed");
    }
}

#[cfg(test)]
mod tests;
