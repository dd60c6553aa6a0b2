use kruntimes_api::{
    FunctionMode, Phase, Reason, RunMode, RunSpec, SessionMode, SourceSpec, TaskMode, Termination,
};

use super::*;

fn function(name: &str) -> Run {
    let mut run = Run::new(
        name,
        RunSpec {
            runtime: "python".into(),
            source: SourceSpec {
                inline: Some("def invoke(r): return r".into()),
                inline_path: Some("main.py".into()),
            },
            mode: RunMode {
                function: Some(FunctionMode {
                    handler: "main.invoke".into(),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        },
    );
    run.metadata.namespace = Some("default".into());
    run
}

fn session(name: &str) -> Run {
    let mut run = function(name);
    run.spec.runtime = "bash".into();
    run.spec.mode = RunMode {
        session: Some(SessionMode {
            idle_timeout_seconds: Some(60),
            queue_size: Some(4),
            operation_timeout: Some(30),
        }),
        ..Default::default()
    };
    run
}

fn store(runs: &[Run]) -> BTreeMap<String, Run> {
    runs.iter().map(|r| (r.key(), r.clone())).collect()
}

fn functions(names: &[&str]) -> BTreeMap<String, Run> {
    store(&names.iter().map(|n| function(n)).collect::<Vec<_>>())
}

fn pods(n: usize, capacity: u32) -> Vec<PodConfig> {
    (0..n)
        .map(|i| PodConfig {
            name: format!("runtimed-{i}"),
            address: format!("127.0.0.1:{}", 9000 + i),
            capacity,
        })
        .collect()
}

fn controller(n: usize) -> Controller {
    Controller::new(
        pods(n, 2),
        Duration::from_secs(5),
        Duration::from_millis(100),
    )
}

fn snapshot(instance: &str, entries: Vec<own::OwnershipEntry>) -> SourceUpdate {
    SourceUpdate::Snapshot {
        instance_id: instance.into(),
        entries,
    }
}

fn by_name<'a>(c: &'a Controller, name: &str) -> &'a RunState {
    c.runs().find(|r| r.run.name_str() == name).unwrap()
}

fn life(c: &Controller, name: &str) -> (Phase, Option<Reason>, u64) {
    let l = by_name(c, name).life;
    (l.phase, l.reason, l.attempt)
}

fn uid(c: &Controller, name: &str) -> String {
    by_name(c, name).uid().to_owned()
}

fn registers(actions: &[Action]) -> Vec<(String, u64)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Register { pod, request } => Some((pod.clone(), request.attempt)),
            Action::OpenSession { pod, request } => Some((pod.clone(), request.attempt)),
            _ => None,
        })
        .collect()
}

fn entry(uid: &str, attempt: u64, phase: own::Phase, reason: &str) -> own::OwnershipEntry {
    own::OwnershipEntry {
        run_uid: uid.into(),
        attempt,
        phase: phase as i32,
        reason: reason.into(),
        ..Default::default()
    }
}

/// Healthy runtimed instances: every action succeeds and shows in the
/// owner's table, as the real ones publish it. Returns every action seen.
fn settle(c: &mut Controller, mut actions: Vec<Action>, now: Instant) -> Vec<Action> {
    let mut seen = Vec::new();
    while let Some(action) = actions.pop() {
        seen.push(action.clone());
        match action {
            Action::Register { pod, request } => {
                let uid = request.run.unwrap().uid;
                let e = entry(&uid, request.attempt, own::Phase::Ready, "");
                actions.extend(c.apply_pod(&pod, SourceUpdate::Upsert(e), now));
                actions.extend(c.register_result(&uid, request.attempt, RegisterOutcome::Ok, now));
            }
            Action::OpenSession { pod, request } => {
                let uid = request.run.unwrap().uid;
                let mut e = entry(&uid, request.attempt, own::Phase::Ready, "");
                e.mode = own::Mode::Session as i32;
                actions.extend(c.apply_pod(&pod, SourceUpdate::Upsert(e), now));
                actions.extend(c.register_result(&uid, request.attempt, RegisterOutcome::Ok, now));
            }
            Action::Unregister { pod, run_uid, .. } | Action::CloseSession { pod, run_uid, .. } => {
                actions.extend(c.apply_pod(&pod, SourceUpdate::Delete(run_uid.clone()), now));
                actions.extend(c.release_result(&pod, &run_uid, now));
            }
        }
    }
    seen
}

/// A controller with `n` connected Pods (instances `u0`, `u1`, …).
fn connected(n: usize, now: Instant) -> Controller {
    let mut c = controller(n);
    for i in 0..n {
        c.apply_pod(
            &format!("runtimed-{i}"),
            snapshot(&format!("u{i}"), vec![]),
            now,
        );
    }
    c
}

#[test]
fn runs_wait_for_a_pod_register_and_become_ready_from_the_owners_table() {
    let now = Instant::now();
    let mut c = controller(1);
    assert!(c.apply_store(functions(&["a"]), now).is_empty());
    assert_eq!(
        life(&c, "a"),
        (Phase::Pending, Some(Reason::Unschedulable), 0)
    );
    let actions = c.apply_pod("runtimed-0", snapshot("uid-0", vec![]), now);
    assert_eq!(registers(&actions), vec![("runtimed-0".into(), 1)]);
    assert_eq!(
        life(&c, "a"),
        (Phase::Running, Some(Reason::Registering), 1)
    );
    let a = uid(&c, "a");
    // The RPC answered, but Ready is what the owner's table says.
    c.register_result(&a, 1, RegisterOutcome::Ok, now);
    assert_eq!(life(&c, "a").0, Phase::Running);
    let ready = entry(&a, 1, own::Phase::Ready, "");
    assert!(
        c.apply_pod("runtimed-0", SourceUpdate::Upsert(ready), now)
            .is_empty()
    );
    assert_eq!(life(&c, "a"), (Phase::Ready, Some(Reason::Registered), 1));
    let e = c.ownership_entries().pop().unwrap();
    assert_eq!(e.phase, own::Phase::Ready as i32);
    let owner = e.owner.unwrap();
    assert_eq!(
        (owner.pod_name.as_str(), owner.pod_uid.as_str()),
        ("runtimed-0", "uid-0")
    );
    let st = c.status("https://gw").pop().unwrap();
    assert_eq!(
        st.endpoint.unwrap(),
        format!("https://gw/v1/namespaces/default/runtimes/python/runs/{a}:invoke")
    );
    assert_eq!(st.reason, "Registered");
}

#[test]
fn runs_spread_over_pods_within_capacity() {
    let now = Instant::now();
    let mut c = connected(2, now);
    let actions = c.apply_store(functions(&["a", "b", "c", "d", "e"]), now);
    let mut per_pod = BTreeMap::new();
    for (pod, _) in registers(&actions) {
        *per_pod.entry(pod).or_insert(0) += 1;
    }
    assert_eq!(per_pod.get("runtimed-0"), Some(&2));
    assert_eq!(per_pod.get("runtimed-1"), Some(&2));
    assert_eq!(
        c.runs().filter(|r| r.life.phase == Phase::Pending).count(),
        1
    );
}

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
        vec![Action::Unregister {
            pod: "runtimed-0".into(),
            run_uid: a.clone(),
            mode: pb::UnregisterMode::Cancel
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
    c.release_result("runtimed-0", &a, now);
    assert!(c.runs().next().is_none());
}

#[test]
fn a_changed_spec_replaces_the_run_and_mutable_fields_change_in_place() {
    let now = Instant::now();
    let mut c = controller(1);
    c.apply_store(functions(&["a"]), now);
    let old = uid(&c, "a");
    let mut mutable = function("a");
    mutable.spec.timeout = Some(30);
    mutable.spec.retry_policy.max_retries = 7;
    c.apply_store(store(&[mutable]), now);
    assert_eq!(uid(&c, "a"), old, "timeout and retryPolicy change in place");
    assert_eq!(by_name(&c, "a").run.spec.timeout, Some(30));
    let mut changed = function("a");
    changed.spec.source.inline = Some("def invoke(r): return 2".into());
    c.apply_store(store(&[changed]), now);
    assert_ne!(uid(&c, "a"), old);
    assert_eq!(c.runs().count(), 1);
}

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
fn idle_timeout_ends_the_run_and_releases_capacity() {
    let now = Instant::now();
    let mut c = Controller::new(pods(1, 1), Duration::from_secs(5), Duration::ZERO);
    c.apply_pod("runtimed-0", snapshot("u", vec![]), now);
    let actions = c.apply_store(functions(&["a", "b"]), now);
    settle(&mut c, actions, now);
    let a = uid(&c, "a");
    let idle = entry(&a, 1, own::Phase::Failed, "IdleTimeout");
    let actions = c.apply_pod("runtimed-0", SourceUpdate::Upsert(idle), now);
    assert_eq!(
        life(&c, "a"),
        (Phase::Timeout, Some(Reason::IdleTimeout), 1)
    );
    assert!(actions.contains(&Action::Unregister {
        pod: "runtimed-0".into(),
        run_uid: a,
        mode: pb::UnregisterMode::Cancel
    }));
    // b takes the capacity the ended Run no longer holds.
    assert_eq!(registers(&actions), vec![("runtimed-0".into(), 1)]);
    settle(&mut c, actions, now);
    assert_eq!(life(&c, "b").0, Phase::Ready);
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
    assert!(actions.contains(&Action::Unregister {
        pod: "runtimed-0".into(),
        run_uid: "orphan".into(),
        mode: pb::UnregisterMode::Cancel
    }));
    // The orphan's release is not repeated while in flight.
    let again = c.tick(now);
    assert!(
        !again
            .iter()
            .any(|a| matches!(a, Action::Unregister { run_uid, .. } if run_uid == "orphan"))
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
fn invalid_and_unsupported_manifests_fail_without_scheduling() {
    let now = Instant::now();
    let mut c = connected(1, now);
    let mut bad = function("bad");
    bad.spec.mode.task = Some(TaskMode::default());
    let mut task = function("task");
    task.spec.mode = RunMode {
        task: Some(TaskMode {
            entrypoint: Some("main.py".into()),
            args: vec![],
        }),
        ..Default::default()
    };
    let actions = c.apply_store(store(&[bad, task]), now);
    assert!(actions.is_empty());
    assert_eq!(
        life(&c, "bad"),
        (Phase::Failed, Some(Reason::InvalidSpec), 0)
    );
    assert_eq!(
        life(&c, "task"),
        (Phase::Failed, Some(Reason::UnsupportedMode), 0)
    );
    assert!(c.ownership_entries().is_empty());
}

#[test]
fn startup_hold_waits_for_every_pod_or_the_deadline() {
    let now = Instant::now();
    let mut c = controller(2).with_startup_hold(now + Duration::from_secs(3));
    c.apply_store(functions(&["a", "b"]), now);
    assert!(
        c.apply_pod("runtimed-0", snapshot("u0", vec![]), now)
            .is_empty()
    );
    let actions = c.apply_pod("runtimed-1", snapshot("u1", vec![]), now);
    let pods: BTreeSet<_> = registers(&actions).into_iter().map(|(p, _)| p).collect();
    assert_eq!(pods.len(), 2, "runs spread over both pods");

    let mut c = controller(2).with_startup_hold(now + Duration::from_secs(3));
    c.apply_store(functions(&["a"]), now);
    c.apply_pod("runtimed-0", snapshot("u0", vec![]), now);
    assert!(c.tick(now + Duration::from_secs(1)).is_empty());
    assert_eq!(
        registers(&c.tick(now + Duration::from_secs(4))),
        vec![("runtimed-0".into(), 1)]
    );
}

#[test]
fn sessions_take_an_idle_pod_exclusively_and_open_there() {
    let now = Instant::now();
    let mut c = connected(2, now);
    let actions = c.apply_store(store(&[function("f"), session("s1"), session("s2")]), now);
    // Sessions are placed first, each on an idle Pod of its own; the
    // function Run waits for capacity no session holds.
    let opens: Vec<_> = actions
        .iter()
        .filter_map(|a| match a {
            Action::OpenSession { request, .. } => Some(request.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(opens.len(), 2);
    assert_eq!(
        (
            opens[0].queue_size,
            opens[0].operation_timeout_seconds,
            opens[0].idle_timeout_seconds
        ),
        (4, 30, 60)
    );
    assert_eq!(life(&c, "f").0, Phase::Pending);
    assert_ne!(by_name(&c, "s1").owner, by_name(&c, "s2").owner);
    let s1 = uid(&c, "s1");
    assert!(c.status("https://gw").iter().any(|r| {
        r.endpoint
            .as_deref()
            .is_some_and(|e| e.ends_with(&format!("/sessions/{s1}")))
    }));
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
    assert!(actions.iter().any(
        |x| matches!(x, Action::CloseSession { run_uid, cancel: false, .. } if *run_uid == a)
    ));
    assert!(
        actions.iter().any(
            |x| matches!(x, Action::CloseSession { run_uid, cancel: true, .. } if *run_uid == b)
        )
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
    let actions = c.apply_pod("runtimed-0", SourceUpdate::Upsert(e), now);
    assert_eq!(life(&c, "s").0, Phase::Timeout);
    assert_eq!(
        actions,
        vec![Action::CloseSession {
            pod: "runtimed-0".into(),
            run_uid: s,
            cancel: true
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
        vec![Action::CloseSession {
            pod: "runtimed-0".into(),
            run_uid: s,
            cancel: true
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
