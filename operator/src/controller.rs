//! The control plane's decision core: Runs, Pods, scheduling and lifecycle.
//! Pure — every input is an event, every output is an [`Action`] for the
//! adapter to perform (register/unregister RPCs); the ownership table and
//! Run status are read back from the state.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use kruntimes_proto::function::v1 as pb;
use kruntimes_proto::ownership::v1 as own;
use kruntimes_proto::session::v1 as spb;
use kruntimes_proto::watch::SourceUpdate;
use serde::Serialize;

use crate::lifecycle::{Event, Phase, transition};
use crate::model::{ModeKind, RunManifest, TerminationMode};
use crate::scheduler::{PendingRun, PodView, schedule};

/// Longest status message kept.
const MAX_MESSAGE: usize = 1024;

/// A Runtime Pod (a runtimed instance) the control plane schedules onto.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodConfig {
    /// Instance name.
    pub name: String,
    /// Address of its TLS port.
    pub address: String,
    /// `runs` capacity.
    pub capacity: u32,
}

/// Side effects requested by the core.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Register a Run on a Pod.
    Register {
        /// Pod name.
        pod: String,
        /// The request (boxed: it carries the inline source).
        request: Box<pb::RegisterRequest>,
    },
    /// Open a session Run's workspace on a Pod.
    OpenSession {
        /// Pod name.
        pod: String,
        /// The request (boxed: it carries the inline source).
        request: Box<spb::OpenSessionRequest>,
    },
    /// Close a session; the result comes back through [`Controller::close_result`].
    CloseSession {
        /// Pod name.
        pod: String,
        /// Run UID.
        run_uid: String,
        /// Cancel instead of draining.
        cancel: bool,
    },
    /// Unregister a Run from a Pod.
    Unregister {
        /// Pod name.
        pod: String,
        /// Run UID.
        run_uid: String,
        /// Drain or cancel.
        mode: pb::UnregisterMode,
    },
}

/// Outcome of a Register RPC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegisterOutcome {
    /// Registered.
    Ok,
    /// Transport or availability error: retry.
    Retryable(String),
    /// The registration itself is wrong (bad handler, import error).
    Permanent(String),
}

/// One Run's state.
#[derive(Debug, Clone)]
pub struct RunState {
    /// Immutable UID.
    pub uid: String,
    /// The manifest it was created from.
    pub manifest: RunManifest,
    /// Mode, when valid.
    pub mode: Option<ModeKind>,
    /// Registration digest.
    pub digest: String,
    /// Phase.
    pub phase: Phase,
    /// Machine-readable reason of the phase.
    pub reason: String,
    /// Bounded message.
    pub message: String,
    /// Owner Pod name.
    pub owner: Option<String>,
    /// Owner Pod UID at assignment.
    pub owner_uid: Option<String>,
    /// Registration attempt.
    pub attempt: u64,
    /// Retries used.
    pub retries: u32,
    seq: u64,
    retry_at: Option<Instant>,
    created: Instant,
}

#[derive(Debug, Clone)]
struct PodState {
    cfg: PodConfig,
    uid: Option<String>,
    connected: bool,
    lost_at: Option<Instant>,
    entries: HashMap<String, own::OwnershipEntry>,
}

/// `status` of a Run as shown by `krt runs` (and, in clusters, `Run.status`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunStatus {
    /// Name.
    pub name: String,
    /// Namespace.
    pub namespace: String,
    /// Runtime.
    pub runtime: String,
    /// UID.
    pub uid: String,
    /// Mode.
    pub mode: String,
    /// Phase.
    pub phase: Phase,
    /// Reason.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// Message.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// Owner Pod name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub assigned_pod: Option<String>,
    /// Owner Pod UID.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub assigned_pod_uid: Option<String>,
    /// Attempt.
    pub attempt: u64,
    /// Invoke URL (function Runs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
}

/// The control plane's state.
#[derive(Debug)]
pub struct Controller {
    runs: BTreeMap<String, RunState>,
    pods: BTreeMap<String, PodState>,
    seq: u64,
    owner_grace: Duration,
    retry_backoff: Duration,
    hold_until: Option<Instant>,
}

fn bounded(s: impl Into<String>) -> String {
    kruntimes_proto::api::truncate_utf8(s.into(), MAX_MESSAGE)
}

impl Controller {
    /// A controller over fixed Pods. `owner_grace` is how long a lost Pod may
    /// stay away before its Runs move elsewhere.
    pub fn new(pods: Vec<PodConfig>, owner_grace: Duration, retry_backoff: Duration) -> Self {
        Self {
            runs: BTreeMap::new(),
            pods: pods
                .into_iter()
                .map(|cfg| {
                    (
                        cfg.name.clone(),
                        PodState {
                            cfg,
                            uid: None,
                            connected: false,
                            lost_at: None,
                            entries: HashMap::new(),
                        },
                    )
                })
                .collect(),
            seq: 0,
            owner_grace,
            retry_backoff,
            hold_until: None,
        }
    }

    /// Defers scheduling until every Pod reported its table once or `until`
    /// passes, so Runs present at start-up spread over all Pods instead of
    /// piling onto the first one to connect.
    pub fn with_startup_hold(mut self, until: Instant) -> Self {
        self.hold_until = Some(until);
        self
    }

    /// Runs by key.
    pub fn runs(&self) -> impl Iterator<Item = &RunState> {
        self.runs.values()
    }

    fn by_uid(&mut self, uid: &str) -> Option<&mut RunState> {
        self.runs.values_mut().find(|r| r.uid == uid)
    }

    /// Applies the full set of manifests (keyed `namespace/name`). New keys
    /// create Runs with fresh UIDs; removed keys delete them; a changed spec
    /// replaces the Run (execution inputs are immutable).
    pub fn apply_store(
        &mut self,
        manifests: BTreeMap<String, RunManifest>,
        now: Instant,
    ) -> Vec<Action> {
        let mut actions = Vec::new();
        let gone: Vec<String> = self
            .runs
            .iter()
            .filter(|(k, r)| {
                manifests
                    .get(*k)
                    .is_none_or(|m| !m.same_inputs(&r.manifest))
            })
            .map(|(k, _)| k.clone())
            .collect();
        for key in gone {
            if let Some(run) = self.runs.remove(&key) {
                tracing::info!(run = %key, uid = %run.uid, "run deleted");
                if let (Some(pod), true) = (&run.owner, run.phase.holds_capacity()) {
                    actions.push(release(pod, &run));
                }
            }
        }
        // Termination is the one field that may change in place.
        for (key, m) in &manifests {
            if let Some(run) = self.runs.get_mut(key)
                && run.manifest.termination() != m.termination()
            {
                let monotonic = matches!(
                    (run.manifest.termination(), m.termination()),
                    (None, Some(_))
                        | (
                            Some(TerminationMode::Drain),
                            Some(TerminationMode::Immediate)
                        )
                );
                if monotonic {
                    run.manifest.spec.termination = m.spec.termination.clone();
                    actions.extend(terminate(run));
                }
            }
        }
        for (key, manifest) in manifests {
            if self.runs.contains_key(&key) {
                continue;
            }
            self.seq += 1;
            let (mode, phase, reason, message) = match manifest.validate() {
                Ok(kind @ (ModeKind::Function | ModeKind::Session)) => {
                    (Some(kind), Phase::Pending, String::new(), String::new())
                }
                Ok(other) => (
                    Some(other),
                    Phase::Failed,
                    "UnsupportedMode".to_owned(),
                    format!(
                        "{} mode is not served by the embedded control plane",
                        other.as_str()
                    ),
                ),
                Err(e) => (None, Phase::Failed, "Invalid".to_owned(), bounded(e)),
            };
            let run = RunState {
                uid: uuid::Uuid::new_v4().to_string(),
                digest: manifest.digest(),
                manifest,
                mode,
                phase,
                reason,
                message,
                owner: None,
                owner_uid: None,
                attempt: 1,
                retries: 0,
                seq: self.seq,
                retry_at: None,
                created: now,
            };
            tracing::info!(run = %key, uid = %run.uid, phase = ?run.phase, "run created");
            self.runs.insert(key, run);
        }
        actions.extend(self.schedule(now));
        actions
    }

    /// Applies what a Pod's ownership watch reported.
    pub fn apply_pod(&mut self, pod: &str, update: SourceUpdate, now: Instant) -> Vec<Action> {
        let mut actions = Vec::new();
        let Some(state) = self.pods.get_mut(pod) else {
            return actions;
        };
        match update {
            SourceUpdate::Snapshot {
                instance_id,
                entries,
            } => {
                let restarted = state.uid.as_ref().is_some_and(|u| *u != instance_id);
                let old_uid = state.uid.replace(instance_id.clone());
                state.connected = true;
                state.lost_at = None;
                state.entries = entries
                    .into_iter()
                    .map(|e| (e.run_uid.clone(), e))
                    .collect();
                if restarted && let Some(old) = old_uid {
                    tracing::warn!(pod, old_uid = %old, new_uid = %instance_id, "pod restarted; fencing its runs");
                    self.owner_lost(pod, &old, now);
                }
                actions.extend(self.reconcile_pod(pod));
            }
            SourceUpdate::Upsert(e) => {
                state.entries.insert(e.run_uid.clone(), e);
                actions.extend(self.reconcile_pod(pod));
            }
            SourceUpdate::Delete(uid) => {
                state.entries.remove(&uid);
                actions.extend(self.reconcile_pod(pod));
            }
            SourceUpdate::Lost => {
                if state.connected {
                    tracing::warn!(pod, "lost ownership watch of pod");
                    state.connected = false;
                    state.lost_at = Some(now);
                }
            }
        }
        actions.extend(self.schedule(now));
        actions
    }

    /// Compares a connected Pod's registrations with the assignments:
    /// idle-expired Runs end, missing registrations of Ready Runs are
    /// re-registered (same attempt, idempotent), orphans are unregistered.
    fn reconcile_pod(&mut self, pod: &str) -> Vec<Action> {
        let mut actions = Vec::new();
        let Some(state) = self.pods.get(pod) else {
            return actions;
        };
        let pod_uid = state.uid.clone();
        let entries = state.entries.clone();
        for run in self.runs.values_mut() {
            if run.owner.as_deref() != Some(pod) || run.owner_uid != pod_uid {
                continue;
            }
            match entries.get(&run.uid) {
                Some(e)
                    if e.attempt == run.attempt
                        && e.phase == own::Phase::Failed as i32
                        && e.reason == "IdleTimeout" =>
                {
                    if let Some(next) = transition(run.phase, Event::IdleTimeout) {
                        tracing::info!(uid = %run.uid, "run idle timeout");
                        run.phase = next;
                        run.reason = "IdleTimeout".into();
                        run.message = "no activity within idleTimeoutSeconds".into();
                        actions.push(cancel_on(pod, &run.uid, run.mode));
                    }
                }
                None if run.phase == Phase::Ready && run.mode == Some(ModeKind::Session) => {
                    // A workspace cannot be recreated silently: the session ends.
                    tracing::warn!(uid = %run.uid, pod, "session missing on its owner");
                    run.phase = Phase::Failed;
                    run.reason = "SessionLost".into();
                    run.message = format!("the session's workspace on {pod} is gone");
                }
                None if run.phase == Phase::Ready => {
                    tracing::warn!(uid = %run.uid, pod, "registration missing on owner; re-registering");
                    run.phase = Phase::Running;
                    actions.push(Action::Register {
                        pod: pod.to_owned(),
                        request: Box::new(register_request(run)),
                    });
                }
                _ => {}
            }
        }
        for (uid, e) in &entries {
            let owned_here = self.runs.values().any(|r| {
                r.uid == *uid && r.owner.as_deref() == Some(pod) && r.phase.holds_capacity()
            });
            if !owned_here {
                let mode = (e.mode == own::Mode::Session as i32).then_some(ModeKind::Session);
                actions.push(cancel_on(pod, uid, mode.or(Some(ModeKind::Function))));
            }
        }
        actions
    }

    fn owner_lost(&mut self, pod: &str, pod_uid: &str, now: Instant) {
        let backoff = self.retry_backoff;
        for run in self.runs.values_mut() {
            if run.owner.as_deref() != Some(pod) || run.owner_uid.as_deref() != Some(pod_uid) {
                continue;
            }
            // A Ready session's workspace died with its owner: never resume
            // it silently elsewhere.
            let ready_session = run.mode == Some(ModeKind::Session) && run.phase == Phase::Ready;
            let retries_left =
                !ready_session && run.retries < run.manifest.spec.retry_policy.max_retries;
            let Some(next) = transition(run.phase, Event::OwnerLost { retries_left }) else {
                continue;
            };
            run.phase = next;
            run.owner = None;
            run.owner_uid = None;
            if next == Phase::Pending {
                run.retries += 1;
                run.attempt += 1;
                run.reason = "OwnerLost".into();
                run.message = format!(
                    "owner {pod} was lost; re-registering as attempt {}",
                    run.attempt
                );
                run.retry_at = Some(now + backoff);
            } else {
                run.reason = "OwnerLost".into();
                run.message = format!("owner {pod} was lost and the retry policy is exhausted");
            }
            tracing::warn!(uid = %run.uid, pod, phase = ?run.phase, attempt = run.attempt, "owner lost");
        }
    }

    /// Records a Register result for `uid` at `attempt` (late results of an
    /// older attempt are ignored).
    pub fn register_result(
        &mut self,
        uid: &str,
        attempt: u64,
        outcome: RegisterOutcome,
        now: Instant,
    ) -> Vec<Action> {
        let backoff = self.retry_backoff;
        if let Some(run) = self.by_uid(uid)
            && run.attempt == attempt
            && run.phase == Phase::Running
        {
            match outcome {
                RegisterOutcome::Ok => {
                    run.phase = Phase::Ready;
                    run.reason = match run.mode {
                        Some(ModeKind::Session) => "SessionOpened".into(),
                        _ => "FunctionRegistered".into(),
                    };
                    run.message.clear();
                }
                RegisterOutcome::Retryable(msg) => {
                    let retries_left = run.retries < run.manifest.spec.retry_policy.max_retries;
                    run.retries += 1;
                    run.phase = transition(
                        run.phase,
                        Event::RegisterFailed {
                            retryable: retries_left,
                        },
                    )
                    .unwrap_or(Phase::Failed);
                    run.reason = "RegistrationFailed".into();
                    run.message = bounded(msg);
                    run.owner = None;
                    run.owner_uid = None;
                    run.retry_at = Some(now + backoff);
                }
                RegisterOutcome::Permanent(msg) => {
                    run.phase = Phase::Failed;
                    run.reason = "RegistrationFailed".into();
                    run.message = bounded(msg);
                }
            }
        }
        self.schedule(now)
    }

    /// Periodic work: Pods lost beyond the grace lose their Runs; backoffs
    /// expire; pending Runs are scheduled.
    pub fn tick(&mut self, now: Instant) -> Vec<Action> {
        let expired: Vec<(String, String)> = self
            .pods
            .iter()
            .filter(|(_, p)| {
                !p.connected
                    && p.lost_at
                        .is_some_and(|t| now.duration_since(t) >= self.owner_grace)
            })
            .filter_map(|(n, p)| p.uid.clone().map(|u| (n.clone(), u)))
            .collect();
        for (pod, uid) in expired {
            self.owner_lost(&pod, &uid, now);
            if let Some(p) = self.pods.get_mut(&pod) {
                p.lost_at = None;
            }
        }
        let mut actions = Vec::new();
        for run in self.runs.values_mut() {
            let limit = run
                .manifest
                .spec
                .timeout
                .map(|s| Duration::from_secs(s.into()));
            if run.phase.is_terminal() || limit.is_none_or(|l| now.duration_since(run.created) < l)
            {
                continue;
            }
            tracing::info!(uid = %run.uid, "run timeout");
            if let (Some(pod), true) = (&run.owner, run.phase.holds_capacity()) {
                actions.push(cancel_on(pod, &run.uid, run.mode));
            }
            run.phase = Phase::Timeout;
            run.reason = "RunTimeout".into();
            run.message = "spec.timeout elapsed".into();
        }
        actions.extend(self.schedule(now));
        actions
    }

    fn schedule(&mut self, now: Instant) -> Vec<Action> {
        if let Some(until) = self.hold_until {
            if now < until && self.pods.values().any(|p| p.uid.is_none()) {
                return Vec::new();
            }
            self.hold_until = None;
        }
        let mut pending: Vec<&RunState> = self
            .runs
            .values()
            .filter(|r| r.phase == Phase::Pending && r.retry_at.is_none_or(|t| t <= now))
            .collect();
        // Exclusive (session) Runs first: they need an idle Pod, which a
        // shared Run placed earlier in the same cycle would take.
        pending.sort_by_key(|r| (r.mode != Some(ModeKind::Session), r.seq));
        let pending: Vec<PendingRun> = pending
            .into_iter()
            .map(|r| PendingRun {
                key: r.manifest.key(),
                exclusive: r.mode == Some(ModeKind::Session),
            })
            .collect();
        if pending.is_empty() {
            return Vec::new();
        }
        let pods: Vec<PodView> = self
            .pods
            .values()
            .map(|p| {
                let holders: Vec<&RunState> = self
                    .runs
                    .values()
                    .filter(|r| {
                        r.owner.as_deref() == Some(p.cfg.name.as_str()) && r.phase.holds_capacity()
                    })
                    .collect();
                PodView {
                    name: p.cfg.name.clone(),
                    ready: p.connected && p.uid.is_some(),
                    capacity: p.cfg.capacity,
                    used: holders.len() as u32,
                    exclusive: holders.iter().any(|r| r.mode == Some(ModeKind::Session)),
                }
            })
            .collect();
        let mut actions = Vec::new();
        for (key, pod) in schedule(&pending, &pods) {
            let pod_uid = self.pods.get(&pod).and_then(|p| p.uid.clone());
            let Some(run) = self.runs.get_mut(&key) else {
                continue;
            };
            let Some(scheduled) = transition(run.phase, Event::Assigned) else {
                continue;
            };
            run.owner = Some(pod.clone());
            run.owner_uid = pod_uid;
            run.retry_at = None;
            run.phase = transition(scheduled, Event::RegisterStarted).unwrap_or(scheduled);
            tracing::info!(uid = %run.uid, pod = %pod, attempt = run.attempt, "run scheduled");
            actions.push(match run.mode {
                Some(ModeKind::Session) => Action::OpenSession {
                    pod,
                    request: Box::new(open_session_request(run)),
                },
                _ => Action::Register {
                    pod,
                    request: Box::new(register_request(run)),
                },
            });
        }
        actions
    }

    /// Records the end of a CloseSession: a draining session has finished
    /// its accepted work.
    pub fn close_result(&mut self, uid: &str, ok: bool, now: Instant) -> Vec<Action> {
        if let Some(run) = self.by_uid(uid)
            && run.phase == Phase::Finalizing
        {
            let cancel = run.manifest.termination() == Some(TerminationMode::Immediate);
            let event = if cancel {
                Event::Cancel
            } else {
                Event::Finalized
            };
            if let Some(next) = transition(run.phase, event) {
                run.phase = next;
                run.reason = if cancel {
                    "Cancelled".into()
                } else {
                    "Drained".into()
                };
                if !ok {
                    run.message = "the owner was unreachable while closing".into();
                }
            }
        }
        self.schedule(now)
    }

    /// The control plane's ownership table: every valid function Run with
    /// its assignment (owner absent while pending).
    pub fn ownership_entries(&self) -> Vec<own::OwnershipEntry> {
        self.runs
            .values()
            .filter(|r| matches!(r.mode, Some(ModeKind::Function | ModeKind::Session)))
            .map(|r| {
                let owner = r
                    .owner
                    .as_ref()
                    .and_then(|p| self.pods.get(p))
                    .map(|p| own::Owner {
                        pod_name: p.cfg.name.clone(),
                        pod_uid: r.owner_uid.clone().unwrap_or_default(),
                        dataplane_address: p.cfg.address.clone(),
                    });
                let phase = match r.phase {
                    Phase::Pending => own::Phase::Pending,
                    Phase::Scheduled => own::Phase::Scheduled,
                    Phase::Running => own::Phase::Running,
                    Phase::Ready => own::Phase::Ready,
                    Phase::Finalizing => own::Phase::Draining,
                    _ => own::Phase::Failed,
                };
                own::OwnershipEntry {
                    namespace: r.manifest.namespace().to_owned(),
                    run_name: r.manifest.metadata.name.clone(),
                    run_uid: r.uid.clone(),
                    runtime: r.manifest.spec.runtime.clone(),
                    mode: match r.mode {
                        Some(ModeKind::Session) => own::Mode::Session as i32,
                        _ => own::Mode::Function as i32,
                    },
                    owner,
                    attempt: r.attempt,
                    phase: phase as i32,
                    limits: None,
                    reason: r.reason.clone(),
                }
            })
            .collect()
    }

    /// Status of every Run; `gateway_url` forms the endpoint.
    pub fn status(&self, gateway_url: &str) -> Vec<RunStatus> {
        self.runs
            .values()
            .map(|r| {
                let ns = r.manifest.namespace();
                let rt = &r.manifest.spec.runtime;
                RunStatus {
                    name: r.manifest.metadata.name.clone(),
                    namespace: ns.to_owned(),
                    runtime: rt.clone(),
                    uid: r.uid.clone(),
                    mode: r.mode.map_or("invalid", ModeKind::as_str).to_owned(),
                    phase: r.phase,
                    reason: r.reason.clone(),
                    message: r.message.clone(),
                    assigned_pod: r.owner.clone(),
                    assigned_pod_uid: r.owner_uid.clone(),
                    attempt: r.attempt,
                    endpoint: match r.mode {
                        Some(ModeKind::Function) => Some(format!(
                            "{gateway_url}/v1/namespaces/{ns}/runtimes/{rt}/runs/{}:invoke",
                            r.uid
                        )),
                        Some(ModeKind::Session) => Some(format!(
                            "{gateway_url}/v1/namespaces/{ns}/runtimes/{rt}/sessions/{}",
                            r.uid
                        )),
                        _ => None,
                    },
                }
            })
            .collect()
    }
}

/// Releases a deleted Run on its owner: functions drain unless termination
/// says `Immediate`; sessions are cancelled unless it says `Drain`.
fn release(pod: &str, run: &RunState) -> Action {
    match run.mode {
        Some(ModeKind::Session) => Action::CloseSession {
            pod: pod.to_owned(),
            run_uid: run.uid.clone(),
            cancel: run.manifest.termination() != Some(TerminationMode::Drain),
        },
        _ => Action::Unregister {
            pod: pod.to_owned(),
            run_uid: run.uid.clone(),
            mode: match run.manifest.termination() {
                Some(TerminationMode::Immediate) => pb::UnregisterMode::Cancel,
                _ => pb::UnregisterMode::Drain,
            },
        },
    }
}

/// Cancels a Run's registration or session on a Pod.
fn cancel_on(pod: &str, uid: &str, mode: Option<ModeKind>) -> Action {
    match mode {
        Some(ModeKind::Session) => Action::CloseSession {
            pod: pod.to_owned(),
            run_uid: uid.to_owned(),
            cancel: true,
        },
        _ => Action::Unregister {
            pod: pod.to_owned(),
            run_uid: uid.to_owned(),
            mode: pb::UnregisterMode::Cancel,
        },
    }
}

/// Applies a newly requested termination to a live Run.
fn terminate(run: &mut RunState) -> Vec<Action> {
    let Some(mode) = run.manifest.termination() else {
        return Vec::new();
    };
    let owner = run.owner.clone();
    match (run.phase, mode, owner) {
        (Phase::Ready, TerminationMode::Drain, Some(pod))
            if run.mode == Some(ModeKind::Session) =>
        {
            run.phase = Phase::Finalizing;
            run.reason = "Draining".into();
            vec![Action::CloseSession {
                pod,
                run_uid: run.uid.clone(),
                cancel: false,
            }]
        }
        (Phase::Finalizing, TerminationMode::Immediate, Some(pod)) => {
            vec![Action::CloseSession {
                pod,
                run_uid: run.uid.clone(),
                cancel: true,
            }]
        }
        (phase, TerminationMode::Immediate, owner) if !phase.is_terminal() => {
            let release = owner
                .filter(|_| phase.holds_capacity())
                .map(|pod| cancel_on(&pod, &run.uid, run.mode));
            if run.mode == Some(ModeKind::Session) && release.is_some() {
                // Cancelled once the owner confirms the close.
                run.phase = Phase::Finalizing;
                run.reason = "Cancelling".into();
            } else {
                run.phase = Phase::Cancelled;
                run.reason = "Cancelled".into();
            }
            release.into_iter().collect()
        }
        (Phase::Ready, TerminationMode::Drain, Some(pod)) => {
            // A function Run: drain its registration and end.
            run.phase = Phase::Succeeded;
            run.reason = "Drained".into();
            vec![Action::Unregister {
                pod,
                run_uid: run.uid.clone(),
                mode: pb::UnregisterMode::Drain,
            }]
        }
        _ => Vec::new(),
    }
}

/// The OpenSession request of a session Run's current attempt.
pub fn open_session_request(run: &RunState) -> spb::OpenSessionRequest {
    open_session_request_for(&run.manifest, &run.uid, run.attempt)
}

/// The OpenSession request of a session Run `uid` at `attempt`.
pub fn open_session_request_for(
    m: &RunManifest,
    uid: &str,
    attempt: u64,
) -> spb::OpenSessionRequest {
    let s = m.spec.mode.session.clone().unwrap_or_default();
    spb::OpenSessionRequest {
        run: Some(pb::RunRef {
            namespace: m.namespace().to_owned(),
            name: m.metadata.name.clone(),
            uid: uid.to_owned(),
            runtime: m.spec.runtime.clone(),
        }),
        attempt,
        source: m.spec.source.inline.as_ref().map(|inline| pb::Source {
            inline: inline.clone(),
            inline_path: m.spec.source.inline_path.clone().unwrap_or_default(),
        }),
        env: m.env().into_iter().collect(),
        queue_size: s.queue_size.unwrap_or(0),
        operation_timeout_seconds: s.operation_timeout.unwrap_or(0),
        idle_timeout_seconds: s.idle_timeout_seconds.unwrap_or(0),
    }
}

/// The deterministic Register request of a Run's current attempt.
pub fn register_request(run: &RunState) -> pb::RegisterRequest {
    register_request_for(&run.manifest, &run.uid, run.attempt)
}

/// The deterministic Register request of a function Run `uid` at `attempt`.
pub fn register_request_for(m: &RunManifest, uid: &str, attempt: u64) -> pb::RegisterRequest {
    let f = m.spec.mode.function.clone().unwrap_or_default();
    pb::RegisterRequest {
        run: Some(pb::RunRef {
            namespace: m.namespace().to_owned(),
            name: m.metadata.name.clone(),
            uid: uid.to_owned(),
            runtime: m.spec.runtime.clone(),
        }),
        attempt,
        digest: m.digest(),
        handler: f.handler,
        source: Some(pb::Source {
            inline: m.spec.source.inline.clone().unwrap_or_default(),
            inline_path: m.spec.source.inline_path.clone().unwrap_or_default(),
        }),
        env: m.env().into_iter().collect(),
        limits: Some(pb::Limits {
            max_input_bytes: 0,
            max_output_bytes: 0,
            timeout_ms: f
                .invocation_timeout_seconds
                .unwrap_or(0)
                .saturating_mul(1000),
        }),
        idle_timeout_seconds: f.idle_timeout_seconds.unwrap_or(0),
    }
}

#[cfg(test)]
mod tests;
