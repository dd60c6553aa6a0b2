//! What runtimed does about one Run in Kubernetes mode. Pure.
//!
//! Inputs: the Run as the API server has it (assignment, attempt, phase,
//! termination, deletion) and this Pod's local registration, if any (from
//! its own ownership table). Output: local actions and status reports, in
//! order.

use kruntimes_operator::crd::RunPhase;
use kruntimes_operator::model::TerminationMode;
use kruntimes_proto::ownership::v1 as own;

/// A Run as runtimed sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunFacts {
    /// `status.assignedPodUID` is this Pod's UID.
    pub mine: bool,
    /// A session Run (its workspace and processes live only in the runtimed
    /// that opened it).
    pub session: bool,
    /// `status.attempt`.
    pub attempt: u64,
    /// `status.phase`.
    pub phase: RunPhase,
    /// `status.reason`.
    pub reason: Option<String>,
    /// `spec.termination.mode`.
    pub termination: Option<TerminationMode>,
    /// `metadata.deletionTimestamp` is set.
    pub deleting: bool,
    /// The cleanup finalizer is present.
    pub has_finalizer: bool,
    /// This Pod is gone (deleted, or replaced under the same name): nothing
    /// may be served or registered any more.
    pub pod_gone: bool,
}

/// This Pod's registration of the Run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Local {
    /// Registered attempt.
    pub attempt: u64,
    /// Its phase in the local ownership table.
    pub phase: own::Phase,
    /// Reason of that phase (`IdleTimeout` after idle expiry).
    pub reason: String,
}

/// How to stop serving a Run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// Let accepted work finish.
    Drain,
    /// Cancel it.
    Cancel,
}

/// One step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Register (function) or open (session) at the Run's attempt.
    Register,
    /// Stop serving and remove local state.
    Unregister(Stop),
    /// Write `status.phase` (+ reason) as the owner.
    Report {
        /// Phase.
        phase: RunPhase,
        /// Reason.
        reason: &'static str,
    },
    /// Remove the cleanup finalizer (local cleanup is done).
    RemoveFinalizer,
}

/// The steps for one Run, in order.
pub fn decide(run: &RunFacts, local: Option<&Local>) -> Vec<Action> {
    use Action::*;
    let mut out = Vec::new();
    let unregister = |out: &mut Vec<Action>, stop| {
        if local.is_some() {
            out.push(Unregister(stop));
        }
    };
    // Fenced: not ours (any more), or this Pod is gone.
    if !run.mine || run.pod_gone {
        unregister(&mut out, Stop::Cancel);
        return out;
    }
    if run.deleting {
        // A Run already draining keeps draining on deletion.
        let stop = match run.termination {
            Some(TerminationMode::Drain) => Stop::Drain,
            _ => Stop::Cancel,
        };
        unregister(&mut out, stop);
        if run.has_finalizer {
            out.push(RemoveFinalizer);
        }
        return out;
    }
    if run.phase.is_terminal() {
        unregister(&mut out, Stop::Cancel);
        return out;
    }
    match run.termination {
        Some(TerminationMode::Immediate) => {
            out.push(Report {
                phase: RunPhase::Cancelled,
                reason: "Terminated",
            });
            unregister(&mut out, Stop::Cancel);
            return out;
        }
        Some(TerminationMode::Drain) => {
            if run.phase != RunPhase::Finalizing {
                out.push(Report {
                    phase: RunPhase::Finalizing,
                    reason: "Draining",
                });
            }
            unregister(&mut out, Stop::Drain);
            out.push(Report {
                phase: RunPhase::Succeeded,
                reason: "Drained",
            });
            return out;
        }
        None => {}
    }
    match local {
        Some(l) if l.attempt == run.attempt => {
            if l.phase == own::Phase::Failed {
                // The terminal status first: if it does not land, the local
                // state is still there to decide again (never re-registered).
                let idle = l.reason == "IdleTimeout";
                out.push(Report {
                    phase: if idle {
                        RunPhase::Timeout
                    } else {
                        RunPhase::Failed
                    },
                    reason: if idle { "IdleTimeout" } else { "RuntimeFailed" },
                });
                out.push(Unregister(Stop::Cancel));
            } else if l.phase == own::Phase::Ready
                && (run.phase != RunPhase::Ready || run.reason.as_deref() != Some("Registered"))
            {
                out.push(Report {
                    phase: RunPhase::Ready,
                    reason: "Registered",
                });
            }
        }
        Some(l) if l.attempt > run.attempt => {
            // The API server's attempt went backwards: never serve on a
            // registration the control plane no longer vouches for.
            out.push(Unregister(Stop::Cancel));
        }
        None if run.session && matches!(run.phase, RunPhase::Ready) => {
            // This runtimed restarted: the session's processes and queue are
            // gone. A workspace is never silently recreated.
            out.push(Report {
                phase: RunPhase::Failed,
                reason: "SessionLost",
            });
        }
        _ => {
            // Not registered, or an older attempt (superseded on register).
            if matches!(run.phase, RunPhase::Scheduled | RunPhase::Pending) {
                out.push(Report {
                    phase: RunPhase::Running,
                    reason: "Registering",
                });
            }
            out.push(Register);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::Action::*;
    use super::*;

    fn facts(phase: RunPhase, attempt: u64) -> RunFacts {
        RunFacts {
            mine: true,
            session: false,
            attempt,
            phase,
            reason: None,
            termination: None,
            deleting: false,
            has_finalizer: true,
            pod_gone: false,
        }
    }

    fn local(attempt: u64, phase: own::Phase, reason: &str) -> Local {
        Local {
            attempt,
            phase,
            reason: reason.into(),
        }
    }

    #[test]
    fn assigned_runs_are_registered_then_reported_ready() {
        assert_eq!(
            decide(&facts(RunPhase::Scheduled, 1), None),
            vec![
                Report {
                    phase: RunPhase::Running,
                    reason: "Registering"
                },
                Register
            ]
        );
        let ready = local(1, own::Phase::Ready, "");
        assert_eq!(
            decide(&facts(RunPhase::Running, 1), Some(&ready)),
            vec![Report {
                phase: RunPhase::Ready,
                reason: "Registered"
            }]
        );
        let mut done = facts(RunPhase::Ready, 1);
        done.reason = Some("Registered".into());
        assert!(decide(&done, Some(&ready)).is_empty(), "steady state");
    }

    #[test]
    fn a_restarted_runtimed_recovers_its_registrations_at_the_same_attempt() {
        let mut f = facts(RunPhase::Ready, 3);
        f.reason = Some("Registered".into());
        assert_eq!(decide(&f, None), vec![Register]);
    }

    #[test]
    fn a_restarted_runtimed_never_reopens_a_ready_session() {
        let mut f = facts(RunPhase::Ready, 1);
        f.session = true;
        assert_eq!(
            decide(&f, None),
            vec![Report {
                phase: RunPhase::Failed,
                reason: "SessionLost"
            }]
        );
        // Not opened yet: open it.
        f.phase = RunPhase::Scheduled;
        assert_eq!(decide(&f, None).last(), Some(&Register));
    }

    #[test]
    fn a_newer_attempt_supersedes_an_older_local_registration() {
        let old = local(1, own::Phase::Ready, "");
        assert_eq!(
            decide(&facts(RunPhase::Scheduled, 2), Some(&old)),
            vec![
                Report {
                    phase: RunPhase::Running,
                    reason: "Registering"
                },
                Register
            ]
        );
        let newer = local(3, own::Phase::Ready, "");
        assert_eq!(
            decide(&facts(RunPhase::Ready, 2), Some(&newer)),
            vec![Unregister(Stop::Cancel)]
        );
    }

    #[test]
    fn runs_of_another_pod_or_of_a_gone_pod_are_fenced() {
        let l = local(1, own::Phase::Ready, "");
        let mut f = facts(RunPhase::Ready, 1);
        f.mine = false;
        assert_eq!(decide(&f, Some(&l)), vec![Unregister(Stop::Cancel)]);
        assert!(decide(&f, None).is_empty());
        let mut g = facts(RunPhase::Ready, 1);
        g.pod_gone = true;
        assert_eq!(decide(&g, Some(&l)), vec![Unregister(Stop::Cancel)]);
        assert!(decide(&g, None).is_empty(), "a gone Pod registers nothing");
    }

    #[test]
    fn deletion_cleans_up_then_releases_the_finalizer() {
        let l = local(1, own::Phase::Ready, "");
        let mut f = facts(RunPhase::Ready, 1);
        f.deleting = true;
        assert_eq!(
            decide(&f, Some(&l)),
            vec![Unregister(Stop::Cancel), RemoveFinalizer]
        );
        f.has_finalizer = false;
        assert_eq!(decide(&f, None), Vec::<Action>::new());
        // Deleting a draining Run lets the drain finish.
        let mut d = facts(RunPhase::Finalizing, 1);
        d.deleting = true;
        d.termination = Some(TerminationMode::Drain);
        assert_eq!(
            decide(&d, Some(&l)),
            vec![Unregister(Stop::Drain), RemoveFinalizer]
        );
    }

    #[test]
    fn termination_immediate_cancels_and_drain_finishes_work() {
        let l = local(1, own::Phase::Ready, "");
        let mut f = facts(RunPhase::Ready, 1);
        f.termination = Some(TerminationMode::Immediate);
        assert_eq!(
            decide(&f, Some(&l)),
            vec![
                Report {
                    phase: RunPhase::Cancelled,
                    reason: "Terminated"
                },
                Unregister(Stop::Cancel),
            ]
        );
        f.termination = Some(TerminationMode::Drain);
        assert_eq!(
            decide(&f, Some(&l)),
            vec![
                Report {
                    phase: RunPhase::Finalizing,
                    reason: "Draining"
                },
                Unregister(Stop::Drain),
                Report {
                    phase: RunPhase::Succeeded,
                    reason: "Drained"
                }
            ]
        );
        f.phase = RunPhase::Finalizing;
        assert_eq!(
            decide(&f, None),
            vec![Report {
                phase: RunPhase::Succeeded,
                reason: "Drained"
            }]
        );
    }

    #[test]
    fn idle_expiry_and_runtime_failures_end_the_run() {
        let f = facts(RunPhase::Ready, 1);
        assert_eq!(
            decide(&f, Some(&local(1, own::Phase::Failed, "IdleTimeout"))),
            vec![
                Report {
                    phase: RunPhase::Timeout,
                    reason: "IdleTimeout"
                },
                Unregister(Stop::Cancel),
            ]
        );
        assert_eq!(
            decide(&f, Some(&local(1, own::Phase::Failed, "WorkerExited"))),
            vec![
                Report {
                    phase: RunPhase::Failed,
                    reason: "RuntimeFailed"
                },
                Unregister(Stop::Cancel),
            ]
        );
    }

    #[test]
    fn terminal_runs_are_only_cleaned_up() {
        for phase in [
            RunPhase::Succeeded,
            RunPhase::Failed,
            RunPhase::Timeout,
            RunPhase::Cancelled,
        ] {
            let l = local(1, own::Phase::Ready, "");
            assert_eq!(
                decide(&facts(phase, 1), Some(&l)),
                vec![Unregister(Stop::Cancel)]
            );
            assert!(decide(&facts(phase, 1), None).is_empty());
        }
    }
}
