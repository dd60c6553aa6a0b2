//! The operator's share of a pass in Kubernetes mode: the snapshot it hands
//! to the core's one decision pass ([`kruntimes_core::pass::decide`], the
//! same the embedded control plane runs) and the API writes the core's
//! operations become. Pure: views of Runs, Pods and Runtimes in, writes
//! out. The adapter ([`super::run`]) guards each write with the
//! `resourceVersion` it was decided on, so a decision made on stale views
//! fails and is made again on fresh ones.
//!
//! What is Kubernetes-specific stays here: finalizers, the namespaces a
//! Runtime is looked up in, and the status object (endpoint, assignment,
//! conditions) a transition is written into.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kruntimes_api::lifecycle::{Life, Phase, Transition};
use kruntimes_api::{Affinity, Endpoint, ModeKind, RunStatus, TerminationMode, bounded_message};
use kruntimes_core::Resources;
use kruntimes_core::pass::{self, OwnerRef, PodFacts, Report, RunFacts};
use kruntimes_core::pool::Demand;
use kruntimes_core::scheduler::{Capacity, Framework, Labels};

/// A Run as the operator sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct RunView {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// UID.
    pub uid: String,
    /// `metadata.labels`.
    pub labels: Labels,
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
    /// `spec.ttlSecondsAfterFinished`.
    pub ttl_after_finished: Option<u32>,
    /// `spec.resources.requests` (empty when invalid: the mode says why).
    pub requests: Resources,
    /// `spec.priority`.
    pub priority: i32,
    /// `spec.affinity`.
    pub affinity: Affinity,
    /// `metadata.deletionTimestamp` is set.
    pub deleting: bool,
    /// Carries the cleanup finalizer.
    pub has_finalizer: bool,
    /// Current status.
    pub status: RunStatus,
}

impl RunView {
    fn life(&self) -> Life {
        self.status.life()
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
    /// Carries the operator's low `pod-deletion-cost`: removed first when
    /// its pool shrinks.
    pub delete_first: bool,
}

/// A Runtime pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeInfo {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// What each of its Pods offers.
    pub capacity: Capacity,
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
    /// Delete the Run (its `ttlSecondsAfterFinished` passed); only the
    /// object of this UID.
    Delete {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
        /// UID.
        uid: String,
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

/// The writes of one pass and the scheduler's counts.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    /// The writes, in order.
    pub ops: Vec<Op>,
    /// Scheduling counts (metrics).
    pub report: Report,
    /// Per Runtime (`namespace/name`), what its Pods hold and which waiting
    /// Runs one more Pod would take.
    pub demand: BTreeMap<String, Demand>,
    /// For the next pass: the pools whose waiting Runs need no cycle until
    /// they change.
    pub memo: BTreeMap<String, pass::PoolMemo>,
}

/// Key of a Runtime (`namespace/name`), also the pool of its Pods.
fn runtime_key(ns: &str, name: &str) -> String {
    format!("{ns}/{name}")
}

/// The public URL of a Run.
pub fn endpoint(run: &RunView, s: &Settings) -> Endpoint {
    let path = kruntimes_api::run::public_path(
        &run.namespace,
        &run.runtime,
        &run.uid,
        run.mode.clone().unwrap_or(ModeKind::Function),
    );
    Endpoint::at(&s.gateway_url, &path, s.ca_bundle.clone())
}

/// The status after a transition: phase, reason, attempt and message from
/// the core, the assignment it binds or clears, the endpoint of a Run that
/// has one; the operator's writes always clear the owner's `Ready`
/// condition.
fn transitioned(
    run: &RunView,
    t: &Transition,
    bind: Option<&OwnerRef>,
    s: &Settings,
    now: SystemTime,
) -> RunStatus {
    let mut status = run.status.clone();
    status.phase = Some(t.phase);
    status.reason = Some(t.reason.as_str().to_owned());
    status.message = bounded_message(&t.message);
    if t.attempt > 0 {
        status.attempt = Some(t.attempt as i64);
    }
    if let Some(owner) = bind {
        status.assigned_pod = Some(owner.pod.clone());
        status.assigned_pod_uid = Some(owner.pod_uid.clone());
        status.scheduled_time = Some(Time(
            Timestamp::try_from(now).unwrap_or(Timestamp::UNIX_EPOCH),
        ));
    } else if t.clears_assignment() {
        status.assigned_pod = None;
        status.assigned_pod_uid = None;
        status.scheduled_time = None;
    }
    status.conditions = vec![];
    if run.mode.is_ok() {
        status.endpoint = Some(endpoint(run, s));
    }
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

/// The core's snapshot of the views.
fn snapshot(
    runs: &[RunView],
    pods: &[PodInfo],
    runtimes: &[RuntimeInfo],
    s: &Settings,
    now: SystemTime,
    memo: &BTreeMap<String, pass::PoolMemo>,
) -> pass::Snapshot {
    let known: BTreeSet<(&str, &str)> = runtimes
        .iter()
        .map(|r| (r.namespace.as_str(), r.name.as_str()))
        .collect();
    let capacity: BTreeMap<String, &Capacity> = runtimes
        .iter()
        .map(|r| (runtime_key(&r.namespace, &r.name), &r.capacity))
        .collect();
    let runs = runs
        .iter()
        .map(|r| {
            let life = r.life();
            // A Run its owner placed back in `Pending` (a task to retry)
            // still names that owner until it is placed again: it has none.
            let owner = match (&r.status.assigned_pod, &r.status.assigned_pod_uid) {
                (Some(pod), Some(uid)) if life.phase != Phase::Pending => Some(OwnerRef {
                    pod: pod.clone(),
                    pod_uid: uid.clone(),
                }),
                _ => None,
            };
            // ... and waits out its backoff from the owner's report.
            let backing_off = life.phase == Phase::Pending
                && r.status.assigned_pod.is_some()
                && r.status
                    .conditions
                    .iter()
                    .find(|c| c.type_ == "Ready")
                    .is_some_and(|c| {
                        let since = now
                            .duration_since(SystemTime::from(c.last_transition_time.0))
                            .unwrap_or(Duration::ZERO);
                        since < kruntimes_api::lifecycle::retry_backoff(life.attempt)
                    });
            let age = now.duration_since(r.created).unwrap_or(Duration::ZERO);
            let finished_for = r.status.completion_time.as_ref().map(|t| {
                now.duration_since(SystemTime::from(t.0))
                    .unwrap_or(Duration::ZERO)
            });
            let assigned_for = r.status.scheduled_time.as_ref().map(|t| {
                now.duration_since(SystemTime::from(t.0))
                    .unwrap_or(Duration::ZERO)
            });
            RunFacts {
                uid: r.uid.clone(),
                namespace: r.namespace.clone(),
                name: r.name.clone(),
                runtime: r.runtime.clone(),
                labels: r.labels.clone(),
                pool: pass::resolve_pool(
                    &r.namespace,
                    &r.runtime,
                    |ns, rt| known.contains(&(ns, rt)),
                    &s.system_namespace,
                ),
                mode: r.mode.clone(),
                life: r.life(),
                message: r.status.message.clone().unwrap_or_default(),
                max_retries: r.max_retries,
                termination: r.termination,
                timeout: r.timeout,
                age,
                assigned_for,
                created: r
                    .created
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() as u64),
                owner,
                deleting: r.deleting,
                has_finalizer: r.has_finalizer,
                backing_off,
                requests: r.requests.clone(),
                priority: r.priority,
                affinity: r.affinity.clone(),
                ttl_after_finished: r.ttl_after_finished,
                finished_for,
            }
        })
        .collect();
    let pods = pods
        .iter()
        .map(|p| {
            let pool = runtime_key(&p.namespace, &p.runtime);
            PodFacts {
                name: p.name.clone(),
                uid: p.uid.clone(),
                capacity: capacity
                    .get(&pool)
                    .map(|c| (*c).clone())
                    .unwrap_or_default(),
                // A Pod of no known Runtime takes nothing (capacity 0).
                ready: p.ready && p.address.is_some(),
                alive: !p.terminating,
                pool,
            }
        })
        .collect();
    pass::Snapshot {
        runs,
        pods,
        hold_placement: false,
        pools: capacity.into_iter().map(|(k, c)| (k, c.clone())).collect(),
        memo: memo.clone(),
    }
}

/// Every write the current views call for, in the core's order (creation
/// time, then namespace and name), and the scheduler's counts. `memo` is
/// what the previous pass left ([`Plan::memo`]; empty: every waiting Run
/// gets a cycle).
pub fn reconcile(
    runs: &[RunView],
    pods: &[PodInfo],
    runtimes: &[RuntimeInfo],
    s: &Settings,
    now: SystemTime,
    memo: &BTreeMap<String, pass::PoolMemo>,
) -> Plan {
    let snap = snapshot(runs, pods, runtimes, s, now, memo);
    let plan = pass::decide(&snap, &Framework::default());
    let mut ops = Vec::new();
    let mut written = BTreeSet::new();
    for op in &plan.ops {
        match op {
            pass::Op::AddFinalizer { run } => ops.push(Op::AddFinalizer {
                namespace: runs[*run].namespace.clone(),
                name: runs[*run].name.clone(),
            }),
            pass::Op::RemoveFinalizer { run } => ops.push(Op::RemoveFinalizer {
                namespace: runs[*run].namespace.clone(),
                name: runs[*run].name.clone(),
            }),
            pass::Op::Delete { run } => ops.push(Op::Delete {
                namespace: runs[*run].namespace.clone(),
                name: runs[*run].name.clone(),
                uid: runs[*run].uid.clone(),
            }),
            pass::Op::Status {
                run,
                transition,
                bind,
            } => {
                let r = &runs[*run];
                written.insert(*run);
                ops.extend(status_op(
                    r,
                    transitioned(r, transition, bind.as_ref(), s, now),
                ));
            }
        }
    }
    // A Run its owner drives keeps a current endpoint (a rotated CA bundle,
    // a new gateway URL); everything else of its status is the owner's. A
    // task's endpoint is where its artifacts are read.
    for &i in &plan.owned {
        let r = &runs[i];
        let reachable = r.mode.is_ok();
        if !reachable || r.deleting || written.contains(&i) || r.life().phase.is_terminal() {
            continue;
        }
        let mut status = r.status.clone();
        status.endpoint = Some(endpoint(r, s));
        ops.extend(status_op(r, status));
    }
    Plan {
        ops,
        report: plan.report,
        demand: plan.demand,
        memo: plan.memo,
    }
}

#[cfg(test)]
mod tests;
