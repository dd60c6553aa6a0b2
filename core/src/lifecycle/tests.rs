use super::Phase::*;
use super::*;

const ALL_PHASES: [Phase; 9] = [
    Pending, Scheduled, Running, Ready, Finalizing, Succeeded, Failed, Timeout, Cancelled,
];

fn rules(mode: ModeKind, max_retries: u32, termination: Option<TerminationMode>) -> Rules {
    Rules {
        mode,
        max_retries,
        termination,
        retry_exit_codes: ExitCodes::NONE,
    }
}

fn function() -> Rules {
    rules(ModeKind::Function, 3, None)
}

fn task() -> Rules {
    rules(ModeKind::Task, 3, None)
}

fn retried_on(codes: &[i32]) -> Rules {
    Rules {
        retry_exit_codes: ExitCodes::of(codes).unwrap(),
        ..task()
    }
}

fn life(phase: Phase, attempt: u64) -> Life {
    Life {
        phase,
        reason: None,
        attempt,
    }
}

fn next(phase: Phase, rules: &Rules, event: Event<'_>) -> Option<(Phase, Reason)> {
    apply(&life(phase, 1), rules, &event).map(|t| (t.phase, t.reason))
}

/// One row of the transition table: an event under some rules, and the
/// phases it applies in with their outcome. Every other phase must ignore it.
struct Row<'a> {
    name: &'a str,
    rules: Rules,
    event: Event<'a>,
    outcomes: Vec<(Vec<Phase>, Phase, Reason)>,
}

fn row<'a>(
    name: &'a str,
    rules: Rules,
    event: Event<'a>,
    outcomes: Vec<(Vec<Phase>, Phase, Reason)>,
) -> Row<'a> {
    Row {
        name,
        rules,
        event,
        outcomes,
    }
}

#[test]
fn retries_back_off_exponentially_up_to_a_minute() {
    let secs = |a| retry_backoff(a).as_secs();
    assert_eq!(
        [
            secs(0),
            secs(1),
            secs(2),
            secs(3),
            secs(6),
            secs(7),
            secs(50)
        ],
        [1, 1, 2, 4, 32, 60, 60]
    );
}

/// Every event against every phase.
#[test]
fn every_event_applies_in_exactly_its_phases() {
    let drain = rules(ModeKind::Function, 3, Some(TerminationMode::Drain));
    let immediate = rules(ModeKind::Function, 3, Some(TerminationMode::Immediate));
    let session = rules(ModeKind::Session, 3, None);
    let live = || vec![Pending, Scheduled, Running, Ready, Finalizing];
    let assigned = || vec![Scheduled, Running, Ready];
    let table = vec![
        row(
            "invalid",
            function(),
            Event::Invalid("bad"),
            vec![(live(), Failed, Reason::InvalidSpec)],
        ),
        row(
            "unplaced",
            function(),
            Event::Unplaced {
                reason: Reason::InsufficientResources,
                message: "0/1 python Pods can take this Run: 1 insufficient cpu",
            },
            vec![(vec![Pending], Pending, Reason::InsufficientResources)],
        ),
        row(
            "registration expired",
            function(),
            Event::RegistrationExpired {
                seconds: 120,
                pod: "p",
            },
            vec![(
                vec![Scheduled, Running],
                Pending,
                Reason::RegistrationTimeout,
            )],
        ),
        row(
            "runtime missing",
            function(),
            Event::RuntimeMissing {
                runtime: "python",
                searched: "a or b",
            },
            vec![(vec![Pending], Pending, Reason::RuntimeNotFound)],
        ),
        row(
            "assigned",
            function(),
            Event::Assigned { pod: "p" },
            vec![(vec![Pending], Scheduled, Reason::Scheduled)],
        ),
        row(
            "register started",
            function(),
            Event::RegisterStarted,
            vec![(vec![Scheduled], Running, Reason::Registering)],
        ),
        row(
            "registered",
            function(),
            Event::Registered,
            vec![(vec![Scheduled, Running], Ready, Reason::Registered)],
        ),
        row(
            "register failed",
            function(),
            Event::RegisterFailed("boom"),
            vec![(assigned(), Failed, Reason::RegistrationFailed)],
        ),
        row(
            "runtime failed",
            function(),
            Event::RuntimeFailed("WorkerExited"),
            vec![(vec![Running, Ready], Failed, Reason::RuntimeFailed)],
        ),
        row(
            "idle",
            function(),
            Event::IdleExpired,
            vec![(vec![Running, Ready], Timeout, Reason::IdleTimeout)],
        ),
        row(
            "timed out",
            function(),
            Event::TimedOut { seconds: 5 },
            vec![(live(), Timeout, Reason::RunTimeout)],
        ),
        row(
            "owner lost (function)",
            function(),
            Event::OwnerLost { pod: "p" },
            vec![
                (assigned(), Pending, Reason::OwnerLost),
                (vec![Finalizing], Cancelled, Reason::OwnerLost),
            ],
        ),
        row(
            "owner lost (session)",
            session,
            Event::OwnerLost { pod: "p" },
            vec![
                (assigned(), Failed, Reason::OwnerLost),
                (vec![Finalizing], Cancelled, Reason::OwnerLost),
            ],
        ),
        row(
            "owner lost (terminating)",
            drain,
            Event::OwnerLost { pod: "p" },
            vec![(
                vec![Scheduled, Running, Ready, Finalizing],
                Cancelled,
                Reason::OwnerLost,
            )],
        ),
        row(
            "session lost",
            session,
            Event::SessionLost,
            vec![(vec![Ready], Failed, Reason::SessionLost)],
        ),
        row(
            "session lost (function)",
            function(),
            Event::SessionLost,
            vec![],
        ),
        row(
            "terminate drain",
            drain,
            Event::Terminate,
            vec![
                (vec![Pending], Cancelled, Reason::Terminated),
                (assigned(), Finalizing, Reason::Draining),
            ],
        ),
        row(
            "terminate immediate",
            immediate,
            Event::Terminate,
            vec![(live(), Cancelled, Reason::Terminated)],
        ),
        row(
            "terminate without termination",
            function(),
            Event::Terminate,
            vec![],
        ),
        row(
            "drained",
            function(),
            Event::Drained,
            vec![(vec![Finalizing], Succeeded, Reason::Drained)],
        ),
        row(
            "task started",
            task(),
            Event::TaskStarted,
            vec![(vec![Scheduled], Running, Reason::Started)],
        ),
        row(
            "task exited 0",
            task(),
            Event::TaskExited { code: 0 },
            vec![(vec![Scheduled, Running], Succeeded, Reason::Completed)],
        ),
        row(
            "task exited 3",
            task(),
            Event::TaskExited { code: 3 },
            vec![(vec![Scheduled, Running], Failed, Reason::NonZeroExit)],
        ),
        row(
            "task exited 3, retried on 3",
            retried_on(&[3, 137]),
            Event::TaskExited { code: 3 },
            vec![(vec![Scheduled, Running], Pending, Reason::NonZeroExit)],
        ),
        row(
            "task exited 4, retried on 3 only",
            retried_on(&[3, 137]),
            Event::TaskExited { code: 4 },
            vec![(vec![Scheduled, Running], Failed, Reason::NonZeroExit)],
        ),
        row(
            "task start failed",
            task(),
            Event::StartFailed("no such file: main.py"),
            vec![(vec![Scheduled, Running], Pending, Reason::StartFailed)],
        ),
        row(
            "task start failed while terminating",
            rules(ModeKind::Task, 3, Some(TerminationMode::Immediate)),
            Event::StartFailed("no such file: main.py"),
            vec![(vec![Scheduled, Running], Cancelled, Reason::StartFailed)],
        ),
        row(
            "owner lost (task)",
            task(),
            Event::OwnerLost { pod: "p" },
            vec![
                (assigned(), Pending, Reason::OwnerLost),
                (vec![Finalizing], Cancelled, Reason::OwnerLost),
            ],
        ),
        row(
            "task lost",
            task(),
            Event::TaskLost("the owner restarted"),
            vec![(vec![Scheduled, Running], Pending, Reason::OwnerLost)],
        ),
        row(
            "task lost while terminating",
            rules(ModeKind::Task, 3, Some(TerminationMode::Drain)),
            Event::TaskLost("the owner restarted"),
            vec![(vec![Scheduled, Running], Cancelled, Reason::OwnerLost)],
        ),
        // The task events are a task's only.
        row(
            "task lost (function)",
            function(),
            Event::TaskLost("x"),
            vec![],
        ),
        row(
            "task started (function)",
            function(),
            Event::TaskStarted,
            vec![],
        ),
        row(
            "task exited (session)",
            session,
            Event::TaskExited { code: 0 },
            vec![],
        ),
        row(
            "start failed (function)",
            function(),
            Event::StartFailed("x"),
            vec![],
        ),
    ];
    for r in table {
        for phase in ALL_PHASES {
            let want = r
                .outcomes
                .iter()
                .find(|(from, _, _)| from.contains(&phase))
                .map(|(_, to, reason)| (*to, *reason));
            assert_eq!(
                next(phase, &r.rules, r.event),
                want,
                "{} from {phase:?}",
                r.name
            );
        }
    }
}

#[test]
fn terminal_phases_absorb_everything() {
    for phase in [Succeeded, Failed, Timeout, Cancelled] {
        assert!(phase.is_terminal());
        assert!(!phase.holds_capacity());
        assert_eq!(phase.table_phase(), TablePhase::Failed);
        for event in [
            Event::Assigned { pod: "p" },
            Event::Registered,
            Event::IdleExpired,
            Event::TimedOut { seconds: 1 },
            Event::OwnerLost { pod: "p" },
            Event::Terminate,
            Event::Invalid("x"),
        ] {
            let r = rules(ModeKind::Function, 3, Some(TerminationMode::Immediate));
            assert_eq!(apply(&life(phase, 1), &r, &event), None);
        }
    }
}

#[test]
fn the_happy_path_counts_one_attempt_per_assignment() {
    let r = function();
    let mut l = Life::default();
    for (event, phase) in [
        (Event::Assigned { pod: "p" }, Scheduled),
        (Event::RegisterStarted, Running),
        (Event::Registered, Ready),
    ] {
        let t = apply(&l, &r, &event).unwrap();
        assert_eq!(t.phase, phase);
        l = t.life();
    }
    assert_eq!(l.attempt, 1);
    assert_eq!(l.reason, Some(Reason::Registered));
}

#[test]
fn owner_loss_retries_while_attempt_is_within_max_retries() {
    // maxRetries 1 allows two attempts.
    let r = rules(ModeKind::Function, 1, None);
    let t = apply(&life(Ready, 1), &r, &Event::OwnerLost { pod: "a" }).unwrap();
    assert_eq!(
        (t.phase, t.reason, t.attempt),
        (Pending, Reason::OwnerLost, 1)
    );
    assert!(t.clears_assignment());
    assert!(t.message.contains("attempt 2 of 2"), "{}", t.message);
    let t = apply(&life(Ready, 2), &r, &Event::OwnerLost { pod: "b" }).unwrap();
    assert_eq!((t.phase, t.reason), (Failed, Reason::OwnerLost));
    assert!(t.message.contains("exhausted"));
    let none = rules(ModeKind::Function, 0, None);
    assert_eq!(
        next(Ready, &none, Event::OwnerLost { pod: "a" }),
        Some((Failed, Reason::OwnerLost))
    );
}

#[test]
fn owner_loss_cancels_runs_being_terminated_and_never_moves_sessions() {
    for termination in [TerminationMode::Drain, TerminationMode::Immediate] {
        let r = rules(ModeKind::Function, 3, Some(termination));
        assert_eq!(
            next(Ready, &r, Event::OwnerLost { pod: "p" }),
            Some((Cancelled, Reason::OwnerLost))
        );
    }
    assert_eq!(
        next(Finalizing, &function(), Event::OwnerLost { pod: "p" }),
        Some((Cancelled, Reason::OwnerLost))
    );
    let session = rules(ModeKind::Session, 3, None);
    for phase in [Scheduled, Running, Ready] {
        assert_eq!(
            next(phase, &session, Event::OwnerLost { pod: "p" }),
            Some((Failed, Reason::OwnerLost))
        );
    }
    assert_eq!(next(Pending, &session, Event::OwnerLost { pod: "p" }), None);
}

#[test]
fn termination_before_a_pod_cancels_in_either_mode() {
    for termination in [TerminationMode::Drain, TerminationMode::Immediate] {
        let r = rules(ModeKind::Function, 3, Some(termination));
        assert_eq!(
            next(Pending, &r, Event::Terminate),
            Some((Cancelled, Reason::Terminated))
        );
    }
    // A drain already under way is not restarted.
    let drain = rules(ModeKind::Session, 3, Some(TerminationMode::Drain));
    assert_eq!(next(Finalizing, &drain, Event::Terminate), None);
}

#[test]
fn waiting_after_owner_loss_keeps_its_reason() {
    let r = function();
    let mut l = life(Pending, 1);
    l.reason = Some(Reason::OwnerLost);
    let unplaced = Event::Unplaced {
        reason: Reason::NoIdlePod,
        message: "0/2 python Pods can take this Run: 2 no free run slot",
    };
    let t = apply(&l, &r, &unplaced).unwrap();
    assert_eq!(t.reason, Reason::OwnerLost);
    assert_eq!(
        t.message,
        "0/2 python Pods can take this Run: 2 no free run slot"
    );
    l.reason = Some(Reason::RuntimeNotFound);
    let t = apply(&l, &r, &unplaced).unwrap();
    assert_eq!(t.reason, Reason::NoIdlePod);
}

#[test]
fn reasons_round_trip_and_unknown_reasons_parse_to_none() {
    for r in Reason::ALL {
        assert_eq!(Reason::parse(r.as_str()), Some(r));
        assert_eq!(r.to_string(), r.as_str());
    }
    assert_eq!(Reason::parse("FunctionRegistered"), None);
}

#[test]
fn capacity_is_held_from_assignment_until_the_end() {
    assert!(!Pending.holds_capacity());
    for p in [Scheduled, Running, Ready, Finalizing] {
        assert!(p.holds_capacity() && !p.is_terminal());
    }
    assert_eq!(Finalizing.table_phase(), TablePhase::Draining);
    assert_eq!(Pending.table_phase(), TablePhase::Pending);
}

#[test]
fn deletion_releases_as_termination_says_and_cancels_otherwise() {
    assert_eq!(release_on_delete(None), Stop::Cancel);
    assert_eq!(release_on_delete(Some(TerminationMode::Drain)), Stop::Drain);
    assert_eq!(
        release_on_delete(Some(TerminationMode::Immediate)),
        Stop::Cancel
    );
}

#[test]
fn a_task_runs_once_and_its_exit_code_decides_how_it_ends() {
    let r = task();
    let mut l = Life::default();
    for (event, phase, reason) in [
        (Event::Assigned { pod: "p" }, Scheduled, Reason::Scheduled),
        (Event::TaskStarted, Running, Reason::Started),
        (Event::TaskExited { code: 0 }, Succeeded, Reason::Completed),
    ] {
        let t = apply(&l, &r, &event).unwrap();
        assert_eq!((t.phase, t.reason, t.attempt), (phase, reason, 1));
        l = t.life();
    }
    // A non-zero exit is not retried unless the policy names the code.
    let running = life(Running, 1);
    let failed = apply(&running, &r, &Event::TaskExited { code: 137 }).unwrap();
    assert_eq!(
        (failed.phase, failed.message.as_str()),
        (Failed, "exited with code 137")
    );
    let r = retried_on(&[137]);
    let again = apply(&running, &r, &Event::TaskExited { code: 137 }).unwrap();
    assert_eq!(
        (again.phase, again.message.as_str()),
        (
            Pending,
            "exited with code 137; rescheduling (attempt 2 of 4)"
        )
    );
    assert!(again.clears_assignment());
    // Bounded: after maxRetries the same exit fails.
    let last = apply(&life(Running, 4), &r, &Event::TaskExited { code: 137 }).unwrap();
    assert_eq!(
        (last.phase, last.message.as_str()),
        (
            Failed,
            "exited with code 137, and the retry policy (3 retries) is exhausted"
        )
    );
    // A task being terminated is not retried.
    let stopping = Rules {
        termination: Some(TerminationMode::Immediate),
        ..r
    };
    let t = apply(&running, &stopping, &Event::TaskExited { code: 137 }).unwrap();
    assert_eq!(t.phase, Failed);
}

#[test]
fn exit_codes_are_a_set_of_0_to_255() {
    let set = ExitCodes::of(&[0, 1, 63, 64, 127, 128, 255]).unwrap();
    for c in [0, 1, 63, 64, 127, 128, 255] {
        assert!(set.contains(c), "{c}");
    }
    for c in [2, 65, 129, 254, -1, 256, i32::MAX] {
        assert!(!set.contains(c), "{c}");
    }
    assert_eq!(ExitCodes::of(&[1, 256]), Err(256));
    assert_eq!(ExitCodes::of(&[-3]), Err(-3));
    assert_eq!(ExitCodes::of(&[]), Ok(ExitCodes::NONE));
    assert!(!ExitCodes::NONE.contains(0));
}

#[test]
fn a_ttl_elapses_only_after_a_terminal_phase() {
    let secs = |s| Some(std::time::Duration::from_secs(s));
    assert!(ttl_elapsed(Succeeded, Some(10), secs(10)));
    assert!(ttl_elapsed(Failed, Some(0), secs(0)));
    assert!(ttl_elapsed(Cancelled, Some(10), secs(11)));
    assert!(!ttl_elapsed(Succeeded, Some(10), secs(9)));
    assert!(!ttl_elapsed(Succeeded, None, secs(1_000_000)));
    assert!(!ttl_elapsed(Timeout, Some(0), None));
    for phase in [Pending, Scheduled, Running, Ready, Finalizing] {
        assert!(!ttl_elapsed(phase, Some(0), secs(100)), "{phase:?}");
    }
}
