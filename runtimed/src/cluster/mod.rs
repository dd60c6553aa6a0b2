//! runtimed in Kubernetes mode: watches Runs, registers the ones assigned to
//! this Pod (by Pod UID), reports their phase with server-side apply (field
//! manager `runtimed`), and honours termination, deletion and fencing. The
//! decisions are the lifecycle core's [`owner::decide`] (the same rules the
//! embedded control plane applies for its runtimed instances); this module
//! only gathers facts and carries the steps out.
//!
//! Every status write is an apply carrying the `resourceVersion` the
//! decision was made on: if the operator moved the Run meanwhile (a new
//! owner, a higher attempt), the write fails with a conflict and nothing
//! stale lands. After a restart, Runs still assigned to this Pod are
//! registered again at the same attempt (idempotent for the control plane).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kruntimes_api::lifecycle::owner::{self, Facts, Local, Step};

/// Whether a Run's next steps are carried out after one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flow {
    /// Go on.
    Next,
    /// Stop: the Run is decided on again with what the step left.
    Again,
}
use kruntimes_api::lifecycle::{Phase, Stop, Transition};
use kruntimes_api::requests::assign_request;
use kruntimes_api::{API_VERSION, FINALIZER, ModeKind, RUN_KIND, Run, table};
use kruntimes_support::kube::{set_finalizer, spawn_reflector};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use serde_json::json;

use crate::host::Host;
use crate::registration::{RegisterError, Release};

pub mod sweep;

/// Why the Kubernetes loop stopped, or a step of it failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A watch's cache went away before its first list.
    #[error("watch: {0}")]
    Watch(#[from] kube::runtime::reflector::store::WriterDropped),
    /// An API call failed.
    #[error(transparent)]
    Kube(#[from] kube::Error),
    /// The loop ended before its first lists were in.
    #[error("the loop ended before its first lists")]
    Ended,
    /// The loop's task panicked.
    #[error("panicked: {0}")]
    Panicked(String),
    /// A deleted Run's artifacts could not be deleted (tried again).
    #[error("artifact cleanup: {0}")]
    ArtifactCleanup(String),
}

/// Bound on deleting one Run's artifacts.
const CLEANUP_TIMEOUT: Duration = Duration::from_secs(10);
/// Passes a deleted Run's finalizer waits for its artifacts to go before it
/// is removed anyway (the store never blocks a deletion for long).
const MAX_CLEANUP_TRIES: u32 = 5;

/// Field manager of runtimed's status writes.
pub const FIELD_MANAGER: &str = "runtimed";

/// Which Pod this runtimed plays.
#[derive(Debug, Clone)]
pub struct PodIdentity {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// UID.
    pub uid: String,
}

struct Agent {
    client: kube::Client,
    host: Host,
    pod: PodIdentity,
    runs: Store<Run>,
    pods: Store<Pod>,
    /// Runs with steps in progress: each Run's steps run in a task of their
    /// own, so a long drain or a slow import never stalls the other Runs.
    busy: std::sync::Mutex<std::collections::HashSet<String>>,
    notify: Arc<tokio::sync::Notify>,
    /// Failed tries at deleting a deleted Run's artifacts, by UID.
    cleanup_tries: std::sync::Mutex<std::collections::HashMap<String, u32>>,
}

/// Runs the Kubernetes loop until `shutdown` resolves; `synced` fires once
/// the first lists of Runs and of this Pod are complete.
pub async fn run(
    client: kube::Client,
    host: Host,
    pod: PodIdentity,
    synced: tokio::sync::oneshot::Sender<()>,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), Error> {
    let notify = Arc::new(tokio::sync::Notify::new());
    // Only the Runs assigned to this Pod: memory and watch traffic stay flat
    // as the cluster grows. A Run whose assignment moves away leaves the
    // watch, and its local registration is released as an orphan.
    let runs = spawn_reflector(
        Api::<Run>::all(client.clone()),
        watcher::Config::default().fields(&assigned_to(&pod.uid)),
        notify.clone(),
    );
    let pods = spawn_reflector(
        Api::<Pod>::namespaced(client.clone(), &pod.namespace),
        watcher::Config::default().fields(&format!("metadata.name={}", pod.name)),
        notify.clone(),
    );
    tokio::pin!(shutdown);
    tokio::select! {
        r = async { runs.wait_until_ready().await?; pods.wait_until_ready().await } => r?,
        _ = &mut shutdown => return Ok(()),
    }
    tracing::info!(pod = %pod.name, pod_uid = %pod.uid, "watching runs assigned to this pod");
    let _ = synced.send(());
    let agent = Arc::new(Agent {
        client,
        host,
        pod,
        runs,
        pods,
        busy: std::sync::Mutex::new(std::collections::HashSet::new()),
        notify: notify.clone(),
        cleanup_tries: Default::default(),
    });
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            _ = notify.notified() => {}
            _ = tick.tick() => {}
            _ = &mut shutdown => break,
        }
        agent.pass();
    }
    Ok(())
}

/// The field selector of the Runs assigned to the Pod with UID `pod_uid`
/// (`status.assignedPodUID` is a selectable field of the Run CRD).
pub fn assigned_to(pod_uid: &str) -> String {
    format!("status.assignedPodUID={pod_uid}")
}

impl Agent {
    fn pod_gone(&self) -> bool {
        !self.pods.state().iter().any(|p| {
            p.uid().as_deref() == Some(self.pod.uid.as_str())
                && p.meta().deletion_timestamp.is_none()
        })
    }

    fn locals(&self) -> BTreeMap<String, Local> {
        self.host
            .engine
            .publisher()
            .entries()
            .into_iter()
            .map(|e| (e.run_uid.clone(), table::local(&e)))
            .collect()
    }

    /// Starts a task for `uid`'s `steps` unless one is in progress; a
    /// finished task triggers the next pass.
    fn start<F, Fut>(self: &Arc<Self>, uid: String, steps: F)
    where
        F: FnOnce(Arc<Self>) -> Fut,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        if !self
            .busy
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(uid.clone())
        {
            return;
        }
        let fut = steps(self.clone());
        let this = self.clone();
        tokio::spawn(async move {
            fut.await;
            this.busy
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&uid);
            this.notify.notify_one();
        });
    }

    fn is_busy(&self, uid: &str) -> bool {
        self.busy
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(uid)
    }

    fn pass(self: &Arc<Self>) {
        let pod_gone = self.pod_gone();
        let mut locals = self.locals();
        for run in self.runs.state() {
            let uid = run.uid().unwrap_or_default();
            let local = locals.remove(&uid);
            if self.is_busy(&uid) {
                continue;
            }
            // An invalid or task-mode Run is never assigned (the operator
            // ends it); only its local state, if any, is released.
            let rules = match run.validate() {
                Ok(mode) => run.rules(mode),
                Err(_) => run.rules(ModeKind::Function),
            };
            let status = run.status.as_ref();
            let facts = Facts {
                mine: status.and_then(|s| s.assigned_pod_uid.as_deref())
                    == Some(self.pod.uid.as_str()),
                pod_gone,
                life: run.life(),
                rules,
                deleting: run.meta().deletion_timestamp.is_some(),
                has_finalizer: run.finalizers().iter().any(|f| f == FINALIZER),
            };
            let steps = owner::decide(&facts, local.as_ref());
            if steps.is_empty() {
                continue;
            }
            // Each write returns the Run's new version; later steps build on
            // it (their precondition must not be stale).
            let mut run = (*run).clone();
            self.start(uid.clone(), move |agent| async move {
                for step in steps {
                    match agent.act(&mut run, &facts, step.clone()).await {
                        Ok(Flow::Next) => {}
                        // Decided on again with what the step left.
                        Ok(Flow::Again) => break,
                        Err(e) => {
                            tracing::warn!(run_uid = %uid, ?step, error = %e, "step failed");
                            break;
                        }
                    }
                }
            });
        }
        // Local registrations of Runs that no longer exist at all.
        for uid in locals.into_keys() {
            if self.is_busy(&uid) {
                continue;
            }
            let key = uid.clone();
            self.start(key, move |agent| async move {
                agent.unregister(&uid, Stop::Cancel).await;
            });
        }
    }

    async fn act(&self, run: &mut Run, facts: &Facts, step: Step) -> Result<Flow, Error> {
        let uid = run.uid().unwrap_or_default();
        if let Step::Release(stop) = step {
            self.unregister(&uid, stop).await;
            // A drained session whose artifacts were exported: its outcome
            // (published in this Pod's table) decides how the Run ends.
            return Ok(
                if self
                    .host
                    .sessions
                    .export(&uid, facts.life.attempt)
                    .is_some()
                {
                    Flow::Again
                } else {
                    Flow::Next
                },
            );
        }
        self.act_on(run, facts, step, &uid)
            .await
            .map(|()| Flow::Next)
    }

    async fn act_on(
        &self,
        run: &mut Run,
        facts: &Facts,
        step: Step,
        uid: &str,
    ) -> Result<(), Error> {
        let uid = uid.to_owned();
        match step {
            Step::Register => {
                let attempt = facts.life.attempt;
                let registered = match run.validate().map(|_| assign_request(run, attempt)) {
                    Ok(Some(req)) => self.host.assign(req).await.map(|_| ()),
                    // `Load` carries a message as it is.
                    Ok(None) => Err(RegisterError::Load("the Run has no mode".into())),
                    Err(e) => Err(RegisterError::Load(e)),
                };
                // A Runtime Server that does not answer (yet) fails nothing:
                // the Run stays Running and the next pass registers again.
                if let Err(e @ RegisterError::Unavailable(_)) = &registered {
                    tracing::warn!(run_uid = %uid, error = %e, "registration waits for the runtime server");
                    return Ok(());
                }
                let result = registered.map_err(|e| e.to_string());
                match &result {
                    Ok(()) => tracing::info!(run_uid = %uid, attempt, "registered"),
                    Err(why) => tracing::warn!(run_uid = %uid, error = %why, "registration failed"),
                }
                // The life the Register step was decided on has moved to
                // Running by the report before it.
                let life = run.life();
                match owner::registered(
                    &life,
                    &facts.rules,
                    result.as_ref().map(|_| ()).map_err(String::as_str),
                ) {
                    Some(t) => self.report(run, &t).await,
                    None => Ok(()),
                }
            }
            // Carried out by `act`, which decides whether the steps go on.
            Step::Release(_) => Ok(()),
            Step::Kill => {
                self.host.kill(&uid).await;
                Ok(())
            }
            Step::Report(t) => self.report(run, &t).await,
            Step::RemoveFinalizer => {
                self.delete_artifacts(run, &uid).await?;
                *run = set_finalizer(&self.client, run, false).await?;
                tracing::info!(run_uid = %uid, "cleaned up; finalizer removed");
                Ok(())
            }
        }
    }

    /// Deletes a deleted Run's artifacts before its finalizer goes; a store
    /// that keeps failing is given up on after [`MAX_CLEANUP_TRIES`]
    /// passes (the deletion goes on; a bucket lifecycle rule takes what is
    /// left).
    async fn delete_artifacts(&self, run: &Run, uid: &str) -> Result<(), Error> {
        let Some(artifacts) = self.host.tasks.artifacts() else {
            return Ok(());
        };
        let ns = run.namespace().unwrap_or_default();
        let why = match tokio::time::timeout(CLEANUP_TIMEOUT, artifacts.store.delete_run(&ns, uid))
            .await
        {
            Ok(Ok(objects)) => {
                tracing::info!(run_uid = %uid, objects, "artifacts of the deleted run deleted");
                crate::metrics::artifact_cleanup("deleted");
                self.cleanup_tries
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(uid);
                return Ok(());
            }
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!("no answer in {} s", CLEANUP_TIMEOUT.as_secs()),
        };
        let tries = {
            let mut t = self.cleanup_tries.lock().unwrap_or_else(|p| p.into_inner());
            let n = t.entry(uid.to_owned()).or_insert(0);
            *n += 1;
            *n
        };
        if tries < MAX_CLEANUP_TRIES {
            return Err(Error::ArtifactCleanup(format!("try {tries}: {why}")));
        }
        tracing::warn!(run_uid = %uid, tries, error = %why, "giving up on the deleted run's artifacts; its deletion goes on");
        crate::metrics::artifact_cleanup("gave_up");
        self.cleanup_tries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(uid);
        Ok(())
    }

    async fn unregister(&self, uid: &str, stop: Stop) {
        let how = match stop {
            Stop::Drain => Release::Drain,
            Stop::Cancel => Release::Cancel,
        };
        // Whatever is current: this Pod's own registrations.
        if let Err(e) = self.host.release(uid, "", how).await {
            tracing::warn!(run_uid = %uid, error = %e, "release failed");
        }
    }

    /// Applies the owner's view of the status (a transition of the
    /// lifecycle core), guarded by the Run's `resourceVersion`.
    async fn report(&self, run: &mut Run, t: &Transition) -> Result<(), Error> {
        let status = run.status.clone().unwrap_or_default();
        let now = Time(k8s_openapi::jiff::Timestamp::now());
        let ready = Condition {
            type_: "Ready".into(),
            status: if t.phase == Phase::Ready {
                "True".into()
            } else {
                "False".into()
            },
            reason: t.reason.as_str().into(),
            message: String::new(),
            last_transition_time: now.clone(),
            observed_generation: run.meta().generation,
        };
        let mut body = json!({
            "apiVersion": API_VERSION,
            "kind": RUN_KIND,
            "metadata": {
                "name": run.name_any(),
                "namespace": run.namespace(),
                "resourceVersion": run.resource_version(),
            },
            "status": {
                "phase": t.phase,
                "reason": t.reason.as_str(),
                "conditions": [ready],
                "startTime": status.start_time.clone().unwrap_or_else(|| now.clone()),
            }
        });
        if let Some(message) = kruntimes_api::bounded_message(&t.message) {
            body["status"]["message"] = json!(message);
        }
        if t.phase.is_terminal() {
            body["status"]["completionTime"] = json!(status.completion_time.clone().unwrap_or(now));
        }
        // A task's result, with the transition its exit caused.
        let uid = run.uid().unwrap_or_default();
        let attempt = run.life().attempt;
        if let Some(outcome) = self.host.tasks.outcome(&uid, attempt)
            && let Some(task) = kruntimes_api::TaskStatus::of(&outcome, attempt)
        {
            body["status"]["task"] = json!(task);
        }
        // What its task or its drained session exported, with the
        // transition that outcome caused.
        let export = self
            .host
            .tasks
            .export(&uid, attempt)
            .or_else(|| self.host.sessions.export(&uid, attempt));
        if let Some(export) = export {
            let artifacts = kruntimes_api::artifact::status_artifacts(&export);
            if !artifacts.is_empty() {
                body["status"]["artifacts"] = json!(artifacts);
            }
        }
        *run = Api::<Run>::namespaced(self.client.clone(), &run.namespace().unwrap_or_default())
            .patch_status(
                &run.name_any(),
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(body),
            )
            .await?;
        tracing::info!(run_uid = %run.uid().unwrap_or_default(), phase = ?t.phase, reason = %t.reason, "run status reported");
        Ok(())
    }
}
