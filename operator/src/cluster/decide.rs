//! The operator's decisions in Kubernetes mode. Pure: views of Runs, Pods
//! and Runtimes in, operations out. The adapter ([`super::run`]) turns the
//! operations into API calls guarded by `resourceVersion` preconditions, so a
//! decision made on stale views fails and is made again on fresh ones.
//!
//! Every phase change comes from the lifecycle core: [`control::decide`]
//! for each Run (validation, `spec.timeout`, owner loss, termination before
//! a Pod), and [`lifecycle::apply`] with the scheduler's outcome. The owner
//! runtimed drives the rest with [`kruntimes_api::lifecycle::owner`]. This
//! module adds only what is Kubernetes-specific: finalizers, the Runtime a
//! Run resolves to, and the status object the transitions are written into.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use kruntimes_api::lifecycle::{self, Event, Life, Rules, Transition, control};
use kruntimes_api::{Endpoint, ModeKind, RunStatus, TerminationMode, bounded_message};

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
    /// `spec.timeout` in seconds.
    pub timeout: Option<u32>,
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
    fn life(&self) -> Life {
        Life::of(Some(&self.status))
    }

    fn rules(&self, mode: ModeKind) -> Rules {
        Rules {
            mode,
            max_retries: self.max_retries,
            termination: self.termination,
        }
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
    let (collection, suffix) = match run.mode {
        Ok(ModeKind::Session) => ("sessions", ""),
        _ => ("runs", ":invoke"),
    };
    let path = format!(
        "/v1/namespaces/{}/runtimes/{}/{collection}/{}{suffix}",
        run.namespace, run.runtime, run.uid
    );
    Endpoint::at(&s.gateway_url, &path, s.ca_bundle.clone())
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

/// The status after an operator transition: phase, reason, attempt and
/// message from the core; a Run back in `Pending` loses its assignment; the
/// operator's writes always clear the owner's `Ready` condition.
fn transitioned(status: &RunStatus, t: &Transition) -> RunStatus {
    let mut status = status.clone();
    status.phase = Some(t.phase);
    status.reason = Some(t.reason.as_str().to_owned());
    status.message = bounded_message(&t.message);
    if t.attempt > 0 {
        status.attempt = Some(t.attempt as i64);
    }
    if t.clears_assignment() {
        status.assigned_pod = None;
        status.assigned_pod_uid = None;
    }
    status.conditions = vec![];
    // completionTime is set by the adapter (it knows the clock).
    status
}

fn status_op(run: &RunView, status: RunStatus) -> Option<Op> {
    (status != run.status).then(|| Op::Status {
        namespace: run.namespace.clone(),
        name: run.name.clone(),
        status: Box::new(status),
    })
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
        let life = run.life();
        if run.deleting {
            // The living owner releases the Run and its finalizer; without
            // one, nobody else will.
            if run.has_finalizer && !owner_alive(run, pods) {
                ops.push(Op::RemoveFinalizer {
                    namespace: run.namespace.clone(),
                    name: run.name.clone(),
                });
            }
            continue;
        }
        if !run.has_finalizer && !life.phase.is_terminal() {
            ops.push(Op::AddFinalizer {
                namespace: run.namespace.clone(),
                name: run.name.clone(),
            });
        }
        let owner = match (&run.status.assigned_pod, &run.status.assigned_pod_uid) {
            (Some(pod), Some(_)) if !owner_alive(run, pods) => control::Owner::Lost { pod },
            (Some(_), Some(_)) => control::Owner::Alive,
            _ => control::Owner::Unassigned,
        };
        let facts = control::Facts {
            life,
            mode: run.mode.as_ref().copied().map_err(String::as_str),
            max_retries: run.max_retries,
            termination: run.termination,
            timeout: run.timeout,
            age: now.duration_since(run.created).unwrap_or(Duration::ZERO),
            owner,
        };
        match control::decide(&facts) {
            control::Decision::Nothing => {}
            control::Decision::Apply(t) => {
                ops.extend(status_op(run, transitioned(&run.status, &t)));
            }
            control::Decision::OwnerDrives => {
                // The owner drives the Run from here; the operator only keeps
                // the endpoint current (a rotated CA bundle, a new URL).
                let mut status = run.status.clone();
                status.endpoint = Some(endpoint(run, s));
                ops.extend(status_op(run, status));
            }
            control::Decision::NeedsPod => match resolve_runtime(run, &runtimes, s) {
                Some(rt) => pending
                    .entry(runtime_key(&rt.namespace, &rt.name))
                    .or_default()
                    .push(run),
                None => {
                    let searched = format!("namespace {} or {}", run.namespace, s.system_namespace);
                    let event = Event::RuntimeMissing {
                        runtime: &run.runtime,
                        searched: &searched,
                    };
                    if let Ok(mode) = run.mode
                        && let Some(t) = lifecycle::apply(&life, &run.rules(mode), &event)
                    {
                        let mut status = transitioned(&run.status, &t);
                        status.endpoint = Some(endpoint(run, s));
                        ops.extend(status_op(run, status));
                    }
                }
            },
        }
    }

    for (key, waiting) in pending {
        if let Some(rt) = runtimes.get(&key) {
            place(rt, waiting, &runs, pods, s, &mut ops);
        }
    }
    ops
}

/// Places the Runs waiting for one Runtime: sessions first (they need a
/// whole idle Pod), then oldest first.
fn place(
    rt: &RuntimeInfo,
    mut waiting: Vec<&RunView>,
    runs: &[&RunView],
    pods: &[PodInfo],
    s: &Settings,
    ops: &mut Vec<Op>,
) {
    let pods: Vec<&PodInfo> = pods
        .iter()
        .filter(|p| p.namespace == rt.namespace && p.runtime == rt.name)
        .collect();
    let views: Vec<PodView> = pods
        .iter()
        .map(|p| {
            let holders: Vec<&&RunView> = runs
                .iter()
                .filter(|r| {
                    r.status.assigned_pod_uid.as_deref() == Some(p.uid.as_str())
                        && r.life().phase.holds_capacity()
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
        let Ok(mode) = run.mode else {
            continue;
        };
        let key = format!("{}/{}", run.namespace, run.name);
        let pod = placed
            .get(&key)
            .and_then(|name| pods.iter().find(|p| &p.name == name));
        let event = match pod {
            Some(p) => Event::Assigned { pod: &p.name },
            None => Event::Unplaced {
                runtime: &run.runtime,
            },
        };
        let Some(t) = lifecycle::apply(&run.life(), &run.rules(mode), &event) else {
            continue;
        };
        let mut status = transitioned(&run.status, &t);
        status.endpoint = Some(endpoint(run, s));
        if let Some(p) = pod {
            status.assigned_pod = Some(p.name.clone());
            status.assigned_pod_uid = Some(p.uid.clone());
        }
        ops.extend(status_op(run, status));
    }
}

#[cfg(test)]
mod tests;
