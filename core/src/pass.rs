//! The one decision pass of a control plane: from an immutable
//! [`Snapshot`] of Runs and Runtime Pods to the [`Op`]s that move them on.
//!
//! Both control planes run it — the embedded one of `krt up` and the
//! Kubernetes operator. Each builds the snapshot from what it observes
//! (its store and runtimed tables, or its watch caches) and carries the
//! operations out (state changes and Assign RPCs, or API writes guarded by
//! `resourceVersion`); neither decides anything itself.
//!
//! For each Run, in creation order: a Run being deleted loses its
//! finalizer once no living owner can release it; a live Run gets its
//! finalizer; then [`control::decide`] (validation, `spec.timeout`, owner
//! loss, termination before a Pod). The Runs that need a Pod then go
//! through the [`scheduler`](crate::scheduler) in queue order, each placed
//! Run reserved at once so a burst never over-commits a Pod.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

mod memo;
pub use memo::{PoolMemo, Wake};

use crate::lifecycle::{self, Event, Life, Rules, Transition, control};
use crate::pool::Demand;
use crate::scheduler::{
    self, Affinity, Candidate, Capacity, Framework, Holder, Labels, Node, Outcome,
};
use crate::{ModeKind, Resources, TerminationMode};

/// The Pod a Run is assigned to: its name and the instance (UID) it had at
/// assignment. A new Pod of the same name is not the owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnerRef {
    /// Pod name.
    pub pod: String,
    /// Pod UID at assignment.
    pub pod_uid: String,
}

/// A Run as a control plane observes it.
#[derive(Debug, Clone, PartialEq)]
pub struct RunFacts {
    /// UID.
    pub uid: String,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// `spec.runtime`.
    pub runtime: String,
    /// `metadata.labels` (what affinity terms select on).
    pub labels: Labels,
    /// The pool its Runtime resolves to, or where the Runtime was looked for
    /// in vain.
    pub pool: Result<String, String>,
    /// Its mode, or why the spec is invalid.
    pub mode: Result<ModeKind, String>,
    /// Phase, reason, attempt.
    pub life: Life,
    /// The message of its current status.
    pub message: String,
    /// `spec.retryPolicy.maxRetries`.
    pub max_retries: u32,
    /// `spec.termination.mode`.
    pub termination: Option<TerminationMode>,
    /// `spec.timeout` in seconds.
    pub timeout: Option<u32>,
    /// Time since creation.
    pub age: Duration,
    /// Time since it was assigned to its owner (`None`: unassigned, or not
    /// known).
    pub assigned_for: Option<Duration>,
    /// Creation order (smaller is older; ties go by namespace and name).
    pub created: u64,
    /// Its owner, when assigned.
    pub owner: Option<OwnerRef>,
    /// Being deleted.
    pub deleting: bool,
    /// Carries the cleanup finalizer (the embedded store's Runs always do).
    pub has_finalizer: bool,
    /// Waits out a backoff after owner loss: not placed in this pass.
    pub backing_off: bool,
    /// `spec.resources.requests`, in thousandths.
    pub requests: Resources,
    /// `spec.priority`.
    pub priority: i32,
    /// `spec.affinity`.
    pub affinity: Affinity,
    /// `spec.ttlSecondsAfterFinished`.
    pub ttl_after_finished: Option<u32>,
    /// Time since it reached its terminal phase (`None`: it has not, or
    /// that time is not known).
    pub finished_for: Option<Duration>,
}

impl RunFacts {
    fn rules(&self, mode: ModeKind) -> Rules {
        Rules {
            mode,
            max_retries: self.max_retries,
            termination: self.termination,
            retry_exit_codes: crate::lifecycle::ExitCodes::NONE,
        }
    }

    fn exclusive(&self) -> bool {
        self.mode.as_ref().is_ok_and(|m| m.exclusive())
    }
}

/// A Runtime Pod as a control plane observes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodFacts {
    /// Name.
    pub name: String,
    /// UID (instance).
    pub uid: String,
    /// Its pool.
    pub pool: String,
    /// Takes new Runs (ready, reachable).
    pub ready: bool,
    /// Still owns its Runs: exists, not being deleted, not unreachable past
    /// its grace period.
    pub alive: bool,
    /// What it offers.
    pub capacity: Capacity,
}

/// Everything one pass decides on.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Every Run.
    pub runs: Vec<RunFacts>,
    /// Every Runtime Pod.
    pub pods: Vec<PodFacts>,
    /// Decide everything but placement (the embedded control plane's
    /// start-up hold, until every runtimed reported its table).
    pub hold_placement: bool,
    /// What a fresh Pod of each pool offers (its Runtime's capacity), to
    /// tell whether a waiting Run would fit on one more Pod.
    pub pools: BTreeMap<String, Capacity>,
    /// What the previous pass left ([`Plan::memo`]): a pool it remembers
    /// unchanged gives its waiting Runs no cycle ([`memo`]). Empty: every
    /// waiting Run gets one.
    pub memo: BTreeMap<String, PoolMemo>,
}

impl Snapshot {
    /// What the next pass observes once an adapter carried `plan` out and
    /// every write landed: the transitions and binds taken, finalizers
    /// added, Runs deleted marked so, Runs whose finalizer went forgotten,
    /// the memo kept. For
    /// simulations of successive passes (tests, the scheduling bench).
    pub fn after(&self, plan: &Plan) -> Snapshot {
        let mut next = self.clone();
        let mut gone = BTreeSet::new();
        for op in &plan.ops {
            match op {
                Op::AddFinalizer { run } => next.runs[*run].has_finalizer = true,
                // Its owner releases it, then its finalizer goes.
                Op::Delete { run } => next.runs[*run].deleting = true,
                Op::RemoveFinalizer { run } => {
                    gone.insert(*run);
                }
                Op::Status {
                    run,
                    transition,
                    bind,
                } => {
                    let r = &mut next.runs[*run];
                    if bind.is_some() {
                        r.owner.clone_from(bind);
                    }
                    if transition.clears_assignment() {
                        r.owner = None;
                    }
                    r.life = transition.life();
                    r.message.clone_from(&transition.message);
                }
            }
        }
        next.runs = std::mem::take(&mut next.runs)
            .into_iter()
            .enumerate()
            .filter(|(i, _)| !gone.contains(i))
            .map(|(_, r)| r)
            .collect();
        next.memo.clone_from(&plan.memo);
        next
    }
}

/// One change, for the adapter to carry out. `run` indexes
/// [`Snapshot::runs`].
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    /// Add the cleanup finalizer.
    AddFinalizer {
        /// The Run.
        run: usize,
    },
    /// Remove the cleanup finalizer: no living owner will release the Run.
    RemoveFinalizer {
        /// The Run.
        run: usize,
    },
    /// Delete the Run: its `ttlSecondsAfterFinished` has passed since it
    /// ended.
    Delete {
        /// The Run.
        run: usize,
    },
    /// Take this transition; with `bind`, the Run is assigned to that Pod
    /// (a transition back to `Pending` clears the assignment).
    Status {
        /// The Run.
        run: usize,
        /// The transition.
        transition: Transition,
        /// The Pod it is bound to.
        bind: Option<OwnerRef>,
    },
}

/// Bounded counts of one pass, for metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// Scheduling cycles run.
    pub cycles: u64,
    /// Runs bound to a Pod.
    pub placed: u64,
    /// Pods turned away, by (plugin, rejection).
    pub rejections: BTreeMap<(&'static str, &'static str), u64>,
    /// Pools whose waiting Runs got cycles, by why ([`Wake`]).
    pub wakeups: BTreeMap<&'static str, u64>,
    /// Waiting Runs given no cycle: nothing in their pool changed since
    /// they were turned away.
    pub skipped: u64,
}

/// What a pass decided.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    /// The changes, in order.
    pub ops: Vec<Op>,
    /// Runs whose living owner drives them (their finalizer, release and
    /// registration are the owner's), including those bound in this pass.
    pub owned: Vec<usize>,
    /// Counts for metrics.
    pub report: Report,
    /// For the next pass's [`Snapshot::memo`].
    pub memo: BTreeMap<String, PoolMemo>,
    /// Per pool, what its Pods hold after the pass and which waiting Runs
    /// one more Pod would take (the pool's refill reads it).
    pub demand: BTreeMap<String, Demand>,
}

/// The pool a Run's Runtime resolves to: the Runtime of its own namespace,
/// else the system namespace's (`Err` names where it was looked for).
pub fn resolve_pool(
    namespace: &str,
    runtime: &str,
    exists: impl Fn(&str, &str) -> bool,
    system_namespace: &str,
) -> Result<String, String> {
    for ns in [namespace, system_namespace] {
        if exists(ns, runtime) {
            return Ok(format!("{ns}/{runtime}"));
        }
    }
    Err(format!("namespace {namespace} or {system_namespace}"))
}

/// The decision pass.
pub fn decide(snapshot: &Snapshot, framework: &Framework) -> Plan {
    let mut plan = Plan::default();
    let mut order: Vec<usize> = (0..snapshot.runs.len()).collect();
    order.sort_by(|a, b| {
        let (a, b) = (&snapshot.runs[*a], &snapshot.runs[*b]);
        (a.created, &a.namespace, &a.name, &a.uid).cmp(&(b.created, &b.namespace, &b.name, &b.uid))
    });
    let pods_by_uid: BTreeMap<&str, &PodFacts> =
        snapshot.pods.iter().map(|p| (p.uid.as_str(), p)).collect();
    let mut waiting = Vec::new();
    for i in order {
        let run = &snapshot.runs[i];
        let owner = owner_of(run, &pods_by_uid);
        let alive = owner == control::Owner::Alive;
        if run.deleting {
            if alive {
                plan.owned.push(i);
            } else if run.has_finalizer {
                plan.ops.push(Op::RemoveFinalizer { run: i });
            }
            continue;
        }
        if lifecycle::ttl_elapsed(run.life.phase, run.ttl_after_finished, run.finished_for) {
            plan.ops.push(Op::Delete { run: i });
            continue;
        }
        if !run.has_finalizer && !run.life.phase.is_terminal() {
            plan.ops.push(Op::AddFinalizer { run: i });
        }
        if alive {
            plan.owned.push(i);
        }
        let facts = control::Facts {
            life: run.life,
            mode: run.mode.as_ref().copied().map_err(String::as_str),
            max_retries: run.max_retries,
            termination: run.termination,
            timeout: run.timeout,
            age: run.age,
            assigned: run
                .owner
                .as_ref()
                .zip(run.assigned_for)
                .map(|(o, d)| (o.pod.as_str(), d)),
            owner,
        };
        match control::decide(&facts) {
            control::Decision::Nothing | control::Decision::OwnerDrives => {}
            control::Decision::Apply(t) => status(&mut plan, snapshot, i, t, None),
            control::Decision::NeedsPod => match &run.pool {
                Ok(_) if run.backing_off => {}
                Ok(_) => waiting.push(i),
                Err(searched) => {
                    let event = Event::RuntimeMissing {
                        runtime: &run.runtime,
                        searched,
                    };
                    if let Ok(mode) = run.mode
                        && let Some(t) = lifecycle::apply(&run.life, &run.rules(mode), &event)
                    {
                        status(&mut plan, snapshot, i, t, None);
                    }
                }
            },
        }
    }
    if !snapshot.hold_placement {
        let mut nodes = nodes_of(snapshot);
        let waiting_fresh = place(snapshot, framework, &waiting, &mut nodes, &mut plan);
        count_demand(&nodes, waiting_fresh, &mut plan);
    }
    plan
}

/// Whether the Pod a Run is assigned to is still its owner (`pods` by UID).
fn owner_of<'a>(run: &'a RunFacts, pods: &BTreeMap<&str, &PodFacts>) -> control::Owner<'a> {
    let Some(o) = &run.owner else {
        return control::Owner::Unassigned;
    };
    let alive = pods
        .get(o.pod_uid.as_str())
        .is_some_and(|p| p.name == o.pod && p.alive);
    if alive {
        control::Owner::Alive
    } else {
        control::Owner::Lost { pod: &o.pod }
    }
}

/// A status op, unless it changes nothing.
fn status(plan: &mut Plan, snapshot: &Snapshot, i: usize, t: Transition, bind: Option<OwnerRef>) {
    let run = &snapshot.runs[i];
    let message = crate::bounded_message(&t.message).unwrap_or_default();
    if bind.is_none() && t.life() == run.life && message == run.message {
        return;
    }
    plan.ops.push(Op::Status {
        run: i,
        transition: t,
        bind,
    });
}

/// The scheduler's view of the Pods: each with the Runs that hold capacity
/// on it.
fn nodes_of(snapshot: &Snapshot) -> scheduler::Snapshot {
    let mut nodes: Vec<scheduler::Node> = snapshot
        .pods
        .iter()
        .map(|p| {
            scheduler::Node::new(
                &p.name,
                &p.uid,
                &p.pool,
                p.ready && p.alive,
                p.capacity.clone(),
            )
        })
        .collect();
    let by_uid: BTreeMap<&str, usize> = snapshot
        .pods
        .iter()
        .enumerate()
        .map(|(i, p)| (p.uid.as_str(), i))
        .collect();
    for run in &snapshot.runs {
        if let Some(o) = &run.owner
            && run.life.phase.holds_capacity()
            && let Some(&n) = by_uid.get(o.pod_uid.as_str())
        {
            nodes[n].hold(Holder {
                namespace: run.namespace.clone(),
                labels: run.labels.clone(),
                requests: run.requests.clone(),
                exclusive: run.exclusive(),
                anti: run
                    .affinity
                    .required_anti()
                    .iter()
                    .map(|t| t.label_selector.clone())
                    .collect(),
            });
        }
    }
    scheduler::Snapshot::new(nodes)
}

/// Scheduling: one cycle per waiting Run, in queue order, reserving on
/// `nodes`. Returns the pool of each Run that found no Pod but would fit on
/// a fresh one, and whether it is exclusive.
fn place(
    snapshot: &Snapshot,
    framework: &Framework,
    waiting: &[usize],
    nodes: &mut scheduler::Snapshot,
    plan: &mut Plan,
) -> Vec<(String, bool)> {
    let mut waits = Waits::default();
    // Which pools' waiting Runs get cycles.
    let mut by_pool: BTreeMap<&str, Vec<memo::Waiting<'_>>> = BTreeMap::new();
    for &i in waiting {
        let run = &snapshot.runs[i];
        if let Ok(pool) = &run.pool {
            by_pool
                .entry(pool.as_str())
                .or_default()
                .push(memo::Waiting {
                    uid: &run.uid,
                    labels: memo::labels(&run.labels),
                    says_why: run.life.reason.is_some_and(|r| r.is_unplaced()),
                });
        }
    }
    let mut asleep: BTreeSet<&str> = BTreeSet::new();
    for (pool, runs) in &by_pool {
        let fingerprint = memo::fingerprint(nodes, pool);
        match memo::wake(snapshot.memo.get(*pool), fingerprint, runs.iter().copied()) {
            Some(why) => *plan.report.wakeups.entry(why.as_str()).or_default() += 1,
            None => {
                asleep.insert(pool);
            }
        }
    }
    let keys: Vec<scheduler::queue::QueueKey<'_>> = waiting
        .iter()
        .map(|i| {
            let r = &snapshot.runs[*i];
            scheduler::queue::QueueKey {
                priority: r.priority,
                waited: r.age,
                exclusive: r.exclusive(),
                created: r.created,
                key: &r.uid,
            }
        })
        .collect();
    for k in scheduler::queue::order(&keys) {
        let i = waiting[k];
        let run = &snapshot.runs[i];
        let (Ok(mode), Ok(pool)) = (&run.mode, &run.pool) else {
            continue;
        };
        let mode = *mode;
        let candidate = Candidate {
            namespace: &run.namespace,
            labels: &run.labels,
            runtime: &run.runtime,
            pool,
            exclusive: mode.exclusive(),
            requests: &run.requests,
            affinity: &run.affinity,
        };
        if asleep.contains(pool.as_str()) {
            // Turned away by this pool as it still is: no cycle. It still
            // counts for the pool's size.
            plan.report.skipped += 1;
            waits.record(snapshot, framework, &candidate, nodes, &run.uid);
            continue;
        }
        plan.report.cycles += 1;
        let rules = run.rules(mode);
        match framework.cycle(&candidate, nodes) {
            Outcome::Placed(n) => {
                let node = &nodes.nodes()[n];
                let event = Event::Assigned { pod: &node.name };
                if let Some(t) = lifecycle::apply(&run.life, &rules, &event) {
                    plan.report.placed += 1;
                    let bind = OwnerRef {
                        pod: node.name.clone(),
                        pod_uid: node.uid.clone(),
                    };
                    status(plan, snapshot, i, t, Some(bind));
                    plan.owned.push(i);
                    // The pool changed: the Runs it turned away before saw
                    // another pool, and must be tried again next pass.
                    if let Some(turned_away) = waits.turned_away.get_mut(pool) {
                        turned_away.clear();
                    }
                }
            }
            Outcome::Unplaced(u) => {
                for (r, n) in &u.rejections {
                    *plan
                        .report
                        .rejections
                        .entry((r.plugin, r.why.as_str()))
                        .or_default() += u64::from(*n);
                }
                waits.record(snapshot, framework, &candidate, nodes, &run.uid);
                let event = Event::Unplaced {
                    reason: u.reason,
                    message: &u.message,
                };
                if let Some(t) = lifecycle::apply(&run.life, &rules, &event) {
                    status(plan, snapshot, i, t, None);
                }
            }
        }
    }
    plan.memo = memo::after(nodes, waits.turned_away);
    waits.fresh
}

/// The Runs of a pass that wait on, with or without their cycle.
#[derive(Default)]
struct Waits {
    /// Pool and exclusivity of each one a fresh Pod would take (its pool's
    /// size counts them).
    fresh: Vec<(String, bool)>,
    /// Per pool, the Runs it turned away (UID → labels hash): the memo.
    turned_away: BTreeMap<String, BTreeMap<String, u64>>,
}

impl Waits {
    /// `run` (UID `uid`) waits on: counted for its pool's size if one more
    /// Pod would take it, remembered as turned away.
    fn record(
        &mut self,
        snapshot: &Snapshot,
        framework: &Framework,
        run: &Candidate<'_>,
        nodes: &scheduler::Snapshot,
        uid: &str,
    ) {
        if fits_fresh(snapshot, framework, run, nodes) {
            self.fresh.push((run.pool.to_owned(), run.exclusive));
        }
        self.turned_away
            .entry(run.pool.to_owned())
            .or_default()
            .insert(uid.to_owned(), memo::labels(run.labels));
    }
}

/// What each pool's Pods hold after the pass (the Runs it bound included),
/// whether or not a Run waited: a pool is never sized below its busy Pods.
fn count_demand(nodes: &scheduler::Snapshot, waiting_fresh: Vec<(String, bool)>, plan: &mut Plan) {
    for node in nodes.nodes() {
        let d = plan.demand.entry(node.pool.clone()).or_default();
        if !node.holders().is_empty() {
            d.busy += 1;
        } else if node.ready {
            d.idle += 1;
        }
    }
    for (pool, exclusive) in waiting_fresh {
        let d = plan.demand.entry(pool).or_default();
        if exclusive {
            d.waiting_sessions += 1;
        } else {
            d.waiting_shared += 1;
        }
    }
}

/// Whether `run` would fit on a fresh, ready Pod of its pool (one more
/// Pod would take it; a Run that fits no Pod of the pool never asks for
/// one).
fn fits_fresh(
    snapshot: &Snapshot,
    framework: &Framework,
    run: &Candidate<'_>,
    nodes: &scheduler::Snapshot,
) -> bool {
    let capacity = snapshot
        .pools
        .get(run.pool)
        .cloned()
        .or_else(|| nodes.pool(run.pool).next().map(|n| n.capacity.clone()));
    let Some(capacity) = capacity else {
        return false;
    };
    let fresh = Node::new("", "", run.pool, true, capacity);
    matches!(
        framework.cycle(run, &mut scheduler::Snapshot::new(vec![fresh])),
        Outcome::Placed(_)
    )
}

#[cfg(test)]
mod tests;
