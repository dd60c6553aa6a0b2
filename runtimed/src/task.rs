//! Task mode: the task Runs this runtimed hosts. Starting one asks the
//! Runtime Server to start its process (`TaskRuntime/StartTask`, keyed by
//! Run UID and attempt, so a repeated assignment never starts it twice);
//! a watch of its result then publishes how it ended in this Pod's
//! ownership table (`OwnershipEntry.task`), which the owner side of the
//! lifecycle turns into the Run's status. With an artifact store, a task
//! gets an artifacts directory and its result is published once what it
//! left there is exported ([`crate::artifacts`]): refs, or why the Run
//! fails. An ended task is kept — its result and its log — until the Run is
//! deleted; ending the Run first ([`Tasks::kill`]) kills its process tree
//! (or stops its export) and keeps the same.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use kruntimes_proto::agent::v1::TaskAssignment;
use kruntimes_proto::ownership::v1 as own;
use kruntimes_proto::runtime::Backend;
use kruntimes_proto::runtime::v1 as rt;
use tokio_stream::StreamExt as _;

use crate::artifacts::Artifacts;
use crate::local::{LocalPod, Published};
use crate::registration::{Assignment, Plan, Record, RegisterError, Registration, Table};
use crate::runtime::{self, Change, Link};

/// Pause before a broken watch of a task's result is opened again.
const REWATCH: Duration = Duration::from_millis(500);

/// What a hosted task adds to its registration.
#[derive(Debug)]
pub struct Hosted {
    started_unix_ms: i64,
    outcome: Mutex<Option<own::TaskOutcome>>,
    /// The process's result while its artifacts are being exported.
    exporting: Mutex<Option<own::TaskOutcome>>,
    /// How the export of its artifacts ended.
    export: Mutex<Option<own::ExportOutcome>>,
    /// The Runtime Server lost it (restarted) before it ended.
    lost: std::sync::atomic::AtomicBool,
    watcher: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

/// A task in the registration table.
pub type HostedTask = Registration<Hosted>;

/// Every task of this runtimed.
pub struct Tasks {
    pod: Arc<LocalPod>,
    link: Arc<Link>,
    backend: Option<Backend>,
    artifacts: Option<Arc<Artifacts>>,
    table: Table<Hosted>,
}

impl Tasks {
    /// No tasks yet; they publish into `pod`'s table and run on the server
    /// behind `link`, with this Pod's built-in `backend` (`None`: by the
    /// Run's runtime name); with `artifacts`, each gets an artifacts
    /// directory, exported there when it ends.
    pub fn new(
        pod: Arc<LocalPod>,
        link: Arc<Link>,
        backend: Option<Backend>,
        artifacts: Option<Arc<Artifacts>>,
    ) -> Arc<Self> {
        Arc::new(Self {
            pod,
            link,
            backend,
            artifacts,
            table: Table::default(),
        })
    }

    /// The Runtime's artifact store, when it has one.
    pub fn artifacts(&self) -> Option<&Arc<Artifacts>> {
        self.artifacts.as_ref()
    }

    /// A hosted task.
    pub fn get(&self, uid: &str) -> Option<Arc<HostedTask>> {
        self.table.get(uid)
    }

    /// How the task of `uid` at `attempt` ended, once it has.
    pub fn outcome(&self, uid: &str, attempt: u64) -> Option<own::TaskOutcome> {
        let h = self
            .table
            .get(uid)
            .filter(|h| h.record.attempt == attempt)?;
        h.outcome.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// How the export of the artifacts of `uid`'s task at `attempt` ended,
    /// once it has.
    pub fn export(&self, uid: &str, attempt: u64) -> Option<own::ExportOutcome> {
        let h = self
            .table
            .get(uid)
            .filter(|h| h.record.attempt == attempt)?;
        h.export.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn publish(&self, h: &HostedTask) {
        let outcome = h.outcome.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let export = h.export.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let lost = h.lost.load(std::sync::atomic::Ordering::Acquire);
        let (phase, reason) = match (&outcome, lost) {
            (None, true) => (own::Phase::Failed, runtime::LOST_REASON),
            _ => (own::Phase::Running, ""),
        };
        self.pod.publish_outcome(
            &h.run,
            h.record.attempt,
            Published {
                mode: own::Mode::Task,
                phase,
                reason,
                limits: None,
            },
            Some(outcome.unwrap_or(own::TaskOutcome {
                started_unix_ms: h.started_unix_ms,
                ..Default::default()
            })),
            export,
        );
    }

    /// Starts a task (see [`crate::registration::rules`]: a retry at the
    /// same attempt and digest answers with the started task); returns the
    /// registration id. A task that cannot start is [`RegisterError::Load`].
    pub async fn start(
        self: &Arc<Self>,
        a: Assignment,
        t: TaskAssignment,
    ) -> Result<String, RegisterError> {
        let _change = self.table.change().await;
        match self.table.plan(&a.run.uid, a.attempt, &a.digest)? {
            Plan::Idempotent(h) => return Ok(h.record.registration_id.clone()),
            Plan::Supersede(old) => {
                // The server replaces the older attempt's process itself.
                stop_watching(&old);
                self.table.remove(&old);
            }
            Plan::Create => {}
        }
        let inputs = !a.inputs.is_empty();
        if inputs {
            let Some(artifacts) = &self.artifacts else {
                return Err(RegisterError::Load(
                    "the Run has spec.inputs, but its Runtime has no artifact store".into(),
                ));
            };
            artifacts
                .stage(&self.link, &a.run, a.attempt, &a.inputs)
                .await
                .map_err(RegisterError::Load)?;
        }
        let kind = self
            .backend
            .or_else(|| Backend::for_runtime(&a.run.runtime));
        let req = rt::StartTaskRequest {
            run: Some(a.run.clone()),
            attempt: a.attempt,
            source: a.source.clone(),
            env: a.env.clone(),
            backend: kind.map(Backend::as_str).unwrap_or_default().into(),
            entrypoint: t.entrypoint,
            args: t.args,
            tail_bytes: 0,
            artifacts: self.artifacts.is_some(),
            inputs,
        };
        let mut client = self
            .link
            .ready()
            .await
            .map_err(RegisterError::Unavailable)?;
        let started = client
            .tasks
            .start_task(req)
            .await
            .map_err(|s| runtime::refused(s.into()))?
            .into_inner();
        let hosted = Arc::new(Registration {
            run: a.run,
            record: Record::issue(a.attempt, a.digest),
            mode: Hosted {
                started_unix_ms: started.started_unix_ms,
                outcome: Mutex::new(None),
                exporting: Mutex::new(None),
                export: Mutex::new(None),
                lost: std::sync::atomic::AtomicBool::new(false),
                watcher: Mutex::new(None),
            },
        });
        self.publish(&hosted);
        self.table.insert(hosted.clone());
        let watcher = tokio::spawn(self.clone().follow(hosted.clone()));
        *hosted.watcher.lock().unwrap_or_else(|p| p.into_inner()) = Some(watcher);
        tracing::info!(
            run_uid = %hosted.run.uid,
            attempt = hosted.record.attempt,
            registration_id = %hosted.record.registration_id,
            "task started"
        );
        Ok(hosted.record.registration_id.clone())
    }

    /// Waits for `h`'s result and publishes it; a broken watch is opened
    /// again, a task the server no longer holds is lost.
    async fn follow(self: Arc<Self>, h: Arc<HostedTask>) {
        let req = rt::WatchTaskRequest {
            run_uid: h.run.uid.clone(),
            attempt: h.record.attempt,
            output: false,
        };
        loop {
            let mut client = self.link.client();
            match client.tasks.watch_task(req.clone()).await {
                Ok(stream) => {
                    let mut events = stream.into_inner();
                    while let Some(Ok(ev)) = events.next().await {
                        if let Some(rt::task_event::Event::Result(r)) = ev.event {
                            self.ended(&h, r).await;
                            return;
                        }
                    }
                }
                Err(s) if s.code() == tonic::Code::NotFound => {
                    tracing::warn!(run_uid = %h.run.uid, "the runtime server lost the task");
                    h.lost.store(true, std::sync::atomic::Ordering::Release);
                    self.republish(&h);
                    return;
                }
                Err(_) => {}
            }
            tokio::time::sleep(REWATCH).await;
        }
    }

    /// Publishes how `h` ended, once its artifacts (if the Runtime keeps
    /// them, and it was not cancelled) are exported.
    async fn ended(&self, h: &Arc<HostedTask>, r: rt::TaskResult) {
        let cancelled = r.end == rt::TaskEnd::Cancelled as i32;
        tracing::info!(run_uid = %h.run.uid, attempt = h.record.attempt, exit_code = r.exit_code, cancelled, "task ended");
        let outcome = own::TaskOutcome {
            ended: true,
            cancelled,
            exit_code: r.exit_code,
            stdout_tail: r.stdout_tail,
            stderr_tail: r.stderr_tail,
            stdout_truncated: r.stdout_truncated,
            stderr_truncated: r.stderr_truncated,
            started_unix_ms: r.started_unix_ms,
            finished_unix_ms: r.finished_unix_ms,
        };
        if let Some(artifacts) = self.artifacts.as_ref().filter(|_| !cancelled) {
            *h.exporting.lock().unwrap_or_else(|p| p.into_inner()) = Some(outcome.clone());
            let export = artifacts
                .export(&self.link, &h.run.namespace, &h.run.uid)
                .await
                .to_wire();
            *h.export.lock().unwrap_or_else(|p| p.into_inner()) = Some(export);
            h.exporting.lock().unwrap_or_else(|p| p.into_inner()).take();
        }
        *h.outcome.lock().unwrap_or_else(|p| p.into_inner()) = Some(outcome);
        self.republish(h);
    }

    /// Publishes `h` again if it is still the Run's registration.
    fn republish(&self, h: &Arc<HostedTask>) {
        if self
            .table
            .get(&h.run.uid)
            .is_some_and(|cur| Arc::ptr_eq(&cur, h))
        {
            self.publish(h);
        }
    }

    /// Kills a running task's process tree, keeping the task (its result
    /// and log); `false` when none is held.
    pub async fn kill(&self, uid: &str) -> bool {
        let Some(h) = self.table.get(uid) else {
            return false;
        };
        // Ended, its artifacts still being exported: the export stops, and
        // the result is kept without them.
        let exporting = h.exporting.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(outcome) = exporting {
            stop_watching(&h);
            tracing::info!(run_uid = %uid, "artifact export stopped: the run ended first");
            *h.outcome.lock().unwrap_or_else(|p| p.into_inner()) = Some(outcome);
            self.republish(&h);
            return true;
        }
        let req = rt::CancelTaskRequest {
            run_uid: uid.to_owned(),
            attempt: h.record.attempt,
        };
        if let Err(e) = self.link.client().tasks.cancel_task(req).await {
            tracing::warn!(run_uid = %uid, error = %e.message(), "could not cancel the task");
        }
        true
    }

    /// Forgets a task: its process killed, its directory and log removed;
    /// `false` when none is held.
    pub async fn close(&self, uid: &str) -> bool {
        let _change = self.table.change().await;
        let Some(h) = self.table.get(uid) else {
            return false;
        };
        stop_watching(&h);
        let req = rt::CloseTaskRequest {
            run_uid: uid.to_owned(),
        };
        if let Err(e) = self.link.client().tasks.close_task(req).await {
            tracing::warn!(run_uid = %uid, error = %e.message(), "could not close the task");
        }
        self.table.remove(&h);
        self.pod.withdraw(uid);
        tracing::info!(run_uid = %uid, "task closed");
        true
    }

    /// Follows the Runtime Server: after a restart every task that had not
    /// ended is lost (its process went with the server).
    pub async fn server_changed(&self, change: Change) {
        if change != Change::Restarted {
            return;
        }
        let _change = self.table.change().await;
        for h in self.table.all() {
            let ended = h
                .outcome
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .is_some();
            if !ended {
                stop_watching(&h);
                h.lost.store(true, std::sync::atomic::Ordering::Release);
                self.publish(&h);
            }
        }
    }

    /// Stops following every task (shutdown; the server kills their trees).
    pub fn shutdown(&self) {
        for h in self.table.all() {
            stop_watching(&h);
        }
    }
}

fn stop_watching(h: &HostedTask) {
    if let Some(w) = h.watcher.lock().unwrap_or_else(|p| p.into_inner()).take() {
        w.abort();
    }
}
