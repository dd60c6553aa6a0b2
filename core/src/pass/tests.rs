use super::*;
use crate::Phase::{self, *};
use crate::Reason;

mod memo;

fn run(name: &str, created: u64) -> RunFacts {
    RunFacts {
        uid: format!("{name}-uid"),
        namespace: "ns".into(),
        name: name.into(),
        runtime: "python".into(),
        labels: Labels::new(),
        pool: Ok("ns/python".into()),
        mode: Ok(ModeKind::Function),
        life: Life::default(),
        message: String::new(),
        max_retries: 1,
        termination: None,
        timeout: None,
        age: Duration::from_secs(1),
        assigned_for: None,
        created,
        owner: None,
        deleting: false,
        has_finalizer: true,
        backing_off: false,
        requests: Resources::new(),
        priority: 0,
        affinity: Affinity::default(),
        ttl_after_finished: None,
        finished_for: None,
    }
}

fn session(name: &str, created: u64) -> RunFacts {
    RunFacts {
        mode: Ok(ModeKind::Session),
        ..run(name, created)
    }
}

fn pod(name: &str, runs: u32) -> PodFacts {
    PodFacts {
        name: name.into(),
        uid: format!("{name}-uid"),
        pool: "ns/python".into(),
        ready: true,
        alive: true,
        capacity: Capacity {
            runs,
            resources: Resources::new(),
        },
    }
}

fn on(mut r: RunFacts, pod: &str, phase: Phase, attempt: u64) -> RunFacts {
    r.owner = Some(OwnerRef {
        pod: pod.into(),
        pod_uid: format!("{pod}-uid"),
    });
    r.life = Life {
        phase,
        reason: None,
        attempt,
    };
    r
}

fn decide(runs: Vec<RunFacts>, pods: Vec<PodFacts>) -> (Plan, Snapshot) {
    let s = Snapshot {
        runs,
        pods,
        hold_placement: false,
        pools: BTreeMap::new(),
        memo: Default::default(),
    };
    (super::decide(&s, &Framework::default()), s)
}

/// `name → (phase, reason, bound pod)` of every status op.
fn outcomes(plan: &Plan, s: &Snapshot) -> BTreeMap<String, (Phase, Reason, Option<String>)> {
    plan.ops
        .iter()
        .filter_map(|op| match op {
            Op::Status {
                run,
                transition,
                bind,
            } => Some((
                s.runs[*run].name.clone(),
                (
                    transition.phase,
                    transition.reason,
                    bind.as_ref().map(|b| b.pod.clone()),
                ),
            )),
            _ => None,
        })
        .collect()
}

fn bound(name: &str, pod: &str) -> (String, (Phase, Reason, Option<String>)) {
    (
        name.into(),
        (Scheduled, Reason::Scheduled, Some(pod.into())),
    )
}

#[test]
fn pending_runs_are_bound_at_attempt_one_and_handed_to_their_owner() {
    let (plan, s) = decide(vec![run("a", 1)], vec![pod("p", 2)]);
    let Some(Op::Status {
        transition, bind, ..
    }) = plan.ops.first()
    else {
        panic!("{plan:?}")
    };
    assert_eq!(transition.attempt, 1);
    assert_eq!(transition.message, "assigned to Pod p");
    assert_eq!(
        bind.as_ref(),
        Some(&OwnerRef {
            pod: "p".into(),
            pod_uid: "p-uid".into()
        })
    );
    assert_eq!(plan.owned, [0]);
    assert_eq!(plan.report.placed, 1);
    assert_eq!(s.runs.len(), 1);
}

#[test]
fn held_capacity_counts_and_a_burst_never_over_commits() {
    let runs = vec![
        on(run("ready", 0), "p", Ready, 1),
        on(run("finalizing", 0), "p", Finalizing, 1),
        on(run("ended", 0), "p", Succeeded, 1),
        run("a", 1),
        run("b", 2),
    ];
    let (plan, s) = decide(runs, vec![pod("p", 3)]);
    let got = outcomes(&plan, &s);
    assert_eq!(
        got.get("a"),
        Some(&(Scheduled, Reason::Scheduled, Some("p".into())))
    );
    assert_eq!(got.get("b").map(|o| o.1), Some(Reason::NoIdlePod));
    assert_eq!(
        plan.report
            .rejections
            .get(&("RuntimePodAvailability", "NoFreeSlot")),
        Some(&1)
    );
}

#[test]
fn sessions_are_placed_before_older_function_runs() {
    let (plan, s) = decide(
        vec![run("f", 1), session("s", 2)],
        vec![pod("p1", 2), pod("p2", 2)],
    );
    let got = outcomes(&plan, &s);
    assert_eq!(
        got.get("s").and_then(|o| o.2.clone()).as_deref(),
        Some("p1")
    );
    assert_eq!(
        got.get("f").and_then(|o| o.2.clone()).as_deref(),
        Some("p2")
    );
}

#[test]
fn higher_priority_wins_contended_capacity_and_waiting_ages() {
    let mut urgent = run("urgent", 9);
    urgent.priority = 100;
    let (plan, s) = decide(vec![run("old", 1), urgent], vec![pod("p", 1)]);
    let got = outcomes(&plan, &s);
    assert_eq!(got.get("urgent").map(|o| o.1), Some(Reason::Scheduled));
    assert_eq!(got.get("old").map(|o| o.1), Some(Reason::NoIdlePod));
    let mut starving = run("starving", 1);
    starving.age = Duration::from_secs(2000);
    let mut urgent = run("urgent", 9);
    urgent.priority = 100;
    let (plan, s) = decide(vec![starving, urgent], vec![pod("p", 1)]);
    assert_eq!(
        outcomes(&plan, &s).get("starving").map(|o| o.1),
        Some(Reason::Scheduled)
    );
}

#[test]
fn pods_that_are_not_ready_or_not_alive_take_nothing() {
    let mut unready = pod("a", 4);
    unready.ready = false;
    let mut dead = pod("b", 4);
    dead.alive = false;
    let (plan, s) = decide(vec![run("r", 1)], vec![unready, dead]);
    let got = outcomes(&plan, &s);
    assert_eq!(got.get("r").map(|o| o.1), Some(Reason::NoIdlePod));
    let Some(Op::Status { transition, .. }) = plan.ops.first() else {
        panic!()
    };
    assert_eq!(
        transition.message,
        "0/2 python Pods can take this Run: 2 not ready"
    );
}

#[test]
fn a_missing_runtime_is_reported_once() {
    let mut r = run("r", 1);
    r.pool = Err("namespace ns or kruntimes-system".into());
    let (plan, s) = decide(vec![r.clone()], vec![]);
    let Some(Op::Status { transition, .. }) = plan.ops.first() else {
        panic!()
    };
    assert_eq!(transition.reason, Reason::RuntimeNotFound);
    assert_eq!(
        transition.message,
        "Runtime \"python\" not found in namespace ns or kruntimes-system"
    );
    assert_eq!(s.runs.len(), 1);
    // Written once: the same status again is no operation.
    r.life = transition.life();
    r.message = transition.message.clone();
    let (plan, _) = decide(vec![r], vec![]);
    assert!(plan.ops.is_empty(), "{plan:?}");
}

#[test]
fn resolution_prefers_the_runs_namespace_then_the_system_one() {
    let exists = |ns: &str, rt: &str| (ns, rt) == ("team", "python") || ns == "sys";
    assert_eq!(
        resolve_pool("team", "python", exists, "sys"),
        Ok("team/python".into())
    );
    assert_eq!(
        resolve_pool("other", "python", exists, "sys"),
        Ok("sys/python".into())
    );
    let none = |_: &str, _: &str| false;
    assert_eq!(
        resolve_pool("other", "go", none, "sys"),
        Err("namespace other or sys".into())
    );
}

#[test]
fn a_lost_owner_reschedules_with_a_higher_attempt_until_retries_run_out() {
    let mut gone = pod("p", 2);
    gone.alive = false;
    let (plan, s) = decide(
        vec![on(run("r", 1), "p", Ready, 1)],
        vec![gone.clone(), pod("q", 2)],
    );
    assert_eq!(
        outcomes(&plan, &s).get("r").map(|o| (o.0, o.1)),
        Some((Pending, Reason::OwnerLost))
    );
    assert!(plan.owned.is_empty());
    // Back in Pending without an owner: placed again at attempt 2.
    let mut again = run("r", 1);
    again.life = Life {
        phase: Pending,
        reason: Some(Reason::OwnerLost),
        attempt: 1,
    };
    let (plan, _) = decide(vec![again], vec![pod("q", 2)]);
    let Some(Op::Status { transition, .. }) = plan.ops.first() else {
        panic!()
    };
    assert_eq!((transition.phase, transition.attempt), (Scheduled, 2));
    // Past maxRetries (1): it fails.
    let (plan, s) = decide(vec![on(run("r", 1), "p", Ready, 2)], vec![gone]);
    assert_eq!(
        outcomes(&plan, &s).get("r").map(|o| (o.0, o.1)),
        Some((Failed, Reason::OwnerLost))
    );
}

#[test]
fn a_replaced_pod_with_the_same_name_is_not_the_owner() {
    let mut replaced = pod("p", 2);
    replaced.uid = "p-uid-2".into();
    let (plan, s) = decide(vec![on(run("r", 1), "p", Ready, 1)], vec![replaced]);
    assert_eq!(
        outcomes(&plan, &s).get("r").map(|o| o.1),
        Some(Reason::OwnerLost)
    );
}

#[test]
fn sessions_fail_when_their_pod_is_lost() {
    let (plan, s) = decide(vec![on(session("s", 1), "p", Ready, 1)], vec![]);
    assert_eq!(
        outcomes(&plan, &s).get("s").map(|o| (o.0, o.1)),
        Some((Failed, Reason::OwnerLost))
    );
}

#[test]
fn live_owners_drive_their_runs_even_as_they_time_out() {
    let (plan, _) = decide(vec![on(run("r", 1), "p", Ready, 1)], vec![pod("p", 2)]);
    assert!(plan.ops.is_empty());
    assert_eq!(plan.owned, [0]);
    let mut late = on(run("r", 1), "p", Ready, 1);
    late.timeout = Some(1);
    let (plan, s) = decide(vec![late], vec![pod("p", 2)]);
    assert_eq!(
        outcomes(&plan, &s).get("r").map(|o| (o.0, o.1)),
        Some((Timeout, Reason::RunTimeout))
    );
    assert_eq!(plan.owned, [0]);
}

#[test]
fn termination_before_scheduling_cancels_invalid_runs_fail_and_tasks_are_placed() {
    let mut t = run("t", 1);
    t.termination = Some(TerminationMode::Drain);
    let mut bad = run("bad", 2);
    bad.mode = Err("spec.mode must set exactly one of task, function, session".into());
    let mut task = run("task", 3);
    task.mode = Ok(ModeKind::Task);
    let (plan, s) = decide(vec![t, bad, task], vec![pod("p", 4)]);
    let got = outcomes(&plan, &s);
    assert_eq!(
        got.get("t").map(|o| (o.0, o.1)),
        Some((Cancelled, Reason::Terminated))
    );
    assert_eq!(
        got.get("bad").map(|o| (o.0, o.1)),
        Some((Failed, Reason::InvalidSpec))
    );
    assert_eq!(
        got.get("task").map(|o| (o.0, o.1)),
        Some((Scheduled, Reason::Scheduled))
    );
    assert_eq!(plan.report.cycles, 1);
}

#[test]
fn finalizers_are_added_to_live_runs_and_removed_when_no_owner_can_release() {
    let mut fresh = run("fresh", 1);
    fresh.has_finalizer = false;
    let mut ended = run("ended", 2);
    ended.has_finalizer = false;
    ended.life.phase = Succeeded;
    let mut orphan = on(run("orphan", 3), "gone", Ready, 1);
    orphan.deleting = true;
    let mut held = on(run("held", 4), "p", Ready, 1);
    held.deleting = true;
    let (plan, _) = decide(vec![fresh, ended, orphan, held], vec![pod("p", 8)]);
    assert!(plan.ops.contains(&Op::AddFinalizer { run: 0 }));
    assert!(!plan.ops.contains(&Op::AddFinalizer { run: 1 }));
    assert!(plan.ops.contains(&Op::RemoveFinalizer { run: 2 }));
    assert!(!plan.ops.contains(&Op::RemoveFinalizer { run: 3 }));
    assert!(plan.owned.contains(&3));
}

#[test]
fn terminal_runs_are_left_alone() {
    let mut done = on(run("done", 1), "p", Failed, 1);
    done.timeout = Some(0);
    let (plan, _) = decide(vec![done], vec![pod("p", 1)]);
    assert!(plan.ops.is_empty());
}

#[test]
fn runs_backing_off_and_a_held_placement_wait_silently() {
    let mut r = run("r", 1);
    r.backing_off = true;
    let (plan, _) = decide(vec![r], vec![pod("p", 1)]);
    assert!(plan.ops.is_empty());
    let s = Snapshot {
        runs: vec![run("r", 1)],
        pods: vec![pod("p", 1)],
        hold_placement: true,
        pools: BTreeMap::new(),
        memo: Default::default(),
    };
    assert!(super::decide(&s, &Framework::default()).ops.is_empty());
}

#[test]
fn scheduling_is_deterministic_and_oldest_first() {
    let runs = vec![run("b", 2), run("a", 2), run("c", 1)];
    let (plan, s) = decide(runs.clone(), vec![pod("p", 2)]);
    let (again, _) = decide(runs, vec![pod("p", 2)]);
    assert_eq!(plan, again);
    let got = outcomes(&plan, &s);
    assert_eq!(
        got.into_iter()
            .filter(|(_, o)| o.2.is_some())
            .collect::<Vec<_>>(),
        [bound("a", "p"), bound("c", "p")]
    );
}

#[test]
fn requests_and_affinity_reach_the_scheduler() {
    let mut with_cpu = pod("p", 8);
    with_cpu.capacity.resources = Resources::new().with("cpu", 1000);
    let mut big = run("big", 1);
    big.requests = Resources::new().with("cpu", 1500);
    let (plan, s) = decide(vec![big], vec![with_cpu.clone()]);
    assert_eq!(
        outcomes(&plan, &s).get("big").map(|o| o.1),
        Some(Reason::InsufficientResources)
    );

    let mut web = on(run("web", 1), "p", Ready, 1);
    web.labels.insert("app".into(), "web".into());
    web.requests = Resources::new().with("cpu", 500);
    let mut second = run("second", 2);
    second.requests = Resources::new().with("cpu", 600);
    let (plan, s) = decide(vec![web, second], vec![with_cpu]);
    assert_eq!(
        outcomes(&plan, &s).get("second").map(|o| o.1),
        Some(Reason::InsufficientResources)
    );
}

#[test]
fn demand_counts_busy_and_idle_pods_and_the_runs_one_more_pod_would_take() {
    let mut huge = session("huge", 5);
    huge.requests = Resources::new().with("example.com/gpu", 1000);
    let runs = vec![
        on(run("held", 0), "a", Ready, 1),
        session("s1", 1),
        session("s2", 2),
        run("f", 3),
        huge,
    ];
    let (plan, _) = decide(runs, vec![pod("a", 2), pod("b", 2)]);
    // s1 takes b; s2 finds no idle Pod; f shares a; huge fits no Pod at all.
    assert_eq!(
        plan.demand.get("ns/python"),
        Some(&Demand {
            busy: 2,
            idle: 0,
            waiting_sessions: 1,
            waiting_shared: 0,
        })
    );
    // An empty pool knows a fresh Pod's capacity from the Runtime.
    let s = Snapshot {
        runs: vec![session("s", 1), run("f", 2)],
        pods: vec![],
        hold_placement: false,
        pools: [(
            "ns/python".to_owned(),
            Capacity {
                runs: 4,
                resources: Resources::new(),
            },
        )]
        .into(),
        memo: Default::default(),
    };
    let plan = super::decide(&s, &Framework::default());
    let d = plan.demand["ns/python"];
    assert_eq!(
        (d.waiting_sessions, d.waiting_shared, d.busy, d.idle),
        (1, 1, 0, 0)
    );
}

#[test]
fn demand_counts_busy_pods_when_no_run_waits() {
    // Nothing to place: the pool must still see its busy Pods, or it would
    // shrink below them.
    let runs = vec![
        on(run("f", 0), "a", Ready, 1),
        on(session("s", 1), "b", Ready, 1),
    ];
    let (plan, _) = decide(runs, vec![pod("a", 2), pod("b", 2), pod("c", 2)]);
    assert_eq!(
        plan.demand.get("ns/python"),
        Some(&Demand {
            busy: 2,
            idle: 1,
            ..Demand::default()
        })
    );
    // While placement is held, nothing is counted (no Pod reported yet).
    let s = Snapshot {
        runs: vec![],
        pods: vec![],
        hold_placement: true,
        pools: Default::default(),
        memo: Default::default(),
    };
    assert!(super::decide(&s, &Framework::default()).demand.is_empty());
}

#[test]
fn a_run_not_ready_within_its_deadline_is_unbound_and_placed_again() {
    let mut stuck = on(run("stuck", 1), "p", Running, 1);
    stuck.assigned_for = Some(Duration::from_secs(119));
    let (plan, _) = decide(vec![stuck.clone()], vec![pod("p", 2)]);
    assert!(plan.ops.is_empty());
    stuck.assigned_for = Some(Duration::from_secs(120));
    let (plan, s) = decide(vec![stuck], vec![pod("p", 2)]);
    assert_eq!(
        outcomes(&plan, &s).get("stuck").map(|o| (o.0, o.1)),
        Some((Pending, Reason::RegistrationTimeout))
    );
}

#[test]
fn a_snapshot_after_a_plan_is_what_the_next_pass_observes() {
    let mut gone = on(run("gone", 0), "lost", Ready, 1);
    gone.deleting = true;
    let mut new = run("new", 1);
    new.has_finalizer = false;
    let (plan, s) = decide(vec![gone, new], vec![pod("a", 2)]);
    let next = s.after(&plan);
    // The deleted Run with no living owner lost its finalizer: gone.
    assert_eq!(
        next.runs
            .iter()
            .map(|r| r.name.as_str())
            .collect::<Vec<_>>(),
        ["new"]
    );
    let r = &next.runs[0];
    assert!(r.has_finalizer);
    assert_eq!(r.owner.as_ref().map(|o| o.pod.as_str()), Some("a"));
    assert_eq!((r.life.phase, r.life.attempt), (Scheduled, 1));
    // Carried out, nothing is left to do.
    assert!(super::decide(&next, &Framework::default()).ops.is_empty());
}

#[test]
fn a_finished_run_is_deleted_once_its_ttl_has_passed_and_not_before() {
    let task = |name, phase, ttl, finished: Option<u64>| RunFacts {
        mode: Ok(ModeKind::Task),
        ttl_after_finished: ttl,
        finished_for: finished.map(Duration::from_secs),
        ..on(run(name, 1), "p", phase, 1)
    };
    let (plan, s) = decide(
        vec![
            task("due", Succeeded, Some(60), Some(60)),
            task("failed-due", Failed, Some(0), Some(0)),
            task("early", Succeeded, Some(60), Some(59)),
            task("kept", Succeeded, None, Some(86_400)),
            task("running", Running, Some(0), None),
            // A terminal time not known yet: kept until it is.
            task("unknown", Timeout, Some(0), None),
        ],
        vec![pod("p", 8)],
    );
    let deleted: Vec<&str> = plan
        .ops
        .iter()
        .filter_map(|op| match op {
            Op::Delete { run } => Some(s.runs[*run].name.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(deleted, ["due", "failed-due"]);
    // A Run already being deleted is its owner's to release, not deleted again.
    let mut gone = task("gone", Succeeded, Some(0), Some(5));
    gone.deleting = true;
    let (plan, _) = decide(vec![gone], vec![pod("p", 8)]);
    assert!(
        !plan.ops.iter().any(|op| matches!(op, Op::Delete { .. })),
        "{plan:?}"
    );
}
