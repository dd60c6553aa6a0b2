use super::Step::*;
use super::*;
use crate::lifecycle::ExitCodes;
use crate::{ModeKind, TerminationMode};

fn facts(phase: Phase, attempt: u64) -> Facts {
    Facts {
        mine: true,
        pod_gone: false,
        life: Life {
            phase,
            reason: None,
            attempt,
        },
        rules: Rules {
            mode: ModeKind::Function,
            max_retries: 3,
            termination: None,
            retry_exit_codes: ExitCodes::NONE,
        },
        deleting: false,
        has_finalizer: true,
    }
}

fn local(attempt: u64, phase: TablePhase, reason: &str) -> Local {
    Local {
        attempt,
        phase: Some(phase),
        reason: reason.into(),
        exit: None,
        exported: false,
        artifacts_failed: None,
    }
}

/// The (phase, reason) of every report, and the other steps by name.
fn shape(steps: &[Step]) -> Vec<String> {
    steps
        .iter()
        .map(|s| match s {
            Register => "Register".to_owned(),
            Release(stop) => format!("Release({stop:?})"),
            Report(t) => format!("{:?}/{}", t.phase, t.reason),
            RemoveFinalizer => "RemoveFinalizer".to_owned(),
            Kill => "Kill".to_owned(),
        })
        .collect()
}

#[test]
fn assigned_runs_are_registered_then_reported_ready() {
    assert_eq!(
        shape(&decide(&facts(Phase::Scheduled, 1), None)),
        ["Running/Registering", "Register"]
    );
    let ready = local(1, TablePhase::Ready, "");
    assert_eq!(
        shape(&decide(&facts(Phase::Running, 1), Some(&ready))),
        ["Ready/Registered"]
    );
    assert!(
        decide(&facts(Phase::Ready, 1), Some(&ready)).is_empty(),
        "steady state"
    );
}

#[test]
fn registration_outcomes_become_ready_or_failed() {
    let f = facts(Phase::Running, 1);
    let ok = registered(&f.life, &f.rules, Ok(())).unwrap();
    assert_eq!((ok.phase, ok.reason), (Phase::Ready, Reason::Registered));
    let failed = registered(&f.life, &f.rules, Err("SyntaxError: bad")).unwrap();
    assert_eq!(
        (failed.phase, failed.reason),
        (Phase::Failed, Reason::RegistrationFailed)
    );
    assert!(failed.message.contains("SyntaxError"));
}

#[test]
fn a_restarted_owner_recovers_its_function_registrations_at_the_same_attempt() {
    // Ready stays Ready: the registration is rebuilt, nothing is reported.
    assert_eq!(shape(&decide(&facts(Phase::Ready, 3), None)), ["Register"]);
    assert_eq!(
        shape(&decide(&facts(Phase::Running, 3), None)),
        ["Register"]
    );
}

#[test]
fn a_restarted_owner_never_reopens_a_ready_session() {
    let mut f = facts(Phase::Ready, 1);
    f.rules.mode = ModeKind::Session;
    assert_eq!(shape(&decide(&f, None)), ["Failed/SessionLost"]);
    // Not opened yet: open it.
    f.life.phase = Phase::Scheduled;
    assert_eq!(
        shape(&decide(&f, None)),
        ["Running/Registering", "Register"]
    );
}

#[test]
fn a_newer_attempt_supersedes_an_older_local_registration() {
    let old = local(1, TablePhase::Ready, "");
    assert_eq!(
        shape(&decide(&facts(Phase::Scheduled, 2), Some(&old))),
        ["Running/Registering", "Register"]
    );
    let newer = local(3, TablePhase::Ready, "");
    assert_eq!(
        shape(&decide(&facts(Phase::Ready, 2), Some(&newer))),
        ["Release(Cancel)"]
    );
}

#[test]
fn runs_of_another_owner_or_of_a_gone_owner_are_fenced() {
    let l = local(1, TablePhase::Ready, "");
    let mut f = facts(Phase::Ready, 1);
    f.mine = false;
    assert_eq!(shape(&decide(&f, Some(&l))), ["Release(Cancel)"]);
    assert!(decide(&f, None).is_empty());
    let mut g = facts(Phase::Ready, 1);
    g.pod_gone = true;
    assert_eq!(shape(&decide(&g, Some(&l))), ["Release(Cancel)"]);
    assert!(
        decide(&g, None).is_empty(),
        "a gone owner registers nothing"
    );
}

#[test]
fn deletion_releases_then_removes_the_finalizer() {
    let l = local(1, TablePhase::Ready, "");
    let mut f = facts(Phase::Ready, 1);
    f.deleting = true;
    assert_eq!(
        shape(&decide(&f, Some(&l))),
        ["Release(Cancel)", "RemoveFinalizer"]
    );
    f.has_finalizer = false;
    assert!(decide(&f, None).is_empty());
    // Deleting a Run that asked to drain lets the drain finish.
    let mut d = facts(Phase::Finalizing, 1);
    d.deleting = true;
    d.rules.termination = Some(TerminationMode::Drain);
    assert_eq!(
        shape(&decide(&d, Some(&l))),
        ["Release(Drain)", "RemoveFinalizer"]
    );
}

#[test]
fn termination_immediate_cancels_and_drain_finishes_work() {
    let l = local(1, TablePhase::Ready, "");
    let mut f = facts(Phase::Ready, 1);
    f.rules.termination = Some(TerminationMode::Immediate);
    assert_eq!(
        shape(&decide(&f, Some(&l))),
        ["Cancelled/Terminated", "Release(Cancel)"]
    );
    f.rules.termination = Some(TerminationMode::Drain);
    assert_eq!(
        shape(&decide(&f, Some(&l))),
        ["Finalizing/Draining", "Release(Drain)", "Succeeded/Drained"]
    );
    // Drained already (the local state is gone): report the end.
    f.life.phase = Phase::Finalizing;
    assert_eq!(shape(&decide(&f, None)), ["Succeeded/Drained"]);
    // Still draining (or restarted while draining): drain, then report.
    assert_eq!(
        shape(&decide(&f, Some(&l))),
        ["Release(Drain)", "Succeeded/Drained"]
    );
    // Drain upgraded to Immediate while finalizing.
    f.rules.termination = Some(TerminationMode::Immediate);
    assert_eq!(
        shape(&decide(&f, Some(&l))),
        ["Cancelled/Terminated", "Release(Cancel)"]
    );
}

#[test]
fn idle_expiry_and_runtime_failures_end_the_run() {
    let f = facts(Phase::Ready, 1);
    assert_eq!(
        shape(&decide(
            &f,
            Some(&local(1, TablePhase::Failed, "IdleTimeout"))
        )),
        ["Timeout/IdleTimeout", "Release(Cancel)"]
    );
    let steps = decide(&f, Some(&local(1, TablePhase::Failed, "WorkerExited")));
    assert_eq!(shape(&steps), ["Failed/RuntimeFailed", "Release(Cancel)"]);
    let Report(t) = &steps[0] else {
        unreachable!("the first step is a report")
    };
    assert!(t.message.contains("WorkerExited"));
}

#[test]
fn terminal_runs_are_only_cleaned_up() {
    for phase in [
        Phase::Succeeded,
        Phase::Failed,
        Phase::Timeout,
        Phase::Cancelled,
    ] {
        let l = local(1, TablePhase::Ready, "");
        assert_eq!(
            shape(&decide(&facts(phase, 1), Some(&l))),
            ["Release(Cancel)"]
        );
        assert!(decide(&facts(phase, 1), None).is_empty());
    }
}

#[test]
fn a_draining_local_registration_is_left_alone() {
    let l = local(1, TablePhase::Draining, "Unregistering");
    assert!(decide(&facts(Phase::Ready, 1), Some(&l)).is_empty());
}

fn task(phase: Phase, attempt: u64) -> Facts {
    let mut f = facts(phase, attempt);
    f.rules.mode = ModeKind::Task;
    f
}

fn running_task(attempt: u64) -> Local {
    local(attempt, TablePhase::Running, "")
}

fn exited(attempt: u64, code: i32) -> Local {
    Local {
        exit: Some(code),
        ..running_task(attempt)
    }
}

#[test]
fn a_task_whose_artifacts_failed_fails_with_their_reason_whatever_its_exit() {
    for (code, invalid, reason) in [
        (0, true, Reason::ArtifactInvalid),
        (3, true, Reason::ArtifactInvalid),
        (0, false, Reason::ArtifactExportFailed),
    ] {
        let mut f = task(Phase::Running, 1);
        // Not retried, even for an exit code the policy retries.
        f.rules.retry_exit_codes = crate::lifecycle::ExitCodes::of(&[3]).unwrap();
        f.rules.max_retries = 5;
        let l = Local {
            artifacts_failed: Some((invalid, "artifact \"p\" is invalid: a symbolic link".into())),
            ..exited(1, code)
        };
        let steps = decide(&f, Some(&l));
        let Some(Report(t)) = steps.first() else {
            panic!("{steps:?}")
        };
        assert_eq!((t.phase, t.reason, t.attempt), (Phase::Failed, reason, 1));
        assert_eq!(
            t.message,
            format!("exited with code {code}; artifact \"p\" is invalid: a symbolic link")
        );
        // Reported once: a Run that failed is not reported again.
        f.life = t.life();
        assert!(
            decide(&f, Some(&l)).iter().all(|s| !matches!(s, Report(_))),
            "{code}"
        );
    }
}

#[test]
fn a_task_is_started_once_then_its_start_and_exit_are_reported() {
    // Assigned: start it (no registering phase of its own).
    assert_eq!(
        shape(&decide(&task(Phase::Scheduled, 1), None)),
        ["Register"]
    );
    let started = registered(
        &task(Phase::Scheduled, 1).life,
        &task(Phase::Scheduled, 1).rules,
        Ok(()),
    );
    assert_eq!(
        started.map(|t| (t.phase, t.reason)),
        Some((Phase::Running, Reason::Started))
    );
    let failed = registered(
        &task(Phase::Scheduled, 1).life,
        &task(Phase::Scheduled, 1).rules,
        Err("python3: not found"),
    )
    .unwrap();
    assert_eq!(
        (failed.phase, failed.reason),
        (Phase::Pending, Reason::StartFailed)
    );
    // Started, its report lost: reported again, never started again.
    assert_eq!(
        shape(&decide(&task(Phase::Scheduled, 1), Some(&running_task(1)))),
        ["Running/Started"]
    );
    assert!(decide(&task(Phase::Running, 1), Some(&running_task(1))).is_empty());
    // Its exit, whenever it is first seen.
    for phase in [Phase::Scheduled, Phase::Running] {
        assert_eq!(
            shape(&decide(&task(phase, 1), Some(&exited(1, 0)))),
            ["Succeeded/Completed"]
        );
        assert_eq!(
            shape(&decide(&task(phase, 1), Some(&exited(1, 3)))),
            ["Failed/NonZeroExit"]
        );
    }
    let mut retried = task(Phase::Running, 1);
    retried.rules.retry_exit_codes = ExitCodes::of(&[3]).unwrap();
    assert_eq!(
        shape(&decide(&retried, Some(&exited(1, 3)))),
        ["Pending/NonZeroExit"]
    );
}

#[test]
fn an_ended_task_keeps_its_result_until_the_run_is_deleted() {
    for phase in [
        Phase::Succeeded,
        Phase::Failed,
        Phase::Timeout,
        Phase::Cancelled,
    ] {
        assert!(decide(&task(phase, 1), Some(&exited(1, 0))).is_empty());
        // Still running when the Run ended (timeout, cancel): killed, kept.
        assert_eq!(
            shape(&decide(&task(phase, 1), Some(&running_task(1)))),
            ["Kill"]
        );
        // An older attempt's leftovers go.
        assert_eq!(
            shape(&decide(&task(phase, 2), Some(&exited(1, 0)))),
            ["Release(Cancel)"]
        );
    }
    let mut deleting = task(Phase::Succeeded, 1);
    deleting.deleting = true;
    deleting.rules.termination = Some(TerminationMode::Drain);
    assert_eq!(
        shape(&decide(&deleting, Some(&exited(1, 0)))),
        ["Release(Cancel)", "RemoveFinalizer"]
    );
    // Placed again after a retry: the old attempt goes.
    assert_eq!(
        shape(&decide(&task(Phase::Pending, 1), Some(&exited(1, 3)))),
        ["Release(Cancel)"]
    );
    assert!(decide(&task(Phase::Pending, 1), None).is_empty());
}

#[test]
fn immediate_termination_kills_a_task_and_drain_lets_it_finish() {
    let mut f = task(Phase::Running, 1);
    f.rules.termination = Some(TerminationMode::Immediate);
    assert_eq!(
        shape(&decide(&f, Some(&running_task(1)))),
        ["Cancelled/Terminated", "Kill"]
    );
    f.rules.termination = Some(TerminationMode::Drain);
    assert!(decide(&f, Some(&running_task(1))).is_empty());
    assert_eq!(
        shape(&decide(&f, Some(&exited(1, 0)))),
        ["Succeeded/Completed"]
    );
}

#[test]
fn a_task_lost_under_its_owner_is_placed_again() {
    // runtimed restarted: no local task, the Run says it runs.
    let steps = decide(&task(Phase::Running, 1), None);
    assert_eq!(shape(&steps), ["Pending/OwnerLost"]);
    let Report(t) = &steps[0] else {
        unreachable!("a report")
    };
    assert!(t.message.contains("restarted"), "{}", t.message);
    // The Runtime Server restarted: the task is gone without an exit.
    assert_eq!(
        shape(&decide(
            &task(Phase::Running, 1),
            Some(&local(1, TablePhase::Failed, "RuntimeServerLost"))
        )),
        ["Pending/OwnerLost"]
    );
    // Out of retries: failed.
    assert_eq!(
        shape(&decide(&task(Phase::Running, 4), None)),
        ["Failed/OwnerLost"]
    );
    // A newer local attempt than the Run's: never trusted.
    assert_eq!(
        shape(&decide(&task(Phase::Running, 1), Some(&running_task(2)))),
        ["Release(Cancel)"]
    );
}

#[test]
fn a_drained_session_ends_by_its_export_then_is_forgotten() {
    let mut f = facts(Phase::Finalizing, 1);
    f.rules.mode = ModeKind::Session;
    f.rules.termination = Some(TerminationMode::Drain);
    let exported = |failed: Option<(bool, &str)>| Local {
        exported: true,
        artifacts_failed: failed.map(|(i, w)| (i, w.to_owned())),
        ..local(1, TablePhase::Draining, "Drained")
    };
    assert_eq!(
        shape(&decide(&f, Some(&exported(None)))),
        ["Succeeded/Drained", "Release(Cancel)"]
    );
    for (invalid, reason) in [
        (true, Reason::ArtifactInvalid),
        (false, Reason::ArtifactExportFailed),
    ] {
        let l = exported(Some((
            invalid,
            "artifact \"p\" is invalid: a symbolic link",
        )));
        let steps = decide(&f, Some(&l));
        let Some(Report(t)) = steps.first() else {
            panic!("{steps:?}")
        };
        assert_eq!((t.phase, t.reason), (Phase::Failed, reason));
        assert_eq!(
            t.message,
            "drained; artifact \"p\" is invalid: a symbolic link"
        );
        assert_eq!(steps[1], Release(Stop::Cancel));
        // Once failed, what is left is released; nothing is reported again.
        f.life = t.life();
        assert_eq!(shape(&decide(&f, Some(&l))), ["Release(Cancel)"]);
        f.life = Life {
            phase: Phase::Finalizing,
            reason: Some(Reason::Draining),
            attempt: 1,
        };
    }
    // Not exported yet: drain (the executor stops there when it exported).
    assert_eq!(
        shape(&decide(&f, Some(&local(1, TablePhase::Ready, "")))),
        ["Release(Drain)", "Succeeded/Drained"]
    );
}
