//! The operator's decisions in Kubernetes mode. Pure: views of Runs, Pods
//! and Runtimes in, operations out. The adapter ([`super::run`]) turns the
//! operations into API calls guarded by `resourceVersion` preconditions, so a
//! decision made on stale views fails and is made again on fresh ones.
//!
//! Division of labour with the owner runtimed: the operator schedules
//! (`Pending → Scheduled`), fences lost owners (`attempt + 1` on another Pod,
//! or `Failed` when the retry policy is exhausted), ends Runs on
//! `spec.timeout`, cancels unassigned Runs and releases finalizers of Runs
//! whose owner is gone. The owner registers (`Running → Ready`), drains or
//! cancels on `termination`, reports idle expiry and removes the finalizer
//! after cleaning up.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use crate::crd::{Endpoint, RunPhase, RunStatus, bounded_message};
use crate::model::{ModeKind, TerminationMode};
use crate::scheduler::{self, PendingRun, PodView};

/// A Run as the operator sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct RunView {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// UID.
    pub uid: String,
    /// `spec.runtime`.
    pub runtime: String,
    /// The valid mode, or why the spec is invalid.
    pub mode: Result<ModeKind, String>,
    /// `metadata.creationTimestamp`.
    pub created: SystemTime,
    /// `spec.timeout`.
    pub timeout: Option<Duration>,
    /// `spec.retryPolicy.maxRetries`.
    pub max_retries: u32,
    /// `spec.termination.mode`.
    pub termination: Option<TerminationMode>,
    /// `metadata.deletionTimestamp` is set.
    pub deleting: bool,
    /// Carries the cleanup finalizer.
    pub has_finalizer: bool,
    /// Current status.
    pub status: RunStatus,
}

impl RunView {
    fn phase(&self) -> RunPhase {
        self.status.phase.unwrap_or(RunPhase::Pending)
    }

    fn attempt(&self) -> i64 {
        self.status.attempt.unwrap_or(0)
    }
}

/// A Runtime Pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodInfo {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// UID.
    pub uid: String,
    /// Its Runtime (label `kruntimes.io/runtime`).
    pub runtime: String,
    /// Ready condition true and not being deleted.
    pub ready: bool,
    /// Being deleted: it owns nothing any more.
    pub terminating: bool,
    /// `podIP:dataplane-port`, when known.
    pub address: Option<String>,
}

/// A Runtime pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeInfo {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// `spec.capacity.runs`.
    pub capacity: u32,
}

/// Operator settings the decisions depend on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// Public base URL of the gateway (`https://host[:port]`).
    pub gateway_url: String,
    /// Base64 PEM CA bundle for `status.endpoint.caBundle`.
    pub ca_bundle: Option<String>,
    /// Namespace searched for a Runtime a Run's namespace lacks.
    pub system_namespace: String,
}

/// What to change.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    /// Add the cleanup finalizer.
    AddFinalizer {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
    },
    /// Remove the cleanup finalizer (the owner is gone).
    RemoveFinalizer {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
    },
    /// Replace the status.
    Status {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
        /// The new status.
        status: Box<RunStatus>,
    },
}

/// Key of a Runtime (`namespace/name`).
fn runtime_key(ns: &str, name: &str) -> String {
    format!("{ns}/{name}")
}

/// The Runtime a Run uses: the one of its own namespace, else the system
/// namespace's.
pub fn resolve_runtime<'a>(
    run: &RunView,
    runtimes: &'a BTreeMap<String, RuntimeInfo>,
    s: &Settings,
) -> Option<&'a RuntimeInfo> {
    runtimes
        .get(&runtime_key(&run.namespace, &run.runtime))
        .or_else(|| runtimes.get(&runtime_key(&s.system_namespace, &run.runtime)))
}

/// The public URL of a Run.
pub fn endpoint(run: &RunView, s: &Settings) -> Endpoint {
    let base = s.gateway_url.trim_end_matches('/');
    let (collection, suffix) = match run.mode {
        Ok(ModeKind::Session) => ("sessions", ""),
        _ => ("runs", ":invoke"),
    };
    Endpoint {
        protocol: if base.starts_with("http://") {
            "HTTP".into()
        } else {
            "HTTPS".into()
        },
        url: format!(
            "{base}/v1/namespaces/{}/runtimes/{}/{collection}/{}{suffix}",
            run.namespace, run.runtime, run.uid
        ),
        ca_bundle: s.ca_bundle.clone(),
    }
}

fn terminal(run: &RunView, phase: RunPhase, reason: &str, message: String) -> Op {
    let mut status = run.status.clone();
    status.phase = Some(phase);
    status.reason = Some(reason.to_owned());
    status.message = bounded_message(&message);
    status.conditions = vec![];
    status.completion_time = None; // set by the adapter (it knows the clock)
    Op::Status {
        namespace: run.namespace.clone(),
        name: run.name.clone(),
        status: Box::new(status),
    }
}

/// Whether the Pod that owns `run` (by UID) still exists and is not being
/// deleted.
pub fn owner_alive(run: &RunView, pods: &[PodInfo]) -> bool {
    match (&run.status.assigned_pod, &run.status.assigned_pod_uid) {
        (Some(name), Some(uid)) => pods
            .iter()
            .any(|p| &p.name == name && &p.uid == uid && !p.terminating),
        _ => false,
    }
}

/// Every operation the current views call for, deterministic in the order
/// of `runs` (sorted by creation time, then namespace and name).
pub fn reconcile(
    runs: &[RunView],
    pods: &[PodInfo],
    runtimes: &[RuntimeInfo],
    s: &Settings,
    now: SystemTime,
) -> Vec<Op> {
    let mut runs: Vec<&RunView> = runs.iter().collect();
    runs.sort_by(|a, b| {
        a.created
            .cmp(&b.created)
            .then_with(|| a.namespace.cmp(&b.namespace))
            .then_with(|| a.name.cmp(&b.name))
    });
    let runtimes: BTreeMap<String, RuntimeInfo> = runtimes
        .iter()
        .map(|r| (runtime_key(&r.namespace, &r.name), r.clone()))
        .collect();
    let mut ops = Vec::new();
    // Runs waiting for a Pod, per Runtime key.
    let mut pending: BTreeMap<String, Vec<&RunView>> = BTreeMap::new();

    for run in &runs {
        let phase = run.phase();
        if run.deleting {
            if run.has_finalizer && !owner_alive(run, pods) {
                ops.push(Op::RemoveFinalizer {
                    namespace: run.namespace.clone(),
                    name: run.name.clone(),
                });
            }
            continue;
        }
        if !run.has_finalizer && !phase.is_terminal() {
            ops.push(Op::AddFinalizer {
                namespace: run.namespace.clone(),
                name: run.name.clone(),
            });
        }
        if phase.is_terminal() {
            continue;
        }
        match &run.mode {
            Err(why) => {
                ops.push(terminal(run, RunPhase::Failed, "InvalidSpec", why.clone()));
                continue;
            }
            Ok(ModeKind::Task) => {
                ops.push(terminal(
                    run,
                    RunPhase::Failed,
                    "UnsupportedMode",
                    "task mode is not served by this operator; use function or session mode".into(),
                ));
                continue;
            }
            Ok(_) => {}
        }
        if let Some(t) = run.timeout
            && run.created + t <= now
        {
            ops.push(terminal(
                run,
                RunPhase::Timeout,
                "RunTimeout",
                format!("spec.timeout of {}s elapsed", t.as_secs()),
            ));
            continue;
        }
        let assigned = run.status.assigned_pod_uid.is_some();
        if assigned {
            if owner_alive(run, pods) {
                // The owner drives the Run from here; the operator only keeps
                // the endpoint current (a rotated CA bundle, a new URL).
                let want = endpoint(run, s);
                if run.status.endpoint.as_ref() != Some(&want) {
                    let mut status = run.status.clone();
                    status.endpoint = Some(want);
                    ops.push(Op::Status {
                        namespace: run.namespace.clone(),
                        name: run.name.clone(),
                        status: Box::new(status),
                    });
                }
                continue;
            }
            let pod = run.status.assigned_pod.clone().unwrap_or_default();
            if run.termination.is_some() {
                ops.push(terminal(
                    run,
                    RunPhase::Cancelled,
                    "OwnerLost",
                    format!("owner Pod {pod} is gone; termination requested"),
                ));
            } else if run.mode == Ok(ModeKind::Session) {
                ops.push(terminal(
                    run,
                    RunPhase::Failed,
                    "OwnerLost",
                    format!("owner Pod {pod} is gone; a session's workspace does not move"),
                ));
            } else if run.attempt() <= i64::from(run.max_retries) {
                // Fence: forget the lost owner; the next assignment raises
                // the attempt, which the old owner's registration can never
                // match again.
                let mut status = run.status.clone();
                status.phase = Some(RunPhase::Pending);
                status.reason = Some("OwnerLost".into());
                status.message = bounded_message(&format!(
                    "owner Pod {pod} is gone; rescheduling (attempt {} of {})",
                    run.attempt() + 1,
                    i64::from(run.max_retries) + 1
                ));
                status.assigned_pod = None;
                status.assigned_pod_uid = None;
                status.conditions = vec![];
                ops.push(Op::Status {
                    namespace: run.namespace.clone(),
                    name: run.name.clone(),
                    status: Box::new(status),
                });
            } else {
                ops.push(terminal(
                    run,
                    RunPhase::Failed,
                    "OwnerLost",
                    format!(
                        "owner Pod {pod} is gone and the retry policy ({} retries) is exhausted",
                        run.max_retries
                    ),
                ));
            }
            continue;
        }
        if run.termination.is_some() {
            ops.push(terminal(
                run,
                RunPhase::Cancelled,
                "Terminated",
                "terminated before it was scheduled".into(),
            ));
            continue;
        }
        match resolve_runtime(run, &runtimes, s) {
            Some(rt) => pending
                .entry(runtime_key(&rt.namespace, &rt.name))
                .or_default()
                .push(run),
            None => {
                let message = format!(
                    "Runtime {:?} not found in namespace {} or {}",
                    run.runtime, run.namespace, s.system_namespace
                );
                if run.status.phase != Some(RunPhase::Pending)
                    || run.status.message.as_deref() != Some(message.as_str())
                {
                    let mut status = run.status.clone();
                    status.phase = Some(RunPhase::Pending);
                    status.reason = Some("RuntimeNotFound".into());
                    status.message = bounded_message(&message);
                    status.endpoint = Some(endpoint(run, s));
                    ops.push(Op::Status {
                        namespace: run.namespace.clone(),
                        name: run.name.clone(),
                        status: Box::new(status),
                    });
                }
            }
        }
    }

    // Schedule per Runtime.
    for (key, waiting) in pending {
        let Some(rt) = runtimes.get(&key) else {
            continue;
        };
        let views: Vec<PodView> = pods
            .iter()
            .filter(|p| p.namespace == rt.namespace && p.runtime == rt.name)
            .map(|p| {
                let holders: Vec<&&RunView> = runs
                    .iter()
                    .filter(|r| {
                        r.status.assigned_pod_uid.as_deref() == Some(p.uid.as_str())
                            && r.phase().holds_capacity()
                    })
                    .collect();
                PodView {
                    name: p.name.clone(),
                    ready: p.ready && p.address.is_some(),
                    capacity: rt.capacity,
                    used: holders.len() as u32,
                    exclusive: holders.iter().any(|r| r.mode == Ok(ModeKind::Session)),
                }
            })
            .collect();
        // Sessions first (they need a whole idle Pod), then oldest first.
        let mut waiting = waiting;
        waiting.sort_by_key(|r| r.mode != Ok(ModeKind::Session));
        let requests: Vec<PendingRun> = waiting
            .iter()
            .map(|r| PendingRun {
                key: format!("{}/{}", r.namespace, r.name),
                exclusive: r.mode == Ok(ModeKind::Session),
            })
            .collect();
        let placed: BTreeMap<String, String> =
            scheduler::schedule(&requests, &views).into_iter().collect();
        for run in waiting {
            let key = format!("{}/{}", run.namespace, run.name);
            let mut status = run.status.clone();
            status.endpoint = Some(endpoint(run, s));
            match placed.get(&key) {
                Some(pod_name) => {
                    let pod = pods
                        .iter()
                        .find(|p| &p.name == pod_name && p.namespace == rt.namespace)
                        .expect("the scheduler only names known pods");
                    status.phase = Some(RunPhase::Scheduled);
                    status.reason = Some("Scheduled".into());
                    status.message = bounded_message(&format!("assigned to Pod {}", pod.name));
                    status.assigned_pod = Some(pod.name.clone());
                    status.assigned_pod_uid = Some(pod.uid.clone());
                    status.attempt = Some(run.attempt() + 1);
                    status.conditions = vec![];
                }
                None => {
                    status.phase = Some(RunPhase::Pending);
                    if status.reason.as_deref() != Some("OwnerLost") {
                        status.reason = Some("Unschedulable".into());
                    }
                    status.message = bounded_message(&format!(
                        "waiting for a ready {} Pod with free capacity",
                        run.runtime
                    ));
                }
            }
            if status != run.status {
                ops.push(Op::Status {
                    namespace: run.namespace.clone(),
                    name: run.name.clone(),
                    status: Box::new(status),
                });
            }
        }
    }
    ops
}

#[cfg(test)]
mod tests;
