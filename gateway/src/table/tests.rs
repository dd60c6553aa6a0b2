use super::fixtures::*;
use super::*;

#[test]
fn routes_when_assignment_and_readiness_agree() {
    let now = Instant::now();
    let t = ready_table(now);
    let r = t.route("default", "python", "u1", now).unwrap();
    assert_eq!(
        (r.address(), r.pod_uid(), r.attempt()),
        ("10.0.0.1:1", "pod-a", 2)
    );
    assert_eq!(
        t.owner_addresses().into_iter().collect::<Vec<_>>(),
        ["10.0.0.1:1"]
    );
}

#[test]
fn unknown_uid_or_wrong_namespace_or_runtime_is_not_found() {
    let now = Instant::now();
    let t = ready_table(now);
    assert_eq!(
        t.route("default", "python", "nope", now),
        Err(RouteError::NotFound)
    );
    assert_eq!(
        t.route("other", "python", "u1", now),
        Err(RouteError::NotFound)
    );
    assert_eq!(
        t.route("default", "bash", "u1", now),
        Err(RouteError::NotFound)
    );
}

#[test]
fn disagreement_on_attempt_or_pod_is_settling() {
    let now = Instant::now();
    let mut t = ready_table(now);
    t.apply_runtimed(
        "10.0.0.1:1",
        SourceUpdate::Upsert(Box::new(assignment(
            "u1",
            "pod-a",
            "10.0.0.1:1",
            1,
            Phase::Ready,
        ))),
        now,
    );
    assert!(matches!(
        t.route("default", "python", "u1", now),
        Err(RouteError::Settling(_))
    ));
    let mut t = ready_table(now);
    t.apply_runtimed("10.0.0.1:1", snap("pod-restarted", vec![]), now);
    assert!(matches!(
        t.route("default", "python", "u1", now),
        Err(RouteError::Settling(_))
    ));
}

#[test]
fn runs_on_their_way_settle_and_draining_registrations_are_not_ready() {
    let now = Instant::now();
    let mut t = Table::new(W);
    t.apply_control_plane(
        snap(
            "cp",
            vec![assignment("u1", "pod-a", "a:1", 1, Phase::Running)],
        ),
        now,
    );
    assert!(matches!(
        t.route("default", "python", "u1", now),
        Err(RouteError::Settling(_))
    ));
    t.apply_control_plane(
        SourceUpdate::Upsert(Box::new(assignment("u1", "pod-a", "a:1", 1, Phase::Ready))),
        now,
    );
    assert!(matches!(
        t.route("default", "python", "u1", now),
        Err(RouteError::Settling(_))
    ));
    // The owner's registration still on its way to Ready while the
    // control plane already says Ready: settling, not 503 at once.
    for phase in [Phase::Scheduled, Phase::Running] {
        t.apply_runtimed(
            "a:1",
            snap("pod-a", vec![assignment("u1", "pod-a", "a:1", 1, phase)]),
            now,
        );
        assert!(
            matches!(
                t.route("default", "python", "u1", now),
                Err(RouteError::Settling(_))
            ),
            "{phase:?}"
        );
    }
    t.apply_runtimed(
        "a:1",
        snap(
            "pod-a",
            vec![assignment("u1", "pod-a", "a:1", 1, Phase::Draining)],
        ),
        now,
    );
    assert!(matches!(
        t.route("default", "python", "u1", now),
        Err(RouteError::NotReady(_))
    ));
    t.apply_runtimed("a:1", SourceUpdate::Delete("u1".into()), now);
    assert!(matches!(
        t.route("default", "python", "u1", now),
        Err(RouteError::Settling(_))
    ));
}

#[test]
fn lost_streams_serve_within_the_window_then_go_stale() {
    let now = Instant::now();
    let mut t = ready_table(now);
    t.apply_runtimed("10.0.0.1:1", SourceUpdate::Lost, now);
    assert!(
        t.route("default", "python", "u1", now + Duration::from_secs(5))
            .is_ok()
    );
    // Repeated loss reports (failed reconnects) do not extend the window.
    t.apply_runtimed(
        "10.0.0.1:1",
        SourceUpdate::Lost,
        now + Duration::from_secs(5),
    );
    assert!(matches!(
        t.route("default", "python", "u1", now + Duration::from_secs(11)),
        Err(RouteError::Stale(_))
    ));
    let mut t = ready_table(now);
    t.apply_control_plane(SourceUpdate::Lost, now);
    assert!(t.control_plane_fresh(now + Duration::from_secs(9)));
    assert!(matches!(
        t.route("default", "python", "u1", now + Duration::from_secs(10)),
        Err(RouteError::Stale(_))
    ));
}

#[test]
fn reconnect_resnapshot_restores_routing_and_drops_deleted_runs() {
    let now = Instant::now();
    let mut t = ready_table(now);
    t.apply_control_plane(SourceUpdate::Lost, now);
    t.apply_control_plane(snap("cp-2", vec![]), now + Duration::from_secs(20));
    assert_eq!(
        t.route("default", "python", "u1", now + Duration::from_secs(20)),
        Err(RouteError::NotFound)
    );
    assert_eq!(t.len(), 0);
}

#[test]
fn empty_table_is_stale_until_first_snapshot() {
    let t = Table::new(W);
    assert!(!t.control_plane_fresh(Instant::now()));
    assert!(matches!(
        t.route("default", "python", "u1", Instant::now()),
        Err(RouteError::Stale(_))
    ));
}

#[test]
fn pending_runs_wait_and_ended_ones_say_so_not_settling() {
    let now = Instant::now();
    let mut t = ready_table(now);
    t.apply_control_plane(
        SourceUpdate::Upsert(Box::new(assignment(
            "u1",
            "pod-a",
            "10.0.0.1:1",
            2,
            Phase::Pending,
        ))),
        now,
    );
    assert!(matches!(
        t.route("default", "python", "u1", now),
        Err(RouteError::Pending(e)) if e.run_uid == "u1"
    ));
    for phase in [Phase::Draining, Phase::Failed] {
        let mut t = ready_table(now);
        let mut ended = assignment("u1", "pod-a", "10.0.0.1:1", 2, phase);
        ended.run_phase = "Failed".into();
        t.apply_control_plane(SourceUpdate::Upsert(Box::new(ended)), now);
        assert!(
            matches!(
                t.route("default", "python", "u1", now),
                Err(RouteError::Ended(e)) if e.run_phase == "Failed"
            ),
            "{phase:?}"
        );
    }
}

#[test]
fn an_owner_reporting_idle_expiry_ends_the_run_and_other_failures_leave_it_to_the_control_plane() {
    let now = Instant::now();
    let mut t = ready_table(now);
    let mut expired = assignment("u1", "pod-a", "10.0.0.1:1", 2, Phase::Failed);
    expired.reason = "IdleTimeout".into();
    t.apply_runtimed("10.0.0.1:1", SourceUpdate::Upsert(Box::new(expired)), now);
    assert!(matches!(
        t.route("default", "python", "u1", now),
        Err(RouteError::Ended(e)) if e.reason == "IdleTimeout"
    ));
    let mut lost = assignment("u1", "pod-a", "10.0.0.1:1", 2, Phase::Failed);
    lost.reason = "RuntimeServerLost".into();
    t.apply_runtimed("10.0.0.1:1", SourceUpdate::Upsert(Box::new(lost)), now);
    assert!(matches!(
        t.route("default", "python", "u1", now),
        Err(RouteError::NotReady(_))
    ));
}

#[test]
fn every_change_wakes_subscribers() {
    let now = Instant::now();
    let mut t = Table::new(W);
    let mut rx = t.subscribe();
    assert!(!rx.has_changed().unwrap());
    t.apply_control_plane(snap("cp", vec![]), now);
    assert!(rx.has_changed().unwrap());
    rx.mark_unchanged();
    t.apply_runtimed("a:1", snap("pod-a", vec![]), now);
    assert!(rx.has_changed().unwrap());
    rx.mark_unchanged();
    t.remove_runtimed("a:1");
    assert!(rx.has_changed().unwrap());
}

#[test]
fn routes_share_the_tables_assignment_and_need_an_owner() {
    let now = Instant::now();
    let t = ready_table(now);
    let (a, b) = (
        t.route("default", "python", "u1", now).unwrap(),
        t.route("default", "python", "u1", now).unwrap(),
    );
    // A route copies nothing out of the table: both share its entry.
    assert!(Arc::ptr_eq(&a.assignment, &b.assignment));
    assert_eq!(
        (a.pod_name(), a.run_name(), a.mode()),
        ("runtimed-0", "run-u1", 0)
    );
    let mut ownerless = assignment("u2", "pod-a", "10.0.0.1:1", 1, Phase::Ready);
    ownerless.owner = None;
    assert_eq!(Route::new(Arc::new(ownerless), None), None);
}
