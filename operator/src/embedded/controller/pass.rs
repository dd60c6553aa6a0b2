//! The decision pass that follows every input of the [`Controller`]: the
//! control plane's share of the lifecycle for each Run, the owner's share on
//! behalf of each living runtimed, the release of orphaned registrations,
//! then placement.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kruntimes_api::ModeKind;
use kruntimes_api::lifecycle::owner::{self, Local, Step};
use kruntimes_api::lifecycle::{self, Event, Phase, Stop, Transition, control};
use kruntimes_api::requests::assign_request;
use kruntimes_proto::ownership::v1 as own;

use super::{Action, Controller, InFlight, Owner, PodState, RunState};
use crate::scheduler::{PendingRun, PodView, schedule};

impl Controller {
    /// Whether `o` is still the Pod it was at assignment and not away past
    /// its grace period.
    fn owner_view<'a>(&self, o: &'a Owner, now: Instant) -> control::Owner<'a> {
        let Some(pod) = self.pods.get(&o.pod) else {
            return control::Owner::Lost { pod: &o.pod };
        };
        let same = pod.uid.as_deref() == Some(o.pod_uid.as_str());
        let away = !pod.connected
            && pod
                .lost_at
                .is_some_and(|t| now.duration_since(t) >= self.owner_grace);
        if same && !away {
            control::Owner::Alive
        } else {
            control::Owner::Lost { pod: &o.pod }
        }
    }

    /// One decision pass over every Run, then placement.
    pub(super) fn pass(&mut self, now: Instant) -> Vec<Action> {
        let mut actions = Vec::new();
        let uids: Vec<String> = self.runs.keys().cloned().collect();
        for uid in &uids {
            self.decide_run(uid, now, &mut actions);
        }
        self.release_orphans(&mut actions);
        self.place(now, &mut actions);
        actions
    }

    fn decide_run(&mut self, uid: &str, now: Instant, actions: &mut Vec<Action>) {
        let backoff = self.retry_backoff;
        let Some(run) = self.runs.get(uid) else {
            return;
        };
        let owner = match &run.owner {
            Some(o) => self.owner_view(o, now),
            None => control::Owner::Unassigned,
        };
        if run.deleting {
            // Released by a living owner first; otherwise forgotten.
            if !matches!(owner, control::Owner::Alive) {
                self.runs.remove(uid);
                return;
            }
        } else {
            let facts = control::Facts {
                life: run.life,
                mode: run.mode.as_ref().map(|m| *m).map_err(String::as_str),
                max_retries: run.run.spec.retry_policy.max_retries,
                termination: run.run.termination(),
                timeout: run.run.spec.timeout,
                age: now.duration_since(run.created),
                owner,
            };
            let decision = control::decide(&facts);
            let alive = matches!(owner, control::Owner::Alive);
            if let control::Decision::Apply(t) = decision
                && let Some(run) = self.runs.get_mut(uid)
            {
                set(run, t, now, backoff);
            }
            if !alive {
                return;
            }
        }
        self.owner_steps(uid, now, actions);
    }

    /// What the owner does about `uid`, carried out on its behalf.
    fn owner_steps(&mut self, uid: &str, now: Instant, actions: &mut Vec<Action>) {
        let Some(run) = self.runs.get(uid) else {
            return;
        };
        let Some(o) = run.owner.clone() else {
            return;
        };
        let Some(pod) = self.pods.get(&o.pod) else {
            return;
        };
        if !pod.connected {
            return;
        }
        let local = pod.entries.get(uid).map(|e| Local {
            attempt: e.attempt,
            phase: own::Phase::try_from(e.phase).unwrap_or(own::Phase::Unspecified),
            reason: e.reason.clone(),
        });
        // A step in flight is decided about again once the owner's table
        // reflects it (or its RPC failed).
        let settled = match run.in_flight {
            Some(InFlight::Register { attempt, done }) => {
                done && local.as_ref().is_some_and(|l| l.attempt == attempt)
            }
            // Decided again once answered: the registration is gone, or the
            // release failed and is tried again.
            Some(InFlight::Release { done }) => done,
            None => true,
        };
        if !settled {
            return;
        }
        let Some(rules) = run.rules() else {
            return;
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
            return;
        };
        run.in_flight = None;
        for step in steps {
            match step {
                Step::Report(t) => set(run, t, now, Duration::ZERO),
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
                    return;
                }
                Step::Release(stop) => {
                    run.in_flight = Some(InFlight::Release { done: false });
                    actions.push(release(&o.pod, uid, stop));
                    return;
                }
                Step::RemoveFinalizer => {
                    self.runs.remove(uid);
                    return;
                }
            }
        }
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

    /// Places the Runs that need a Pod: sessions first (they need an idle
    /// Pod, which a shared Run placed earlier would take), then by age.
    fn place(&mut self, now: Instant, actions: &mut Vec<Action>) {
        if let Some(until) = self.hold_until {
            if now < until && self.pods.values().any(|p| p.uid.is_none()) {
                return;
            }
            self.hold_until = None;
        }
        let mut waiting: Vec<&RunState> = self
            .runs
            .values()
            .filter(|r| {
                !r.deleting
                    && r.life.phase == Phase::Pending
                    && r.owner.is_none()
                    && matches!(r.mode, Ok(ModeKind::Function | ModeKind::Session))
                    && r.run.termination().is_none()
                    && r.retry_at.is_none_or(|t| t <= now)
            })
            .collect();
        if waiting.is_empty() {
            return;
        }
        waiting.sort_by_key(|r| (r.mode != Ok(ModeKind::Session), r.seq));
        let requests: Vec<PendingRun> = waiting
            .iter()
            .map(|r| PendingRun {
                key: r.uid().to_owned(),
                exclusive: r.mode == Ok(ModeKind::Session),
            })
            .collect();
        let views: Vec<PodView> = self.pods.values().map(|p| self.pod_view(p)).collect();
        let placed: BTreeMap<String, String> = schedule(&requests, &views).into_iter().collect();
        for req in requests {
            let Some(run) = self.runs.get_mut(&req.key) else {
                continue;
            };
            let Some(rules) = run.rules() else {
                continue;
            };
            let runtime = run.run.spec.runtime.clone();
            let event = match placed.get(&req.key) {
                Some(pod) => Event::Assigned { pod },
                None => Event::Unplaced { runtime: &runtime },
            };
            let Some(t) = lifecycle::apply(&run.life, &rules, &event) else {
                continue;
            };
            if let Some(pod) = placed.get(&req.key) {
                let pod_uid = self
                    .pods
                    .get(pod)
                    .and_then(|p| p.uid.clone())
                    .unwrap_or_default();
                run.owner = Some(Owner {
                    pod: pod.clone(),
                    pod_uid,
                });
                run.retry_at = None;
                tracing::info!(uid = %req.key, pod = %pod, attempt = t.attempt, "run scheduled");
            }
            set(run, t, now, self.retry_backoff);
            if placed.contains_key(&req.key) {
                self.owner_steps(&req.key, now, actions);
            }
        }
    }

    pub(super) fn pod_view(&self, p: &PodState) -> PodView {
        let holders: Vec<&RunState> = self
            .runs
            .values()
            .filter(|r| r.owned_by(&p.cfg.name, p.uid.as_deref()) && r.life.phase.holds_capacity())
            .collect();
        PodView {
            name: p.cfg.name.clone(),
            ready: p.connected && p.uid.is_some(),
            capacity: p.cfg.capacity,
            used: holders.len() as u32,
            exclusive: holders.iter().any(|r| r.mode == Ok(ModeKind::Session)),
        }
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
    }
}
