//! Task Runs on the embedded control plane: started once, their exit
//! reported with the result, capacity freed at the exit, kept until
//! deleted, retried on the codes the policy names after a backoff, killed
//! by `Immediate` termination.

use super::*;

fn task(name: &str, script: &str) -> Run {
    let mut run = function(name);
    run.spec.runtime = "bash".into();
    run.spec.source = SourceSpec {
        inline: Some(script.into()),
        inline_path: None,
    };
    run.spec.mode = RunMode {
        task: Some(TaskMode::default()),
        ..Default::default()
    };
    run
}

/// runtimed's table entry of a task that ended with `code`.
fn exited(uid: &str, attempt: u64, code: i32) -> SourceUpdate {
    let mut e = entry(uid, attempt, own::Phase::Running, "");
    e.mode = own::Mode::Task as i32;
    e.task = Some(own::TaskOutcome {
        ended: true,
        exit_code: code,
        stdout_tail: format!("exit {code}\n"),
        started_unix_ms: 1_700_000_000_000,
        finished_unix_ms: 1_700_000_000_040,
        ..Default::default()
    });
    SourceUpdate::Upsert(Box::new(e))
}

/// The release of a deleted task Run on `runtimed-0`: its result and log go.
fn released_for_good(run_uid: String) -> Action {
    Action::Release {
        pod: "runtimed-0".into(),
        run_uid,
        cancel: true,
        keep: false,
    }
}

fn pod_used(c: &Controller) -> u32 {
    c.pod_status()[0].used
}

#[test]
fn a_task_starts_once_and_its_exit_ends_the_run_and_frees_the_pod_at_once() {
    let now = Instant::now();
    let mut c = connected(1, now);
    let actions = c.apply_store(store(&[task("t", "echo hi")]), now);
    let seen = settle(&mut c, actions, now);
    assert_eq!(registers(&seen).len(), 1, "started once");
    assert_eq!(life(&c, "t"), (Phase::Running, Some(Reason::Started), 1));
    assert_eq!(pod_used(&c), 1);
    let u = uid(&c, "t");
    let actions = c.apply_pod("runtimed-0", exited(&u, 1, 0), now);
    assert!(actions.is_empty(), "the result is kept: {actions:?}");
    assert_eq!(
        life(&c, "t"),
        (Phase::Succeeded, Some(Reason::Completed), 1)
    );
    assert_eq!(pod_used(&c), 0);
    let status = c.status("https://gw").remove(0);
    let t = status.task.unwrap();
    assert_eq!(
        (t.exit_code, t.attempt, t.stdout_tail.as_str()),
        (0, 1, "exit 0\n")
    );
    assert!(
        status
            .endpoint
            .as_deref()
            .unwrap()
            .ends_with(&format!("/runs/{u}/artifacts")),
        "{:?}",
        status.endpoint
    );
    // Deleting the Run releases it for good (result and log).
    let actions = c.apply_store(BTreeMap::new(), now);
    assert_eq!(actions, vec![released_for_good(u)]);
}

#[test]
fn a_non_zero_exit_fails_unless_the_policy_retries_that_code_after_a_backoff() {
    let now = Instant::now();
    let mut c = connected(1, now);
    let mut retried = task("r", "exit 3");
    retried.spec.retry_policy.on_exit_codes = vec![3];
    let actions = c.apply_store(store(&[task("f", "exit 3"), retried]), now);
    settle(&mut c, actions, now);
    let (f, r) = (uid(&c, "f"), uid(&c, "r"));
    c.apply_pod("runtimed-0", exited(&f, 1, 3), now);
    assert_eq!(life(&c, "f"), (Phase::Failed, Some(Reason::NonZeroExit), 1));
    assert_eq!(by_name(&c, "f").message, "exited with code 3");
    let actions = c.apply_pod("runtimed-0", exited(&r, 1, 3), now);
    assert_eq!(
        life(&c, "r"),
        (Phase::Pending, Some(Reason::NonZeroExit), 1)
    );
    assert!(by_name(&c, "r").owner.is_none());
    assert_eq!(by_name(&c, "r").task.as_ref().map(|t| t.exit_code), Some(3));
    // A late word of the fenced attempt changes nothing.
    let mut actions = actions;
    actions.extend(c.apply_pod("runtimed-0", exited(&r, 1, 0), now));
    assert_eq!(
        life(&c, "r"),
        (Phase::Pending, Some(Reason::NonZeroExit), 1)
    );
    // Not placed again before its backoff; the old attempt is released.
    let seen = settle(&mut c, actions, now);
    assert!(registers(&seen).is_empty(), "{seen:?}");
    let later = now + lifecycle::retry_backoff(1) + Duration::from_millis(1);
    let actions = c.tick(later);
    let seen = settle(&mut c, actions, later);
    assert_eq!(registers(&seen), [("runtimed-0".to_owned(), 2)]);
    assert_eq!(life(&c, "r"), (Phase::Running, Some(Reason::Started), 2));
}

#[test]
fn a_task_that_cannot_start_is_retried_then_fails() {
    let now = Instant::now();
    let mut c = connected(1, now);
    let mut t = task("t", "x");
    t.spec.retry_policy.max_retries = 0;
    let actions = c.apply_store(store(&[t]), now);
    let attempt = registers(&actions)[0].1;
    let u = uid(&c, "t");
    c.register_result(
        &u,
        attempt,
        RegisterOutcome::Permanent("python3: not found".into()),
        now,
    );
    assert_eq!(life(&c, "t"), (Phase::Failed, Some(Reason::StartFailed), 1));
    assert!(by_name(&c, "t").message.contains("python3: not found"));

    // With a retry left, it waits out the lifecycle's backoff (1 s after
    // attempt 1), not the stack's own.
    let mut r = task("r", "x");
    r.spec.retry_policy.max_retries = 1;
    let actions = c.apply_store(store(&[r]), now);
    let attempt = registers(&actions)[0].1;
    let u = uid(&c, "r");
    let actions = c.register_result(
        &u,
        attempt,
        RegisterOutcome::Permanent("python3: not found".into()),
        now,
    );
    assert!(
        registers(&actions).is_empty(),
        "retried at once: {actions:?}"
    );
    assert_eq!(life(&c, "r").0, Phase::Pending);
    assert!(registers(&c.tick(now + Duration::from_millis(900))).is_empty());
    let again = c.tick(now + Duration::from_secs(1));
    assert_eq!(registers(&again).len(), 1, "{again:?}");
}

#[test]
fn immediate_termination_kills_a_running_task_and_keeps_it() {
    let now = Instant::now();
    let mut c = connected(1, now);
    let actions = c.apply_store(store(&[task("t", "sleep 100")]), now);
    settle(&mut c, actions, now);
    let mut t = task("t", "sleep 100");
    t.spec.termination = Some(Termination {
        mode: kruntimes_api::TerminationMode::Immediate,
    });
    let actions = c.apply_store(store(&[t]), now);
    assert!(
        matches!(
            &actions[..],
            [Action::Release {
                keep: true,
                cancel: true,
                ..
            }]
        ),
        "{actions:?}"
    );
    assert_eq!(
        life(&c, "t"),
        (Phase::Cancelled, Some(Reason::Terminated), 1)
    );
    assert_eq!(pod_used(&c), 0);
    let seen = settle(&mut c, actions, now);
    assert_eq!(seen.len(), 1, "killed once: {seen:?}");
}

#[test]
fn a_finished_task_is_deleted_once_its_ttl_has_passed() {
    let now = Instant::now();
    let mut c = connected(1, now);
    let mut t = task("t", "true");
    t.spec.ttl_seconds_after_finished = Some(30);
    let kept = task("kept", "true");
    let actions = c.apply_store(store(&[t.clone(), kept.clone()]), now);
    settle(&mut c, actions, now);
    for name in ["t", "kept"] {
        let u = uid(&c, name);
        c.apply_pod("runtimed-0", exited(&u, 1, 0), now);
    }
    let delete = Action::Delete {
        namespace: "default".into(),
        name: "t".into(),
    };
    // Not before the TTL, counted from the end, not the creation.
    let later = now + Duration::from_secs(29);
    assert!(!c.tick(later).contains(&delete));
    let due = now + Duration::from_secs(30);
    let actions = c.tick(due);
    assert_eq!(actions, vec![delete], "asked for once, for it alone");
    assert!(
        c.tick(due + Duration::from_secs(60)).is_empty(),
        "asked once"
    );
    // The store drops it: released for good (result and log).
    let u = uid(&c, "t");
    let actions = c.apply_store(store(&[kept]), due);
    assert_eq!(actions, vec![released_for_good(u)]);
}
