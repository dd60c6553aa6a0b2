use super::*;
use kruntimes_api::Phase as RunPhase;

/// The writes of a pass.
fn reconcile(
    runs: &[RunView],
    pods: &[PodInfo],
    runtimes: &[RuntimeInfo],
    s: &Settings,
    now: SystemTime,
) -> Vec<Op> {
    super::reconcile(runs, pods, runtimes, s, now, &Default::default()).ops
}

const T0: u64 = 1_800_000_000;

fn at(secs: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(T0 + secs)
}

fn settings() -> Settings {
    Settings {
        gateway_url: "https://gw.kruntimes-system.svc".into(),
        ca_bundle: Some("Q0E=".into()),
        system_namespace: "kruntimes-system".into(),
    }
}

fn run(name: &str, created: u64) -> RunView {
    RunView {
        namespace: "a".into(),
        name: name.into(),
        uid: format!("uid-{name}"),
        labels: Labels::new(),
        runtime: "python".into(),
        requests: Resources::new(),
        priority: 0,
        affinity: Affinity::default(),
        mode: Ok(ModeKind::Function),
        created: at(created),
        timeout: None,
        max_retries: 3,
        termination: None,
        ttl_after_finished: None,
        deleting: false,
        has_finalizer: true,
        status: RunStatus::default(),
    }
}

fn session(name: &str, created: u64) -> RunView {
    RunView {
        mode: Ok(ModeKind::Session),
        ..run(name, created)
    }
}

fn pod(name: &str) -> PodInfo {
    PodInfo {
        namespace: "kruntimes-system".into(),
        name: name.into(),
        uid: format!("pod-uid-{name}"),
        runtime: "python".into(),
        ready: true,
        terminating: false,
        address: Some(format!("10.0.0.{}:7443", name.len())),
        delete_first: false,
    }
}

fn runtime(capacity: u32) -> RuntimeInfo {
    RuntimeInfo {
        namespace: "kruntimes-system".into(),
        name: "python".into(),
        capacity: Capacity {
            runs: capacity,
            resources: Resources::new(),
        },
    }
}

fn assigned(mut r: RunView, pod: &PodInfo, phase: RunPhase, attempt: i64) -> RunView {
    r.status.phase = Some(phase);
    r.status.assigned_pod = Some(pod.name.clone());
    r.status.assigned_pod_uid = Some(pod.uid.clone());
    r.status.attempt = Some(attempt);
    r
}

fn statuses(ops: &[Op]) -> BTreeMap<String, RunStatus> {
    ops.iter()
        .filter_map(|op| match op {
            Op::Status { name, status, .. } => Some((name.clone(), (**status).clone())),
            _ => None,
        })
        .collect()
}

#[test]
fn pending_runs_are_scheduled_with_attempt_one_and_an_endpoint() {
    let ops = reconcile(
        &[run("r1", 0)],
        &[pod("p1")],
        &[runtime(2)],
        &settings(),
        at(1),
    );
    let s = &statuses(&ops)["r1"];
    assert_eq!(s.phase, Some(RunPhase::Scheduled));
    assert_eq!(s.assigned_pod.as_deref(), Some("p1"));
    assert_eq!(s.assigned_pod_uid.as_deref(), Some("pod-uid-p1"));
    assert_eq!(s.attempt, Some(1));
    let e = s.endpoint.as_ref().unwrap();
    assert_eq!(
        e.url,
        "https://gw.kruntimes-system.svc/v1/namespaces/a/runtimes/python/runs/uid-r1:invoke"
    );
    assert_eq!(e.protocol, "HTTPS");
    assert_eq!(e.ca_bundle.as_deref(), Some("Q0E="));
}

#[test]
fn capacity_is_respected_and_ready_runs_keep_consuming_it() {
    let p = pod("p1");
    let mut ready = assigned(run("old", 0), &p, RunPhase::Ready, 1);
    ready.status.endpoint = Some(endpoint(&ready, &settings()));
    let ops = reconcile(
        &[ready, run("r1", 1), run("r2", 2)],
        std::slice::from_ref(&p),
        &[runtime(2)],
        &settings(),
        at(3),
    );
    let s = statuses(&ops);
    assert_eq!(s["r1"].phase, Some(RunPhase::Scheduled));
    assert_eq!(s["r2"].phase, Some(RunPhase::Pending));
    assert_eq!(s["r2"].reason.as_deref(), Some("NoIdlePod"));
    assert!(!s.contains_key("old"));
}

#[test]
fn sessions_need_an_idle_pod_and_then_hold_it() {
    let (p1, p2) = (pod("p1"), pod("p2"));
    let busy = assigned(run("f", 0), &p1, RunPhase::Ready, 1);
    let ops = reconcile(
        &[busy, session("s1", 1), session("s2", 2), run("f2", 3)],
        &[p1.clone(), p2.clone()],
        &[runtime(4)],
        &settings(),
        at(4),
    );
    let s = statuses(&ops);
    assert_eq!(s["s1"].assigned_pod.as_deref(), Some("p2"));
    assert!(
        s["s1"]
            .endpoint
            .as_ref()
            .unwrap()
            .url
            .ends_with("/runtimes/python/sessions/uid-s1")
    );
    assert_eq!(s["s2"].phase, Some(RunPhase::Pending), "no idle Pod left");
    assert_eq!(s["f2"].assigned_pod.as_deref(), Some("p1"));
}

#[test]
fn pods_that_are_not_ready_or_have_no_address_take_nothing() {
    let mut p = pod("p1");
    p.ready = false;
    let mut q = pod("p2");
    q.address = None;
    let ops = reconcile(&[run("r", 0)], &[p, q], &[runtime(2)], &settings(), at(1));
    assert_eq!(statuses(&ops)["r"].phase, Some(RunPhase::Pending));
}

#[test]
fn scheduling_is_deterministic_and_oldest_first() {
    let runs = [run("b", 5), run("a", 1), run("c", 3)];
    let one = reconcile(&runs, &[pod("p1")], &[runtime(2)], &settings(), at(9));
    let two = reconcile(&runs, &[pod("p1")], &[runtime(2)], &settings(), at(9));
    assert_eq!(one, two);
    let s = statuses(&one);
    assert_eq!(s["a"].phase, Some(RunPhase::Scheduled));
    assert_eq!(s["c"].phase, Some(RunPhase::Scheduled));
    assert_eq!(s["b"].phase, Some(RunPhase::Pending));
}

#[test]
fn a_runtime_in_the_runs_namespace_wins_over_the_system_one() {
    let local = RuntimeInfo {
        namespace: "a".into(),
        name: "python".into(),
        capacity: Capacity {
            runs: 1,
            resources: Resources::new(),
        },
    };
    let mut lp = pod("local");
    lp.namespace = "a".into();
    let ops = reconcile(
        &[run("r", 0)],
        &[pod("p1"), lp],
        &[runtime(8), local],
        &settings(),
        at(1),
    );
    assert_eq!(statuses(&ops)["r"].assigned_pod.as_deref(), Some("local"));
}

#[test]
fn a_missing_runtime_is_reported_once() {
    let ops = reconcile(&[run("r", 0)], &[], &[], &settings(), at(1));
    let s = statuses(&ops)["r"].clone();
    assert_eq!(s.reason.as_deref(), Some("RuntimeNotFound"));
    let mut r = run("r", 0);
    r.status = s;
    assert!(reconcile(&[r], &[], &[], &settings(), at(2)).is_empty());
}

#[test]
fn lost_owner_reschedules_with_a_higher_attempt_until_retries_run_out() {
    let gone = pod("gone");
    let other = pod("p2");
    let r = assigned(run("r", 0), &gone, RunPhase::Ready, 1);
    // Pass 1: fenced back to Pending, the assignment cleared.
    let ops = reconcile(
        std::slice::from_ref(&r),
        std::slice::from_ref(&other),
        &[runtime(2)],
        &settings(),
        at(1),
    );
    let s = statuses(&ops)["r"].clone();
    assert_eq!(s.phase, Some(RunPhase::Pending));
    assert_eq!(s.reason.as_deref(), Some("OwnerLost"));
    assert_eq!(s.assigned_pod_uid, None);
    assert_eq!(s.attempt, Some(1));
    // Pass 2: scheduled elsewhere at attempt 2.
    let mut r2 = r.clone();
    r2.status = s;
    let ops = reconcile(
        &[r2],
        std::slice::from_ref(&other),
        &[runtime(2)],
        &settings(),
        at(2),
    );
    let s = &statuses(&ops)["r"];
    assert_eq!(s.assigned_pod.as_deref(), Some("p2"));
    assert_eq!(s.attempt, Some(2));
    // Exhausted: attempt 4 with maxRetries 3 fails.
    let r4 = assigned(run("r", 0), &gone, RunPhase::Ready, 4);
    let ops = reconcile(&[r4], &[other], &[runtime(2)], &settings(), at(3));
    let s = &statuses(&ops)["r"];
    assert_eq!(s.phase, Some(RunPhase::Failed));
    assert_eq!(s.reason.as_deref(), Some("OwnerLost"));
}

#[test]
fn a_replaced_pod_with_the_same_name_is_not_the_owner() {
    let old = pod("p1");
    let mut new = pod("p1");
    new.uid = "pod-uid-new".into();
    let r = assigned(run("r", 0), &old, RunPhase::Ready, 1);
    let ops = reconcile(&[r], &[new], &[runtime(2)], &settings(), at(1));
    assert_eq!(
        statuses(&ops)["r"].reason.as_deref(),
        Some("OwnerLost"),
        "UID decides ownership, not the name"
    );
}

#[test]
fn a_terminating_owner_counts_as_lost() {
    let mut p = pod("p1");
    let r = assigned(run("r", 0), &p, RunPhase::Ready, 1);
    p.terminating = true;
    p.ready = false;
    let ops = reconcile(&[r], &[p, pod("p2")], &[runtime(2)], &settings(), at(1));
    assert_eq!(statuses(&ops)["r"].reason.as_deref(), Some("OwnerLost"));
}

#[test]
fn sessions_fail_when_their_pod_is_lost() {
    let gone = pod("gone");
    let r = assigned(session("s", 0), &gone, RunPhase::Ready, 1);
    let ops = reconcile(&[r], &[pod("p2")], &[runtime(2)], &settings(), at(1));
    let s = &statuses(&ops)["s"];
    assert_eq!(s.phase, Some(RunPhase::Failed));
    assert_eq!(s.reason.as_deref(), Some("OwnerLost"));
}

#[test]
fn a_rotated_ca_bundle_reaches_running_runs() {
    let p = pod("p1");
    let mut r = assigned(run("r", 0), &p, RunPhase::Ready, 1);
    r.status.endpoint = Some(endpoint(&r, &settings()));
    let rotated = Settings {
        ca_bundle: Some("TkVX".into()),
        ..settings()
    };
    let ops = reconcile(
        &[r],
        std::slice::from_ref(&p),
        &[runtime(2)],
        &rotated,
        at(1),
    );
    let s = &statuses(&ops)["r"];
    assert_eq!(
        s.endpoint.as_ref().unwrap().ca_bundle.as_deref(),
        Some("TkVX")
    );
    assert_eq!(s.phase, Some(RunPhase::Ready), "nothing else changes");
}

#[test]
fn live_owners_drive_their_runs() {
    let p = pod("p1");
    for phase in [
        RunPhase::Scheduled,
        RunPhase::Running,
        RunPhase::Ready,
        RunPhase::Finalizing,
    ] {
        let mut r = assigned(run("r", 0), &p, phase, 1);
        r.status.endpoint = Some(endpoint(&r, &settings()));
        r.termination = Some(TerminationMode::Immediate);
        let ops = reconcile(
            &[r],
            std::slice::from_ref(&p),
            &[runtime(2)],
            &settings(),
            at(1),
        );
        assert!(ops.is_empty(), "{phase:?}: {ops:?}");
    }
}

#[test]
fn spec_timeout_ends_the_run() {
    let p = pod("p1");
    let mut r = assigned(run("r", 0), &p, RunPhase::Ready, 1);
    r.status.endpoint = Some(endpoint(&r, &settings()));
    r.timeout = Some(60);
    assert!(
        reconcile(
            std::slice::from_ref(&r),
            std::slice::from_ref(&p),
            &[runtime(2)],
            &settings(),
            at(59)
        )
        .is_empty()
    );
    let ops = reconcile(&[r], &[p], &[runtime(2)], &settings(), at(60));
    let s = &statuses(&ops)["r"];
    assert_eq!(s.phase, Some(RunPhase::Timeout));
    assert_eq!(s.reason.as_deref(), Some("RunTimeout"));
}

#[test]
fn termination_before_scheduling_cancels() {
    let mut r = run("r", 0);
    r.termination = Some(TerminationMode::Drain);
    let ops = reconcile(&[r], &[], &[runtime(1)], &settings(), at(1));
    assert_eq!(statuses(&ops)["r"].phase, Some(RunPhase::Cancelled));
}

#[test]
fn invalid_runs_fail_with_a_reason_and_tasks_are_placed() {
    let mut bad = run("bad", 0);
    bad.mode = Err("spec.mode must set exactly one of task, function, session".into());
    let mut task = run("task", 0);
    task.mode = Ok(ModeKind::Task);
    let ops = reconcile(&[bad, task], &[pod("p")], &[runtime(2)], &settings(), at(1));
    let s = statuses(&ops);
    assert_eq!(s["bad"].reason.as_deref(), Some("InvalidSpec"));
    assert_eq!(s["task"].reason.as_deref(), Some("Scheduled"));
    assert_eq!(s["task"].assigned_pod.as_deref(), Some("p"));
    // A task is never called: its endpoint is where its artifacts are read.
    let url = &s["task"].endpoint.as_ref().unwrap().url;
    assert!(url.ends_with("/runs/uid-task/artifacts"), "{url}");
}

#[test]
fn finalizers_are_added_to_live_runs_and_released_when_the_owner_is_gone() {
    let p = pod("p1");
    let mut fresh = run("fresh", 0);
    fresh.has_finalizer = false;
    let ops = reconcile(&[fresh], &[], &[], &settings(), at(1));
    assert!(ops.contains(&Op::AddFinalizer {
        namespace: "a".into(),
        name: "fresh".into()
    }));

    // Deleting with a live owner: the owner cleans up and releases it.
    let mut owned = assigned(run("owned", 0), &p, RunPhase::Ready, 1);
    owned.status.endpoint = Some(endpoint(&owned, &settings()));
    owned.deleting = true;
    assert!(
        reconcile(
            &[owned],
            std::slice::from_ref(&p),
            &[runtime(2)],
            &settings(),
            at(1)
        )
        .is_empty()
    );
    // Deleting without an owner: the operator releases it.
    let mut orphan = assigned(run("orphan", 0), &p, RunPhase::Ready, 1);
    orphan.deleting = true;
    let mut pending = run("pending", 0);
    pending.deleting = true;
    let ops = reconcile(&[orphan, pending], &[], &[runtime(2)], &settings(), at(1));
    assert_eq!(ops.len(), 2);
    assert!(ops.iter().all(|o| matches!(o, Op::RemoveFinalizer { .. })));
}

#[test]
fn terminal_runs_are_left_alone() {
    for phase in [
        RunPhase::Succeeded,
        RunPhase::Failed,
        RunPhase::Timeout,
        RunPhase::Cancelled,
    ] {
        let mut r = run("r", 0);
        r.status.phase = Some(phase);
        r.has_finalizer = false;
        assert!(reconcile(&[r], &[pod("p")], &[runtime(2)], &settings(), at(1)).is_empty());
    }
}

#[test]
fn sessions_are_placed_before_older_function_runs() {
    let ops = reconcile(
        &[run("f", 0), session("s", 1)],
        &[pod("p1")],
        &[runtime(4)],
        &settings(),
        at(2),
    );
    let s = statuses(&ops);
    assert_eq!(s["s"].assigned_pod.as_deref(), Some("p1"));
    assert_eq!(s["f"].phase, Some(RunPhase::Pending));
}

#[test]
fn ended_runs_stay_published_as_failed_until_deleted() {
    let p = pod("p1");
    let mut ended = assigned(run("ended", 0), &p, RunPhase::Cancelled, 1);
    ended.status.reason = Some("Terminated".into());
    let live = assigned(run("live", 1), &p, RunPhase::Ready, 1);
    let mut deleting = assigned(run("deleting", 2), &p, RunPhase::Ready, 1);
    deleting.deleting = true;
    let entries = crate::cluster::views::ownership_entries(&[ended, live, deleting], &[p]);
    let phases: BTreeMap<&str, i32> = entries
        .iter()
        .map(|e| (e.run_name.as_str(), e.phase))
        .collect();
    assert_eq!(
        phases["ended"],
        kruntimes_proto::ownership::v1::Phase::Failed as i32
    );
    assert_eq!(
        phases["live"],
        kruntimes_proto::ownership::v1::Phase::Ready as i32
    );
    assert!(
        !phases.contains_key("deleting"),
        "a deleted Run's URL is unknown"
    );
}

#[test]
fn a_draining_run_whose_owner_is_lost_is_cancelled() {
    let gone = pod("gone");
    let mut r = assigned(run("r", 0), &gone, RunPhase::Finalizing, 1);
    r.termination = Some(TerminationMode::Drain);
    let ops = reconcile(&[r], &[pod("p2")], &[runtime(2)], &settings(), at(1));
    let s = &statuses(&ops)["r"];
    assert_eq!(s.phase, Some(RunPhase::Cancelled));
    assert_eq!(s.reason.as_deref(), Some("OwnerLost"));
}

#[test]
fn a_bind_records_its_time_and_a_run_not_ready_by_the_deadline_is_placed_again() {
    let p = pod("p1");
    let ops = reconcile(
        &[run("r", 0)],
        std::slice::from_ref(&p),
        &[runtime(2)],
        &settings(),
        at(5),
    );
    let bound = &statuses(&ops)["r"];
    let scheduled = bound.scheduled_time.as_ref().unwrap();
    assert_eq!(SystemTime::from(scheduled.0), at(5));

    let mut stuck = assigned(run("r", 0), &p, RunPhase::Running, 1);
    stuck.status.scheduled_time = Some(scheduled.clone());
    let ops = reconcile(
        std::slice::from_ref(&stuck),
        std::slice::from_ref(&p),
        &[runtime(2)],
        &settings(),
        at(124),
    );
    assert!(
        statuses(&ops)
            .get("r")
            .is_none_or(|s| s.phase == Some(RunPhase::Running))
    );
    let ops = reconcile(
        &[stuck],
        std::slice::from_ref(&p),
        &[runtime(2)],
        &settings(),
        at(125),
    );
    let s = &statuses(&ops)["r"];
    assert_eq!(s.phase, Some(RunPhase::Pending));
    assert_eq!(s.reason.as_deref(), Some("RegistrationTimeout"));
    assert_eq!(
        (s.assigned_pod.as_ref(), s.scheduled_time.as_ref()),
        (None, None)
    );
}

#[test]
fn a_finished_task_is_deleted_by_uid_once_its_ttl_has_passed_since_completion() {
    let p = pod("p1");
    let finished = |name: &str, ttl, completed: u64| {
        let mut r = assigned(run(name, 0), &p, RunPhase::Succeeded, 1);
        r.mode = Ok(ModeKind::Task);
        r.ttl_after_finished = ttl;
        r.status.completion_time = Some(Time(Timestamp::try_from(at(completed)).unwrap()));
        r
    };
    let runs = [
        finished("due", Some(60), 0),
        finished("early", Some(60), 1),
        finished("kept", None, 0),
    ];
    let ops = reconcile(
        &runs,
        std::slice::from_ref(&p),
        &[runtime(2)],
        &settings(),
        at(60),
    );
    assert_eq!(
        ops,
        vec![Op::Delete {
            namespace: "a".into(),
            name: "due".into(),
            uid: "uid-due".into(),
        }]
    );
}

#[test]
fn a_running_task_gets_its_artifacts_endpoint_from_the_owned_runs_refresh() {
    let p = pod("p1");
    let mut t = assigned(run("t", 0), &p, RunPhase::Running, 1);
    t.mode = Ok(ModeKind::Task);
    let f = assigned(run("f", 0), &p, RunPhase::Ready, 1);
    let ops = reconcile(
        &[t, f],
        std::slice::from_ref(&p),
        &[runtime(2)],
        &settings(),
        at(1),
    );
    let written = statuses(&ops);
    let url = &written["t"].endpoint.as_ref().unwrap().url;
    assert!(url.ends_with("/artifacts"), "{url}");
    assert!(
        written["f"]
            .endpoint
            .as_ref()
            .unwrap()
            .url
            .ends_with(":invoke")
    );
}
