//! The embedded control plane's share of a pass: the snapshot it hands to
//! the core's one decision pass ([`kruntimes_core::pass::decide`]), the
//! operations it carries out on its state, then the owner's steps it takes
//! on behalf of each living runtimed and the release of orphaned
//! registrations.

use std::time::{Duration, Instant};

use kruntimes_api::lifecycle::owner::{self, Step};
use kruntimes_api::lifecycle::{self, Stop, Transition};
use kruntimes_api::requests::assign_request;
use kruntimes_api::table;
use kruntimes_core::pass::{self, Op, PodFacts, RunFacts};
use kruntimes_core::pool::Demand;
use kruntimes_core::scheduler::{Capacity, Framework};

use super::{Action, Controller, InFlight, PodState, RunState};

/// The embedded stack's one pool: every runtimed serves every Runtime name.
const POOL: &str = "";

/// Instances starting at once (asked for, or started and not yet
/// reporting their table).
pub(super) const MAX_STARTING: u32 = 4;

impl Controller {
    /// One decision pass over every Run, then the owners' steps. An owner
    /// step that changes a Run (it ended, or was released and forgotten)
    /// may free capacity: the pass then runs again, so a waiting Run takes
    /// it now rather than on the next input (a few rounds at most). Then
    /// the pool follows the last round's demand.
    pub(super) fn pass(&mut self, now: Instant) -> Vec<Action> {
        let mut actions = Vec::new();
        let mut demand = None;
        for _ in 0..4 {
            let (changed, d) = self.round(now, &mut actions);
            demand = d;
            if !changed {
                break;
            }
        }
        self.release_orphans(&mut actions);
        if let Some(demand) = demand {
            self.resize(&demand, now, &mut actions);
        }
        actions
    }

    /// The core's pass and the owners' steps once; whether an owner step
    /// changed a Run, and what the pool's instances hold after the pass
    /// (none while placement is held).
    fn round(&mut self, now: Instant, actions: &mut Vec<Action>) -> (bool, Option<Demand>) {
        let hold = self.placement_held(now);
        let (uids, snapshot) = self.snapshot(now, hold);
        let plan = pass::decide(&snapshot, &Framework::default());
        self.memo = plan.memo;
        let demand = (!hold).then(|| plan.demand.get(POOL).copied().unwrap_or_default());
        for op in plan.ops {
            match op {
                // Every Run of the store carries its finalizer.
                Op::AddFinalizer { .. } => {}
                Op::Delete { run } => {
                    if let Some(state) = self.runs.get_mut(&uids[run]) {
                        state.expired = true;
                        actions.push(Action::Delete {
                            namespace: state.run.namespace_or_default().to_owned(),
                            name: state.run.name_str().to_owned(),
                        });
                    }
                }
                // No living owner will release it: forget it.
                Op::RemoveFinalizer { run } => {
                    self.runs.remove(&uids[run]);
                }
                Op::Status {
                    run,
                    transition,
                    bind,
                } => {
                    let backoff = self.retry_backoff;
                    let Some(state) = self.runs.get_mut(&uids[run]) else {
                        continue;
                    };
                    if let Some(owner) = bind {
                        tracing::info!(uid = %uids[run], pod = %owner.pod, attempt = transition.attempt, "run scheduled");
                        state.owner = Some(owner);
                        state.retry_at = None;
                        state.assigned_at = Some(now);
                    }
                    set(state, transition, now, backoff);
                }
            }
        }
        let mut seen = std::collections::BTreeSet::new();
        let mut changed = false;
        for run in plan.owned {
            if seen.insert(run) {
                changed |= self.owner_steps(&uids[run], now, actions);
            }
        }
        (changed, demand)
    }

    /// Sizes the pool by `demand` (the operator's rules for a Runtime's
    /// Deployment): asks for the instances it lacks, unless a start failed
    /// moments ago, and retires idle ones it has beyond its size — those
    /// that own no Run that has not ended, and hold no registration and no
    /// release in flight — newest first. A retired instance takes no new Run from this pass on.
    fn resize(&mut self, demand: &Demand, now: Instant, actions: &mut Vec<Action>) {
        let Some(pool) = self.pool.as_mut() else {
            return;
        };
        let spec = pool.cfg.spec;
        if let Some(r) = pool.sizer.step(&spec, demand, pool.cfg.capacity.runs, now) {
            tracing::info!(
                from = r.from,
                to = r.to,
                busy = demand.busy,
                idle = demand.idle,
                "resizing the runtimed pool"
            );
        }
        let asked = pool.sizer.asked();
        let staying = self.pods.values().filter(|p| !p.retiring).count();
        let staying = u32::try_from(staying)
            .unwrap_or(u32::MAX)
            .saturating_add(pool.starting);
        if asked > staying {
            if pool.blocked_until.is_some_and(|t| now < t) {
                return;
            }
            pool.blocked_until = None;
            // A few at a time: instances started together share the cores
            // and all come up late; started in turn, the first take Runs
            // while the next start.
            let connecting = self
                .pods
                .values()
                .filter(|p| p.uid.is_none() && !p.retiring)
                .count();
            let in_flight = pool
                .starting
                .saturating_add(u32::try_from(connecting).unwrap_or(u32::MAX));
            let count = (asked - staying).min(MAX_STARTING.saturating_sub(in_flight));
            if count > 0 {
                pool.starting += count;
                actions.push(Action::StartInstances { count });
            }
            return;
        }
        let surplus = (staying - asked) as usize;
        if surplus == 0 {
            return;
        }
        let mut idle: Vec<String> = self
            .pods
            .iter()
            .filter(|(name, p)| {
                !p.retiring
                    && p.entries.is_empty()
                    && !self.runs.values().any(|r| {
                        !r.life.phase.is_terminal()
                            && r.owner.as_ref().is_some_and(|o| o.pod == **name)
                    })
                    && !self.releasing.iter().any(|(pod, _)| pod == *name)
            })
            .map(|(name, _)| name.clone())
            .collect();
        // Newest first: `runtimed-10` after `runtimed-9`.
        idle.sort_by(|a, b| (b.len(), b).cmp(&(a.len(), a)));
        for name in idle.into_iter().take(surplus) {
            if let Some(p) = self.pods.get_mut(&name) {
                p.retiring = true;
            }
            actions.push(Action::StopInstance { pod: name });
        }
    }

    /// Whether placement still waits for every runtimed's first table (or
    /// the start-up hold to pass).
    fn placement_held(&mut self, now: Instant) -> bool {
        if let Some(until) = self.hold_until {
            if now < until && self.pods.values().any(|p| p.uid.is_none()) {
                return true;
            }
            self.hold_until = None;
        }
        false
    }

    /// The core's snapshot of the state, with the UID of each Run by index.
    fn snapshot(&self, now: Instant, hold_placement: bool) -> (Vec<String>, pass::Snapshot) {
        let uids: Vec<String> = self.runs.keys().cloned().collect();
        let runs = self
            .runs
            .values()
            .map(|r| RunFacts {
                uid: r.uid().to_owned(),
                namespace: r.run.namespace_or_default().to_owned(),
                name: r.run.name_str().to_owned(),
                runtime: r.run.spec.runtime.clone(),
                labels: r.run.metadata.labels.clone().unwrap_or_default(),
                pool: Ok(POOL.to_owned()),
                mode: r.mode.clone(),
                life: r.life,
                message: r.message.clone(),
                max_retries: r.run.spec.retry_policy.max_retries,
                termination: r.run.termination(),
                timeout: r.run.spec.timeout,
                age: now.duration_since(r.created),
                assigned_for: r.assigned_at.map(|t| now.duration_since(t)),
                created: r.seq,
                owner: r.owner.clone(),
                deleting: r.deleting,
                has_finalizer: true,
                backing_off: r.retry_at.is_some_and(|t| t > now),
                requests: r.run.requests().unwrap_or_default(),
                priority: r.run.priority(),
                affinity: r.run.spec.affinity.clone().unwrap_or_default(),
                ttl_after_finished: r.run.spec.ttl_seconds_after_finished,
                // Asked for once: the store drops it, or (a manifest of the
                // user's, which krt up never edits) it stays.
                finished_for: r
                    .finished_at
                    .filter(|_| !r.expired)
                    .map(|t| now.duration_since(t)),
            })
            .collect();
        let pods = self.pods.values().map(|p| self.pod_facts(p, now)).collect();
        // What one more instance would offer, so the demand counts the Runs
        // it would take.
        let pools = self
            .pool
            .iter()
            .map(|p| (POOL.to_owned(), p.cfg.capacity.clone()))
            .collect();
        (
            uids,
            pass::Snapshot {
                runs,
                pods,
                hold_placement,
                pools,
                memo: self.memo.clone(),
            },
        )
    }

    /// A runtimed as the core sees it: ready once its watch is connected,
    /// alive until it has been away longer than the grace period.
    fn pod_facts(&self, p: &PodState, now: Instant) -> PodFacts {
        let away = !p.connected
            && p.lost_at
                .is_some_and(|t| now.duration_since(t) >= self.owner_grace);
        PodFacts {
            name: p.cfg.name.clone(),
            uid: p.uid.clone().unwrap_or_default(),
            pool: POOL.to_owned(),
            ready: p.connected && p.uid.is_some() && !p.retiring,
            alive: p.uid.is_some() && !away,
            capacity: Capacity {
                runs: p.cfg.capacity,
                resources: p.cfg.resources.clone(),
            },
        }
    }

    /// What the owner does about `uid`, carried out on its behalf; whether
    /// it changed the Run's life or forgot the Run.
    fn owner_steps(&mut self, uid: &str, now: Instant, actions: &mut Vec<Action>) -> bool {
        let Some(run) = self.runs.get(uid) else {
            return false;
        };
        let Some(o) = run.owner.clone() else {
            return false;
        };
        let Some(pod) = self.pods.get(&o.pod) else {
            return false;
        };
        if !pod.connected {
            return false;
        }
        let entry = pod.entries.get(uid);
        let local = entry.map(table::local);
        let outcome = entry
            .filter(|e| e.attempt == run.life.attempt)
            .and_then(|e| e.task.as_ref());
        let ended_task = outcome.and_then(|t| kruntimes_api::TaskStatus::of(t, run.life.attempt));
        let artifacts = entry
            .filter(|e| e.attempt == run.life.attempt)
            .and_then(|e| e.export.as_ref())
            .map(kruntimes_api::artifact::status_artifacts)
            .unwrap_or_default();
        // A step in flight is decided about again once the owner's table
        // reflects it (or its RPC failed).
        let settled = match run.in_flight {
            Some(InFlight::Register { attempt, done }) => {
                done && local.as_ref().is_some_and(|l| l.attempt == attempt)
            }
            // Decided again once answered: the registration is gone, or the
            // release failed and is tried again. A drain, once the table
            // shows how it ended.
            Some(InFlight::Release { done, drain, ok }) => {
                done && (!drain || !ok || local.as_ref().is_none_or(|l| l.exported))
            }
            None => true,
        };
        if !settled {
            return false;
        }
        let Some(rules) = run.rules() else {
            return false;
        };
        let facts = owner::Facts {
            mine: true,
            pod_gone: false,
            life: run.life,
            rules,
            deleting: run.deleting,
            has_finalizer: true,
        };
        let steps = owner::decide(&facts, local.as_ref());
        let Some(run) = self.runs.get_mut(uid) else {
            return false;
        };
        run.in_flight = None;
        if ended_task.is_some() && !run.life.phase.is_terminal() {
            run.task = ended_task;
        }
        if !artifacts.is_empty() && !run.life.phase.is_terminal() {
            run.artifacts = artifacts;
        }
        let before = run.life;
        for step in steps {
            match step {
                Step::Report(t) => {
                    // Placed back by its owner (a task to retry): after a
                    // backoff.
                    let backoff = lifecycle::retry_backoff(t.attempt);
                    set(run, t, now, backoff);
                }
                Step::Register => {
                    let attempt = run.life.attempt;
                    run.in_flight = Some(InFlight::Register {
                        attempt,
                        done: false,
                    });
                    // Only Runs of a mode runtimed hosts are ever placed.
                    if let Some(request) = assign_request(&run.run, attempt) {
                        actions.push(Action::Assign {
                            pod: o.pod.clone(),
                            request: Box::new(request),
                        });
                    }
                    // What follows depends on the outcome.
                    return run.life != before;
                }
                Step::Release(stop) => {
                    run.in_flight = Some(InFlight::Release {
                        done: false,
                        drain: stop == Stop::Drain,
                        ok: false,
                    });
                    actions.push(release(&o.pod, uid, stop));
                    return run.life != before;
                }
                Step::Kill => {
                    run.in_flight = Some(InFlight::Release {
                        done: false,
                        drain: false,
                        ok: false,
                    });
                    actions.push(Action::Release {
                        pod: o.pod.clone(),
                        run_uid: uid.to_owned(),
                        cancel: true,
                        keep: true,
                    });
                    return run.life != before;
                }
                Step::RemoveFinalizer => {
                    self.runs.remove(uid);
                    return true;
                }
            }
        }
        run.life != before
    }

    /// Releases registrations a Pod holds for Runs it does not own.
    fn release_orphans(&mut self, actions: &mut Vec<Action>) {
        for (name, pod) in &self.pods {
            if !pod.connected {
                continue;
            }
            for uid in pod.entries.keys() {
                let owned = self
                    .runs
                    .get(uid)
                    .is_some_and(|r| r.owned_by(name, pod.uid.as_deref()));
                let key = (name.clone(), uid.clone());
                if owned || self.releasing.contains(&key) {
                    continue;
                }
                actions.push(release(name, uid, Stop::Cancel));
                self.releasing.insert(key);
            }
        }
    }

    /// The Runs that hold capacity on `p`.
    fn holding<'a>(&'a self, p: &'a PodState) -> impl Iterator<Item = &'a RunState> + 'a {
        self.runs
            .values()
            .filter(|r| r.owned_by(&p.cfg.name, p.uid.as_deref()) && r.life.phase.holds_capacity())
    }

    /// How many Runs hold capacity on `p`.
    pub(super) fn used(&self, p: &PodState) -> u32 {
        u32::try_from(self.holding(p).count()).unwrap_or(u32::MAX)
    }

    /// What `p`'s resources still offer beside its Runs' requests.
    pub(super) fn free(&self, p: &PodState) -> std::collections::BTreeMap<String, u64> {
        let mut requested = kruntimes_core::Resources::new();
        for r in self.holding(p) {
            requested.add(&r.run.requests().unwrap_or_default());
        }
        p.cfg
            .resources
            .iter()
            .map(|(name, total)| (name.to_owned(), total.saturating_sub(requested.get(name))))
            .collect()
    }
}

/// Takes a transition; a Run back in `Pending` loses its owner and waits
/// `backoff` before it is placed again.
pub(super) fn set(run: &mut RunState, t: Transition, now: Instant, backoff: Duration) {
    if t.life() != run.life {
        tracing::info!(uid = %run.uid(), phase = ?t.phase, reason = %t.reason, attempt = t.attempt, "run status");
    }
    if t.clears_assignment() && run.owner.take().is_some() {
        run.retry_at = Some(now + backoff);
        run.assigned_at = None;
        // A step sent to the old owner no longer holds the Run back; what
        // it left there is released as an orphan.
        run.in_flight = None;
    }
    if t.phase.is_terminal() && !run.life.phase.is_terminal() {
        run.finished_at = Some(now);
    }
    run.life = t.life();
    run.message = kruntimes_api::bounded_message(&t.message).unwrap_or_default();
}

/// Releases a Run's registration or session on a Pod.
fn release(pod: &str, uid: &str, stop: Stop) -> Action {
    Action::Release {
        pod: pod.to_owned(),
        run_uid: uid.to_owned(),
        cancel: stop == Stop::Cancel,
        keep: false,
    }
}
