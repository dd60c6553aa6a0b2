//! Termination, timeouts, idle expiry and deletion.

use super::*;

#[test]
fn deleting_a_run_cancels_it_and_frees_capacity_once_released() {
    let now = Instant::now();
    let mut c = Controller::new(pods(1, 1), Duration::from_secs(5), Duration::ZERO);
    c.apply_pod("runtimed-0", snapshot("u", vec![]), now);
    let actions = c.apply_store(functions(&["a", "b"]), now);
    settle(&mut c, actions, now);
    let a = uid(&c, "a");
    assert_eq!(life(&c, "b").0, Phase::Pending);
    let actions = c.apply_store(functions(&["b"]), now);
    assert_eq!(
        actions,
        vec![Action::Release {
            pod: "runtimed-0".into(),
            run_uid: a.clone(),
            cancel: true,
            keep: false
        }],
        "b waits until a is released"
    );
    assert!(c.ownership_entries().iter().all(|e| e.run_uid != a));
    let seen = settle(&mut c, actions, now);
    assert_eq!(registers(&seen), vec![("runtimed-0".into(), 1)]);
    assert_eq!(life(&c, "b").0, Phase::Ready);
}

#[test]
fn deleting_a_draining_run_lets_the_drain_finish() {
    let now = Instant::now();
    let mut c = connected(1, now);
    let actions = c.apply_store(functions(&["a"]), now);
    settle(&mut c, actions, now);
    let a = uid(&c, "a");
    let mut drain = function("a");
    drain.spec.termination = Some(Termination {
        mode: TerminationMode::Drain,
    });
    c.apply_store(store(&[drain]), now);
    let actions = c.apply_store(BTreeMap::new(), now);
    assert!(actions.is_empty(), "the drain in flight is not repeated");
    // Answered before the owner's table shows the drain's end: waited for.
    assert!(c.release_result("runtimed-0", &a, true, now).is_empty());
    assert!(c.runs.contains_key(&a));
    c.apply_pod("runtimed-0", SourceUpdate::Delete(a.clone()), now);
    assert!(!c.runs.contains_key(&a));
}

/// A session Run `a`, Ready, then asked to drain: the time, the controller,
/// its UID and the drain's actions.
fn draining_session() -> (Instant, Controller, String, Vec<Action>) {
    let now = Instant::now();
    let mut c = connected(1, now);
    let actions = c.apply_store(store(&[session("a")]), now);
    settle(&mut c, actions, now);
    let a = uid(&c, "a");
    let mut drain = session("a");
    drain.spec.termination = Some(Termination {
        mode: TerminationMode::Drain,
    });
    let actions = c.apply_store(store(&[drain]), now);
    (now, c, a, actions)
}

/// A drained session whose owner exports artifacts: the drain's answer can
/// come before the table shows the export. The drain is not asked again (a
/// session already drained has nothing left to export); the outcome, once
/// published, ends the Run with its artifacts.
#[test]
fn a_drains_answer_before_its_export_shows_waits_for_the_export() {
    let (now, mut c, a, actions) = draining_session();
    assert!(
        matches!(&actions[..], [Action::Release { cancel: false, .. }]),
        "{actions:?}"
    );
    let mut closing = entry(&a, 1, own::Phase::Draining, "Closing");
    closing.mode = own::Mode::Session as i32;
    let actions = c.apply_pod("runtimed-0", SourceUpdate::Upsert(Box::new(closing)), now);
    assert!(actions.is_empty(), "{actions:?}");
    let actions = c.release_result("runtimed-0", &a, true, now);
    assert!(
        actions.is_empty(),
        "the drain is not asked again: {actions:?}"
    );
    assert_eq!(
        life(&c, "a"),
        (Phase::Finalizing, Some(Reason::Draining), 1)
    );
    let mut drained = entry(&a, 1, own::Phase::Draining, "Drained");
    drained.mode = own::Mode::Session as i32;
    drained.export = Some(own::ExportOutcome {
        artifacts: vec![own::ArtifactRef {
            name: "notes/result.md".into(),
            uri: "file:///store/default/a/notes/result.md".into(),
            size: 14,
            sha256: "ab".repeat(32),
        }],
        ..Default::default()
    });
    let actions = c.apply_pod("runtimed-0", SourceUpdate::Upsert(Box::new(drained)), now);
    assert_eq!(life(&c, "a"), (Phase::Succeeded, Some(Reason::Drained), 1));
    assert_eq!(by_name(&c, "a").artifacts[0].name, "notes/result.md");
    assert!(
        matches!(&actions[..], [Action::Release { cancel: true, .. }]),
        "what the owner kept is forgotten: {actions:?}"
    );
}

/// A drain that failed is asked again, table or not.
#[test]
fn a_failed_drain_is_asked_again() {
    let (now, mut c, a, _) = draining_session();
    let actions = c.release_result("runtimed-0", &a, false, now);
    assert!(
        matches!(&actions[..], [Action::Release { cancel: false, .. }]),
        "{actions:?}"
    );
}

#[test]
fn idle_timeout_ends_the_run_and_releases_capacity() {
    let now = Instant::now();
    let mut c = Controller::new(pods(1, 1), Duration::from_secs(5), Duration::ZERO);
    c.apply_pod("runtimed-0", snapshot("u", vec![]), now);
    let actions = c.apply_store(functions(&["a", "b"]), now);
    settle(&mut c, actions, now);
    let a = uid(&c, "a");
    let idle = entry(&a, 1, own::Phase::Failed, "IdleTimeout");
    let actions = c.apply_pod("runtimed-0", SourceUpdate::Upsert(Box::new(idle)), now);
    assert_eq!(
        life(&c, "a"),
        (Phase::Timeout, Some(Reason::IdleTimeout), 1)
    );
    assert!(actions.contains(&Action::Release {
        pod: "runtimed-0".into(),
        run_uid: a,
        cancel: true,
        keep: false
    }));
    // b takes the capacity the ended Run no longer holds.
    assert_eq!(registers(&actions), vec![("runtimed-0".into(), 1)]);
    settle(&mut c, actions, now);
    assert_eq!(life(&c, "b").0, Phase::Ready);
}

#[test]
fn drain_termination_finalizes_then_succeeds_and_immediate_cancels() {
    let now = Instant::now();
    let mut c = connected(2, now);
    let actions = c.apply_store(store(&[session("a"), session("b")]), now);
    settle(&mut c, actions, now);
    let (a, b) = (uid(&c, "a"), uid(&c, "b"));
    let mut ta = session("a");
    ta.spec.termination = Some(Termination {
        mode: TerminationMode::Drain,
    });
    let mut tb = session("b");
    tb.spec.termination = Some(Termination {
        mode: TerminationMode::Immediate,
    });
    let actions = c.apply_store(store(&[ta, tb]), now);
    assert_eq!(uid(&c, "a"), a, "termination does not replace the Run");
    assert_eq!(
        life(&c, "a"),
        (Phase::Finalizing, Some(Reason::Draining), 1)
    );
    assert_eq!(
        life(&c, "b"),
        (Phase::Cancelled, Some(Reason::Terminated), 1)
    );
    assert!(
        actions
            .iter()
            .any(|x| matches!(x, Action::Release { run_uid, cancel: false, .. } if *run_uid == a))
    );
    assert!(
        actions
            .iter()
            .any(|x| matches!(x, Action::Release { run_uid, cancel: true, .. } if *run_uid == b))
    );
    settle(&mut c, actions, now);
    assert_eq!(life(&c, "a"), (Phase::Succeeded, Some(Reason::Drained), 1));
    // Monotonic: going back to Drain or removing termination changes nothing.
    assert!(
        c.apply_store(store(&[session("a"), session("b")]), now)
            .is_empty()
    );
    assert_eq!(life(&c, "b").0, Phase::Cancelled);
}

#[test]
fn termination_before_a_pod_cancels_the_run() {
    let now = Instant::now();
    let mut c = controller(1);
    let mut a = function("a");
    a.spec.termination = Some(Termination {
        mode: TerminationMode::Drain,
    });
    c.apply_store(store(&[a]), now);
    assert_eq!(
        life(&c, "a"),
        (Phase::Cancelled, Some(Reason::Terminated), 0)
    );
    assert!(
        c.apply_pod("runtimed-0", snapshot("u0", vec![]), now)
            .is_empty()
    );
}

#[test]
fn idle_sessions_time_out_and_are_closed() {
    let now = Instant::now();
    let mut c = connected(1, now);
    let actions = c.apply_store(store(&[session("s")]), now);
    settle(&mut c, actions, now);
    let s = uid(&c, "s");
    let mut e = entry(&s, 1, own::Phase::Failed, "IdleTimeout");
    e.mode = own::Mode::Session as i32;
    let actions = c.apply_pod("runtimed-0", SourceUpdate::Upsert(Box::new(e)), now);
    assert_eq!(life(&c, "s").0, Phase::Timeout);
    assert_eq!(
        actions,
        vec![Action::Release {
            pod: "runtimed-0".into(),
            run_uid: s,
            cancel: true,
            keep: false
        }]
    );
}

#[test]
fn total_timeout_ends_the_run_and_releases_it() {
    let now = Instant::now();
    let mut c = connected(1, now);
    let mut s = session("s");
    s.spec.timeout = Some(10);
    let actions = c.apply_store(store(&[s]), now);
    settle(&mut c, actions, now);
    let s = uid(&c, "s");
    assert!(c.tick(now + Duration::from_secs(9)).is_empty());
    let actions = c.tick(now + Duration::from_secs(10));
    assert_eq!(life(&c, "s"), (Phase::Timeout, Some(Reason::RunTimeout), 1));
    assert_eq!(
        actions,
        vec![Action::Release {
            pod: "runtimed-0".into(),
            run_uid: s,
            cancel: true,
            keep: false
        }]
    );
}

#[test]
fn ended_runs_stay_published_as_failed_and_deleted_runs_leave() {
    let now = Instant::now();
    let mut c = connected(1, now);
    let actions = c.apply_store(functions(&["a"]), now);
    settle(&mut c, actions, now);
    let a = uid(&c, "a");
    let mut ta = function("a");
    ta.spec.termination = Some(Termination {
        mode: TerminationMode::Immediate,
    });
    let actions = c.apply_store(store(&[ta]), now);
    settle(&mut c, actions, now);
    let e = c.ownership_entries().pop().unwrap();
    assert_eq!(
        (e.run_uid.as_str(), e.phase),
        (a.as_str(), own::Phase::Failed as i32)
    );
    c.apply_store(BTreeMap::new(), now);
    assert!(c.ownership_entries().is_empty());
    assert!(c.status("https://gw").is_empty());
}
