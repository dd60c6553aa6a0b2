//! Owner loss, restarts and registration outcomes.

use super::*;

#[test]
fn pod_restart_fences_runs_and_reregisters_with_the_next_attempt() {
    let now = Instant::now();
    let mut c = controller(1);
    c.apply_pod("runtimed-0", snapshot("old", vec![]), now);
    let actions = c.apply_store(functions(&["a"]), now);
    settle(&mut c, actions, now);
    let a = uid(&c, "a");
    let actions = c.apply_pod("runtimed-0", snapshot("new", vec![]), now);
    assert!(registers(&actions).is_empty(), "backoff first");
    assert_eq!(life(&c, "a"), (Phase::Pending, Some(Reason::OwnerLost), 1));
    assert!(by_name(&c, "a").message.contains("attempt 2 of 4"));
    let actions = c.tick(now + Duration::from_millis(150));
    assert_eq!(registers(&actions), vec![("runtimed-0".into(), 2)]);
    assert_eq!(
        by_name(&c, "a").owner.as_ref().map(|o| o.pod_uid.as_str()),
        Some("new")
    );
    // A late result of attempt 1 is ignored.
    c.register_result(&a, 1, RegisterOutcome::Ok, now);
    assert_eq!(
        life(&c, "a"),
        (Phase::Running, Some(Reason::Registering), 2)
    );
}

#[test]
fn pod_lost_beyond_grace_moves_its_runs() {
    let now = Instant::now();
    let mut c = controller(2);
    c.apply_pod("runtimed-0", snapshot("u0", vec![]), now);
    let actions = c.apply_store(functions(&["a"]), now);
    settle(&mut c, actions, now);
    c.apply_pod("runtimed-1", snapshot("u1", vec![]), now);
    c.apply_pod("runtimed-0", SourceUpdate::Lost, now);
    assert!(c.tick(now + Duration::from_secs(1)).is_empty());
    assert_eq!(life(&c, "a").0, Phase::Ready, "within grace");
    c.tick(now + Duration::from_secs(6));
    let actions = c.tick(now + Duration::from_secs(7));
    assert_eq!(registers(&actions), vec![("runtimed-1".into(), 2)]);
}

#[test]
fn retry_policy_exhaustion_fails_the_run() {
    let now = Instant::now();
    let mut c = connected(1, now);
    let mut a = function("a");
    a.spec.retry_policy.max_retries = 0;
    let actions = c.apply_store(store(&[a]), now);
    settle(&mut c, actions, now);
    c.apply_pod("runtimed-0", snapshot("u0-restarted", vec![]), now);
    assert_eq!(life(&c, "a"), (Phase::Failed, Some(Reason::OwnerLost), 1));
    assert!(by_name(&c, "a").message.contains("exhausted"));
}

#[test]
fn a_missing_registration_of_a_ready_function_is_rebuilt_and_orphans_released() {
    let now = Instant::now();
    let mut c = connected(1, now);
    let actions = c.apply_store(functions(&["a"]), now);
    settle(&mut c, actions, now);
    let orphan = entry("orphan", 1, own::Phase::Ready, "");
    assert!(
        c.apply_pod("runtimed-0", SourceUpdate::Lost, now)
            .is_empty()
    );
    // Same instance, registration gone (runtimed lost it), an orphan left.
    let actions = c.apply_pod("runtimed-0", snapshot("u0", vec![orphan]), now);
    assert_eq!(registers(&actions), vec![("runtimed-0".into(), 1)]);
    assert_eq!(life(&c, "a").0, Phase::Ready, "recovery keeps Ready");
    assert!(actions.contains(&Action::Release {
        pod: "runtimed-0".into(),
        run_uid: "orphan".into(),
        cancel: true,
        keep: false
    }));
    // The orphan's release is not repeated while in flight.
    let again = c.tick(now);
    assert!(
        !again
            .iter()
            .any(|a| matches!(a, Action::Release { run_uid, .. } if run_uid == "orphan"))
    );
}

#[test]
fn refused_registrations_fail_and_unreachable_owners_count_as_lost() {
    let now = Instant::now();
    let mut c = connected(1, now);
    c.apply_store(functions(&["a", "b"]), now);
    let (a, b) = (uid(&c, "a"), uid(&c, "b"));
    c.register_result(
        &a,
        1,
        RegisterOutcome::Permanent("SyntaxError: bad".into()),
        now,
    );
    assert_eq!(
        life(&c, "a"),
        (Phase::Failed, Some(Reason::RegistrationFailed), 1)
    );
    assert!(by_name(&c, "a").message.contains("SyntaxError"));
    c.register_result(&b, 1, RegisterOutcome::Retryable("unavailable".into()), now);
    assert_eq!(life(&c, "b"), (Phase::Pending, Some(Reason::OwnerLost), 1));
    let actions = c.tick(now + Duration::from_millis(200));
    assert_eq!(registers(&actions), vec![("runtimed-0".into(), 2)]);
}

#[test]
fn a_lost_owner_ends_a_session_instead_of_moving_it() {
    let now = Instant::now();
    let mut c = connected(1, now);
    let actions = c.apply_store(store(&[session("s")]), now);
    settle(&mut c, actions, now);
    assert_eq!(life(&c, "s").0, Phase::Ready);
    let actions = c.apply_pod("runtimed-0", snapshot("u0-restarted", vec![]), now);
    assert!(registers(&actions).is_empty());
    assert_eq!(life(&c, "s"), (Phase::Failed, Some(Reason::OwnerLost), 1));
}

#[test]
fn a_ready_session_missing_from_its_living_owner_is_lost() {
    let now = Instant::now();
    let mut c = connected(1, now);
    let actions = c.apply_store(store(&[session("s")]), now);
    settle(&mut c, actions, now);
    let s = uid(&c, "s");
    let actions = c.apply_pod("runtimed-0", SourceUpdate::Delete(s), now);
    assert!(
        actions.is_empty(),
        "a workspace is never silently recreated"
    );
    assert_eq!(life(&c, "s"), (Phase::Failed, Some(Reason::SessionLost), 1));
}
