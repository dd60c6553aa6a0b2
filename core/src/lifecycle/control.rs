//! What the control plane decides about one Run. Pure.
//!
//! The control plane — the embedded one or the Kubernetes operator — ends
//! invalid and unsupported Runs, enforces `spec.timeout`, fences Runs whose
//! owner is lost, cancels Runs terminated before they had a Pod, and
//! otherwise either leaves a Run to its living owner or asks for a Pod.
//! Placement itself is the scheduler's; its outcome goes through
//! [`super::apply`] as [`Event::Assigned`] or [`Event::Unplaced`].

use std::time::Duration;

use super::{Event, ExitCodes, Life, Phase, Rules, Transition, apply};
use crate::{ModeKind, TerminationMode};

/// What the control plane knows about a Run's owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner<'a> {
    /// No Pod is assigned.
    Unassigned,
    /// The assigned Pod is alive.
    Alive,
    /// The assigned Pod is gone (deleted, replaced by another incarnation,
    /// or away past the grace period).
    Lost {
        /// Its name.
        pod: &'a str,
    },
}

/// The facts of one Run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Facts<'a> {
    /// Its life.
    pub life: Life,
    /// Its mode, or why the spec is invalid.
    pub mode: Result<ModeKind, &'a str>,
    /// `spec.retryPolicy.maxRetries`.
    pub max_retries: u32,
    /// `spec.termination.mode`.
    pub termination: Option<TerminationMode>,
    /// `spec.timeout` in seconds.
    pub timeout: Option<u32>,
    /// Time since the Run was created.
    pub age: Duration,
    /// Its current owner Pod and the time since it was assigned there
    /// (`None` when unassigned or unknown).
    pub assigned: Option<(&'a str, Duration)>,
    /// Its owner.
    pub owner: Owner<'a>,
}

/// What to do about the Run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Nothing: it has ended.
    Nothing,
    /// Write this transition.
    Apply(Transition),
    /// Its owner drives it from here (see [`super::owner::decide`]).
    OwnerDrives,
    /// It waits for a Pod: run the scheduler.
    NeedsPod,
}

/// The decision for one Run. Rules in order: ended Runs are left alone;
/// invalid specs fail; an elapsed `spec.timeout` ends
/// the Run whatever its phase; a Run its living owner has not made Ready
/// within the registration deadline (a task: started) is placed again
/// ([`Event::RegistrationExpired`]); otherwise a living owner drives the
/// Run; a lost owner is fenced ([`Event::OwnerLost`]); a Run terminated
/// before it had a Pod is cancelled; any other Run needs a Pod.
pub fn decide(f: &Facts<'_>) -> Decision {
    if f.life.phase.is_terminal() {
        return Decision::Nothing;
    }
    let mode = match f.mode {
        Ok(mode) => mode,
        Err(why) => return transition(f, ModeKind::Function, &Event::Invalid(why)),
    };
    if let Some(seconds) = f.timeout
        && f.age >= Duration::from_secs(seconds.into())
    {
        return transition(f, mode, &Event::TimedOut { seconds });
    }
    let deadline = super::registration_deadline(mode);
    // A started task is running its own course (bounded by spec.timeout).
    let registering = match mode {
        ModeKind::Task => f.life.phase == Phase::Scheduled,
        _ => matches!(f.life.phase, Phase::Scheduled | Phase::Running),
    };
    if let (Owner::Alive, Some((pod, since))) = (f.owner, f.assigned)
        && registering
        && since >= deadline
    {
        return transition(
            f,
            mode,
            &Event::RegistrationExpired {
                seconds: deadline.as_secs(),
                pod,
            },
        );
    }
    match f.owner {
        Owner::Alive => Decision::OwnerDrives,
        Owner::Lost { pod } => transition(f, mode, &Event::OwnerLost { pod }),
        Owner::Unassigned if f.termination.is_some() => transition(f, mode, &Event::Terminate),
        Owner::Unassigned => Decision::NeedsPod,
    }
}

fn transition(f: &Facts<'_>, mode: ModeKind, event: &Event<'_>) -> Decision {
    let rules = Rules {
        mode,
        max_retries: f.max_retries,
        termination: f.termination,
        retry_exit_codes: ExitCodes::NONE,
    };
    apply(&f.life, &rules, event).map_or(Decision::Nothing, Decision::Apply)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Phase, Reason};

    fn facts(phase: Phase, owner: Owner<'static>) -> Facts<'static> {
        Facts {
            life: Life {
                phase,
                reason: None,
                attempt: u64::from(phase != Phase::Pending),
            },
            mode: Ok(ModeKind::Function),
            max_retries: 3,
            termination: None,
            timeout: None,
            age: Duration::from_secs(1),
            assigned: None,
            owner,
        }
    }

    fn outcome(d: Decision) -> Option<(Phase, Reason)> {
        match d {
            Decision::Apply(t) => Some((t.phase, t.reason)),
            _ => None,
        }
    }

    #[test]
    fn runs_without_a_pod_need_one_and_owned_runs_are_left_to_their_owner() {
        assert_eq!(
            decide(&facts(Phase::Pending, Owner::Unassigned)),
            Decision::NeedsPod
        );
        assert_eq!(
            decide(&facts(Phase::Ready, Owner::Alive)),
            Decision::OwnerDrives
        );
        assert_eq!(
            decide(&facts(Phase::Failed, Owner::Alive)),
            Decision::Nothing
        );
    }

    #[test]
    fn invalid_runs_fail_before_anything_else_and_tasks_are_served() {
        let mut f = facts(Phase::Pending, Owner::Unassigned);
        f.mode = Err("spec.mode must set exactly one of task, function, session");
        f.timeout = Some(0);
        assert_eq!(
            outcome(decide(&f)),
            Some((Phase::Failed, Reason::InvalidSpec))
        );
        let mut f = facts(Phase::Pending, Owner::Unassigned);
        f.mode = Ok(ModeKind::Task);
        assert_eq!(decide(&f), Decision::NeedsPod);
    }

    #[test]
    fn a_started_task_is_not_held_to_the_registration_deadline() {
        let mut f = facts(Phase::Running, Owner::Alive);
        f.mode = Ok(ModeKind::Task);
        f.assigned = Some(("p", Duration::from_secs(3600)));
        assert_eq!(decide(&f), Decision::OwnerDrives);
        // Never started: placed again like any Run.
        f.life.phase = Phase::Scheduled;
        assert_eq!(
            outcome(decide(&f)),
            Some((Phase::Pending, Reason::RegistrationTimeout))
        );
        // Its spec.timeout still ends it.
        f.life.phase = Phase::Running;
        f.timeout = Some(60);
        f.age = Duration::from_secs(60);
        assert_eq!(
            outcome(decide(&f)),
            Some((Phase::Timeout, Reason::RunTimeout))
        );
    }

    #[test]
    fn an_elapsed_timeout_ends_the_run_in_any_phase() {
        for (phase, owner) in [
            (Phase::Pending, Owner::Unassigned),
            (Phase::Ready, Owner::Alive),
            (Phase::Finalizing, Owner::Lost { pod: "p" }),
        ] {
            let mut f = facts(phase, owner);
            f.timeout = Some(10);
            f.age = Duration::from_secs(9);
            assert_ne!(
                outcome(decide(&f)),
                Some((Phase::Timeout, Reason::RunTimeout))
            );
            f.age = Duration::from_secs(10);
            assert_eq!(
                outcome(decide(&f)),
                Some((Phase::Timeout, Reason::RunTimeout))
            );
        }
    }

    #[test]
    fn a_run_its_owner_never_makes_ready_is_placed_again_after_the_deadline() {
        for (mode, deadline) in [(ModeKind::Function, 120), (ModeKind::Session, 60)] {
            for phase in [Phase::Scheduled, Phase::Running] {
                let mut f = facts(phase, Owner::Alive);
                f.mode = Ok(mode);
                f.assigned = Some(("p", Duration::from_secs(deadline - 1)));
                assert_eq!(decide(&f), Decision::OwnerDrives);
                f.assigned = Some(("p", Duration::from_secs(deadline)));
                let Decision::Apply(t) = decide(&f) else {
                    panic!("{mode:?} {phase:?}")
                };
                assert_eq!(
                    (t.phase, t.reason),
                    (Phase::Pending, Reason::RegistrationTimeout)
                );
                assert_eq!(
                    t.message,
                    format!(
                        "not Ready within {deadline}s of its assignment to Pod p; rescheduling (attempt 2 of 4)"
                    )
                );
            }
        }
        // Ready in time: never expired; retries exhausted: failed.
        let mut f = facts(Phase::Ready, Owner::Alive);
        f.assigned = Some(("p", Duration::from_secs(3600)));
        assert_eq!(decide(&f), Decision::OwnerDrives);
        let mut f = facts(Phase::Running, Owner::Alive);
        f.assigned = Some(("p", Duration::from_secs(3600)));
        f.life.attempt = 4;
        assert_eq!(
            outcome(decide(&f)),
            Some((Phase::Failed, Reason::RegistrationTimeout))
        );
        f.termination = Some(TerminationMode::Immediate);
        assert_eq!(
            outcome(decide(&f)),
            Some((Phase::Cancelled, Reason::RegistrationTimeout))
        );
    }

    #[test]
    fn lost_owners_are_fenced_and_unassigned_terminations_cancel() {
        assert_eq!(
            outcome(decide(&facts(Phase::Ready, Owner::Lost { pod: "p" }))),
            Some((Phase::Pending, Reason::OwnerLost))
        );
        let mut f = facts(Phase::Pending, Owner::Unassigned);
        f.termination = Some(TerminationMode::Drain);
        assert_eq!(
            outcome(decide(&f)),
            Some((Phase::Cancelled, Reason::Terminated))
        );
    }
}
