//! The consumer of a session's queue: runs each admitted operation in turn
//! on the Runtime Server (commands through [`super::exec`], file mutations
//! through [`super::files`]), honouring the session's and the operation's
//! cancellation, and logs one audit line per operation (never its content).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot, watch};

use super::limits::SessionLimits;
use super::ops::Operation;
use super::outcome::{OpState, OperationResult};
use super::{exec, files};
use crate::runtime::Link;

/// One admitted operation.
pub(super) struct Job {
    pub(super) id: String,
    pub(super) op: Operation,
    pub(super) events: Option<mpsc::Sender<exec::Chunk>>,
    pub(super) done: oneshot::Sender<OperationResult>,
    pub(super) cancel: watch::Receiver<bool>,
}

/// Cancellation handles of the operations not yet finished.
pub(super) type OpCancels = Arc<Mutex<BTreeMap<String, watch::Sender<bool>>>>;

/// What the worker shares with its [`super::Session`].
pub(super) struct Worker {
    pub(super) link: Arc<Link>,
    pub(super) limits: SessionLimits,
    pub(super) pending: Arc<AtomicUsize>,
    pub(super) last_activity: Arc<Mutex<Instant>>,
    pub(super) run_uid: String,
    pub(super) op_cancels: OpCancels,
}

impl Worker {
    /// Serves the queue until its sender is dropped (the session closed).
    pub(super) async fn run(self, mut rx: mpsc::Receiver<Job>, cancel: watch::Receiver<bool>) {
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
                let r = self.execute(&job, merged).await;
                watcher.abort();
                r
            };
            self.op_cancels
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&job.id);
            tracing::info!(
                run_uid = %self.run_uid,
                operation_id = %job.id,
                kind,
                state = ?result.state,
                exit_code = result.exit_code,
                duration_ms = started.elapsed().as_millis() as u64,
                "session operation"
            );
            *self.last_activity.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
            self.pending.fetch_sub(1, Ordering::AcqRel);
            let _ = job.done.send(result);
        }
    }

    async fn execute(&self, job: &Job, cancel: watch::Receiver<bool>) -> OperationResult {
        let started = Instant::now();
        let mut client = self.link.client();
        let file_op = match &job.op {
            Operation::Command {
                argv,
                stdin,
                cwd,
                env,
                timeout_seconds,
            } => {
                let timeout = timeout_seconds
                    .map(Duration::from_secs)
                    .unwrap_or(self.limits.operation_timeout)
                    .min(self.limits.max_operation_timeout);
                let cmd = exec::CommandRun {
                    run_uid: &self.run_uid,
                    operation_id: &job.id,
                    argv,
                    stdin,
                    cwd,
                    env,
                    timeout,
                };
                return exec::run(client, cmd, job.events.clone(), cancel).await;
            }
            Operation::StartProcess {
                argv,
                cwd,
                env,
                stdin,
                pty,
                display,
            } => {
                let req = kruntimes_proto::runtime::v1::StartProcessRequest {
                    run_uid: self.run_uid.clone(),
                    argv: argv.clone(),
                    cwd: cwd.clone(),
                    env: env.clone().into_iter().collect(),
                    stdin: *stdin,
                    pty: pty.map(|p| kruntimes_proto::runtime::v1::PtySize {
                        rows: p.rows,
                        cols: p.cols,
                    }),
                    display: display.clone(),
                };
                let elapsed = || started.elapsed().as_millis() as u64;
                return match client.sessions.start_process(req).await {
                    Ok(r) => OperationResult {
                        pid: Some(r.into_inner().pid),
                        ..OperationResult::bare(&job.id, OpState::Succeeded, elapsed(), None)
                    },
                    Err(status) => {
                        let refusal = super::process::api_error(status.into());
                        OperationResult {
                            refusal: Some(refusal.clone()),
                            ..OperationResult::bare(
                                &job.id,
                                OpState::Failed,
                                elapsed(),
                                Some(refusal.message.into_owned()),
                            )
                        }
                    }
                };
            }
            Operation::File(op) => op,
        };
        let result = files::mutate(client, file_op.request(&self.run_uid)).await;
        let (state, error) = match result {
            Ok(()) => (OpState::Succeeded, None),
            Err(e) => (OpState::Failed, Some(e)),
        };
        OperationResult::bare(&job.id, state, started.elapsed().as_millis() as u64, error)
    }
}
