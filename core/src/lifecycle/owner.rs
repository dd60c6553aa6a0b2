//! What a Run's owner does about it. Pure.
//!
//! Inputs: the Run as the control plane has it (assignment, attempt, phase,
//! termination, deletion) and the owner's local registration of it, if any.
//! Output: the steps, in order. runtimed's cluster adapter carries them out
//! for the Runs of its own Pod; the embedded control plane carries them out
//! on behalf of its runtimed instances (over their gRPC API).
//!
//! Status reports come before the clean-up they announce: if a report does
//! not land, the local state is still there to decide again, and a Run that
//! ended is never registered anew.

use super::{
    Event, Life, Phase, Reason, Rules, Stop, TablePhase, Transition, apply, release_on_delete,
};
use crate::TerminationMode;

/// The Run, as its owner sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Facts {
    /// The Run is assigned to this owner (Pod name and UID).
    pub mine: bool,
    /// This owner is gone (its Pod deleted or replaced): nothing may be
    /// served or registered any more.
    pub pod_gone: bool,
    /// The Run's life.
    pub life: Life,
    /// Its rules.
    pub rules: Rules,
    /// It is being deleted.
    pub deleting: bool,
    /// It still carries the cleanup finalizer.
    pub has_finalizer: bool,
}

/// The owner's local registration of the Run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Local {
    /// Registered attempt.
    pub attempt: u64,
    /// Its phase in the owner's ownership table (`None`: one this version
    /// does not know).
    pub phase: Option<TablePhase>,
    /// The reason of that phase (`IdleTimeout` after idle expiry).
    pub reason: String,
    /// A task's process has ended, with this exit code.
    pub exit: Option<i32>,
    /// The export of its artifacts directory is over (a task's with its
    /// exit; a session's once it drained).
    pub exported: bool,
    /// Its artifacts could not be exported: whether they are invalid (else
    /// the store failed), and why.
    pub artifacts_failed: Option<(bool, String)>,
}

/// One step of the owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Register (function), open (session) or start (task) the Run at its
    /// attempt; the outcome goes through [`registered`].
    Register,
    /// Stop serving the Run and remove its local state.
    Release(Stop),
    /// End a task's process at once, keeping its result and its log until
    /// the Run is deleted.
    Kill,
    /// Write this transition as the owner.
    Report(Transition),
    /// Remove the cleanup finalizer: local clean-up is done.
    RemoveFinalizer,
}

/// The steps for one Run, in order.
pub fn decide(run: &Facts, local: Option<&Local>) -> Vec<Step> {
    let mut out = Vec::new();
    let release = |out: &mut Vec<Step>, stop| {
        if local.is_some() {
            out.push(Step::Release(stop));
        }
    };
    let life = run.life;
    let report = |out: &mut Vec<Step>, life: &Life, event| {
        let t = apply(life, &run.rules, &event);
        if let Some(t) = &t {
            out.push(Step::Report(t.clone()));
        }
        t
    };
    let task = run.rules.mode == crate::ModeKind::Task;
    // This attempt's task, still running.
    let running = local.is_some_and(|l| l.attempt == life.attempt && l.exit.is_none());
    // Fenced: not ours (any more), or this owner is gone.
    if !run.mine || run.pod_gone {
        release(&mut out, Stop::Cancel);
        return out;
    }
    if run.deleting {
        // A task's result and log go with the Run; its process never
        // outlives it.
        let stop = if task {
            Stop::Cancel
        } else {
            release_on_delete(run.rules.termination)
        };
        release(&mut out, stop);
        if run.has_finalizer {
            out.push(Step::RemoveFinalizer);
        }
        return out;
    }
    // Placed again (a retried task): what is left here is an older
    // attempt's.
    if life.phase == Phase::Pending {
        release(&mut out, Stop::Cancel);
        return out;
    }
    if life.phase.is_terminal() {
        if !task {
            release(&mut out, Stop::Cancel);
        } else if running {
            out.push(Step::Kill);
        } else if local.is_some_and(|l| l.attempt != life.attempt) {
            release(&mut out, Stop::Cancel);
        }
        return out;
    }
    // A task asked to drain runs to its end; only `Immediate` stops it.
    let terminating = match run.rules.termination {
        Some(TerminationMode::Drain) if task => None,
        t => t,
    };
    if terminating.is_some() {
        let finalizing = match report(&mut out, &life, Event::Terminate) {
            Some(t) if t.phase == Phase::Finalizing => Some(t.life()),
            Some(_) if task => {
                if running {
                    out.push(Step::Kill);
                }
                return out;
            }
            Some(_) => {
                release(&mut out, Stop::Cancel);
                return out;
            }
            // Already finalizing with `Drain`.
            None => (life.phase == Phase::Finalizing).then_some(life),
        };
        if let Some(finalizing) = finalizing {
            match local {
                // Drained, and its artifacts exported: their outcome ends
                // the Run, then what the owner kept of it is forgotten.
                Some(l) if l.exported => {
                    let event = match &l.artifacts_failed {
                        Some((invalid, why)) => Event::ArtifactsFailed {
                            code: None,
                            invalid: *invalid,
                            why,
                        },
                        None => Event::Drained,
                    };
                    report(&mut out, &finalizing, event);
                    out.push(Step::Release(Stop::Cancel));
                }
                // Drain it. An owner that exports artifacts keeps what it
                // exported and stops after this step: the outcome is
                // decided on again (the step's executor says so).
                Some(_) => {
                    out.push(Step::Release(Stop::Drain));
                    report(&mut out, &finalizing, Event::Drained);
                }
                None => {
                    report(&mut out, &finalizing, Event::Drained);
                }
            }
        }
        return out;
    }
    if task {
        task_steps(&mut out, &life, local, report);
        return out;
    }
    match local {
        Some(l) if l.attempt == life.attempt => {
            if l.phase == Some(TablePhase::Failed) {
                let event = if l.reason == Reason::IdleTimeout.as_str() {
                    Event::IdleExpired
                } else {
                    Event::RuntimeFailed(&l.reason)
                };
                if report(&mut out, &life, event).is_some() {
                    out.push(Step::Release(Stop::Cancel));
                }
            } else if l.phase == Some(TablePhase::Ready) {
                report(&mut out, &life, Event::Registered);
            }
        }
        Some(l) if l.attempt > life.attempt => {
            // The control plane's attempt went backwards: never serve on a
            // registration it no longer vouches for.
            out.push(Step::Release(Stop::Cancel));
        }
        None if life.phase == Phase::Ready && run.rules.mode == crate::ModeKind::Session => {
            // The owner restarted: the session's processes and queue are
            // gone, and a workspace is never silently recreated.
            report(&mut out, &life, Event::SessionLost);
        }
        _ => {
            // Not registered (a new assignment, or a function Run whose
            // owner restarted), or an older attempt, which registering
            // supersedes.
            report(&mut out, &life, Event::RegisterStarted);
            out.push(Step::Register);
        }
    }
    out
}

/// A live task's steps: started once, its exit reported, its loss (the
/// owner or its Runtime Server restarted under it) placed again; a task is
/// never started twice at one attempt.
fn task_steps<'a>(
    out: &mut Vec<Step>,
    life: &Life,
    local: Option<&'a Local>,
    report: impl Fn(&mut Vec<Step>, &Life, Event<'a>) -> Option<super::Transition>,
) {
    const RESTARTED: &str = "the task's owner restarted and its process died with it";
    match local {
        Some(l) if l.attempt == life.attempt => match l.exit {
            Some(code) => match &l.artifacts_failed {
                Some((invalid, why)) => {
                    report(
                        out,
                        life,
                        Event::ArtifactsFailed {
                            code: Some(code),
                            invalid: *invalid,
                            why,
                        },
                    );
                }
                None => {
                    report(out, life, Event::TaskExited { code });
                }
            },
            None if l.phase == Some(TablePhase::Failed) => {
                report(out, life, Event::TaskLost(&l.reason));
            }
            None => {
                // Its start was not reported yet.
                report(out, life, Event::TaskStarted);
            }
        },
        Some(l) if l.attempt > life.attempt => out.push(Step::Release(Stop::Cancel)),
        _ if life.phase == Phase::Scheduled => out.push(Step::Register),
        _ => {
            report(out, life, Event::TaskLost(RESTARTED));
        }
    }
}

/// The transition a registration's outcome causes (a task's start: it
/// started, or could not).
pub fn registered(life: &Life, rules: &Rules, outcome: Result<(), &str>) -> Option<Transition> {
    let task = rules.mode == crate::ModeKind::Task;
    match outcome {
        Ok(()) if task => apply(life, rules, &Event::TaskStarted),
        Ok(()) => apply(life, rules, &Event::Registered),
        Err(why) if task => apply(life, rules, &Event::StartFailed(why)),
        Err(why) => apply(life, rules, &Event::RegisterFailed(why)),
    }
}

#[cfg(test)]
mod tests;
