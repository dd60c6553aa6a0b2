use super::*;
use crate::model::{FunctionMode, ObjectMeta, RunMode, RunSpec, SourceSpec};

fn manifest(name: &str) -> RunManifest {
    RunManifest {
        api_version: crate::model::API_VERSION.into(),
        kind: "Run".into(),
        metadata: ObjectMeta {
            name: name.into(),
            namespace: None,
        },
        spec: RunSpec {
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
    }
}

fn store(names: &[&str]) -> BTreeMap<String, RunManifest> {
    names
        .iter()
        .map(|n| (format!("default/{n}"), manifest(n)))
        .collect()
}

fn pods(n: usize) -> Vec<PodConfig> {
    (0..n)
        .map(|i| PodConfig {
            name: format!("runtimed-{i}"),
            address: format!("127.0.0.1:{}", 9000 + i),
            capacity: 2,
        })
        .collect()
}

fn controller(n: usize) -> Controller {
    Controller::new(pods(n), Duration::from_secs(5), Duration::from_millis(100))
}

fn snapshot(instance: &str, entries: Vec<own::OwnershipEntry>) -> SourceUpdate {
    SourceUpdate::Snapshot {
        instance_id: instance.into(),
        entries,
    }
}

fn run<'a>(c: &'a Controller, name: &str) -> &'a RunState {
    c.runs().find(|r| r.manifest.metadata.name == name).unwrap()
}

fn registers(actions: &[Action]) -> Vec<(String, u64)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Register { pod, request } => Some((pod.clone(), request.attempt)),
            _ => None,
        })
        .collect()
}

fn entry_for(r: &RunState, pod_uid: &str, phase: own::Phase, reason: &str) -> own::OwnershipEntry {
    own::OwnershipEntry {
        run_uid: r.uid.clone(),
        attempt: r.attempt,
        phase: phase as i32,
        reason: reason.into(),
        owner: Some(own::Owner {
            pod_uid: pod_uid.into(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[test]
fn runs_wait_for_a_ready_pod_then_register_and_become_ready() {
    let now = Instant::now();
    let mut c = controller(1);
    assert!(c.apply_store(store(&["a"]), now).is_empty());
    assert_eq!(run(&c, "a").phase, Phase::Pending);
    let actions = c.apply_pod("runtimed-0", snapshot("uid-0", vec![]), now);
    assert_eq!(registers(&actions), vec![("runtimed-0".into(), 1)]);
    assert_eq!(run(&c, "a").phase, Phase::Running);
    let uid = run(&c, "a").uid.clone();
    c.register_result(&uid, 1, RegisterOutcome::Ok, now);
    assert_eq!(run(&c, "a").phase, Phase::Ready);
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
        format!("https://gw/v1/namespaces/default/runtimes/python/runs/{uid}:invoke")
    );
}

#[test]
fn runs_spread_over_pods_within_capacity() {
    let now = Instant::now();
    let mut c = controller(2);
    c.apply_pod("runtimed-0", snapshot("u0", vec![]), now);
    c.apply_pod("runtimed-1", snapshot("u1", vec![]), now);
    let actions = c.apply_store(store(&["a", "b", "c", "d", "e"]), now);
    let mut per_pod = BTreeMap::new();
    for (pod, _) in registers(&actions) {
        *per_pod.entry(pod).or_insert(0) += 1;
    }
    assert_eq!(per_pod.get("runtimed-0"), Some(&2));
    assert_eq!(per_pod.get("runtimed-1"), Some(&2));
    assert_eq!(c.runs().filter(|r| r.phase == Phase::Pending).count(), 1);
}

#[test]
fn deleting_a_run_unregisters_it_and_frees_capacity() {
    let now = Instant::now();
    let mut c = Controller::new(
        vec![PodConfig {
            name: "p".into(),
            address: "x".into(),
            capacity: 1,
        }],
        Duration::from_secs(5),
        Duration::from_millis(100),
    );
    c.apply_pod("p", snapshot("u", vec![]), now);
    c.apply_store(store(&["a", "b"]), now);
    let a_uid = run(&c, "a").uid.clone();
    assert_eq!(run(&c, "b").phase, Phase::Pending);
    let actions = c.apply_store(store(&["b"]), now);
    assert!(actions.contains(&Action::Unregister {
        pod: "p".into(),
        run_uid: a_uid,
        mode: pb::UnregisterMode::Drain
    }));
    assert_eq!(registers(&actions), vec![("p".into(), 1)]);
}

#[test]
fn a_changed_spec_replaces_the_run_with_a_new_uid() {
    let now = Instant::now();
    let mut c = controller(1);
    c.apply_store(store(&["a"]), now);
    let old = run(&c, "a").uid.clone();
    let mut changed = store(&["a"]);
    changed.get_mut("default/a").unwrap().spec.source.inline =
        Some("def invoke(r): return 2".into());
    c.apply_store(changed, now);
    assert_ne!(run(&c, "a").uid, old);
}

#[test]
fn pod_restart_fences_runs_and_reregisters_with_next_attempt() {
    let now = Instant::now();
    let mut c = controller(1);
    c.apply_pod("runtimed-0", snapshot("old", vec![]), now);
    c.apply_store(store(&["a"]), now);
    let uid = run(&c, "a").uid.clone();
    c.register_result(&uid, 1, RegisterOutcome::Ok, now);
    let actions = c.apply_pod("runtimed-0", snapshot("new", vec![]), now);
    assert!(registers(&actions).is_empty(), "backoff first");
    assert_eq!(run(&c, "a").phase, Phase::Pending);
    assert_eq!(run(&c, "a").attempt, 2);
    let actions = c.tick(now + Duration::from_millis(150));
    assert_eq!(registers(&actions), vec![("runtimed-0".into(), 2)]);
    assert_eq!(run(&c, "a").owner_uid.as_deref(), Some("new"));
    // A late result of attempt 1 is ignored.
    c.register_result(&uid, 1, RegisterOutcome::Ok, now);
    assert_eq!(run(&c, "a").phase, Phase::Running);
}

#[test]
fn pod_lost_beyond_grace_moves_its_runs() {
    let now = Instant::now();
    let mut c = controller(2);
    c.apply_pod("runtimed-0", snapshot("u0", vec![]), now);
    c.apply_store(store(&["a"]), now);
    let uid = run(&c, "a").uid.clone();
    c.register_result(&uid, 1, RegisterOutcome::Ok, now);
    c.apply_pod("runtimed-1", snapshot("u1", vec![]), now);
    c.apply_pod("runtimed-0", SourceUpdate::Lost, now);
    assert!(c.tick(now + Duration::from_secs(1)).is_empty());
    assert_eq!(run(&c, "a").phase, Phase::Ready, "within grace");
    c.tick(now + Duration::from_secs(6));
    let actions = c.tick(now + Duration::from_secs(7));
    assert_eq!(registers(&actions), vec![("runtimed-1".into(), 2)]);
}

#[test]
fn retry_policy_exhaustion_fails_the_run() {
    let now = Instant::now();
    let mut c = controller(1);
    let mut m = store(&["a"]);
    m.get_mut("default/a")
        .unwrap()
        .spec
        .retry_policy
        .max_retries = 0;
    c.apply_pod("runtimed-0", snapshot("u0", vec![]), now);
    c.apply_store(m, now);
    let uid = run(&c, "a").uid.clone();
    c.register_result(&uid, 1, RegisterOutcome::Ok, now);
    c.apply_pod("runtimed-0", snapshot("u0-restarted", vec![]), now);
    assert_eq!(run(&c, "a").phase, Phase::Failed);
    assert_eq!(run(&c, "a").reason, "OwnerLost");
}

#[test]
fn idle_timeout_ends_the_run_and_releases_capacity() {
    let now = Instant::now();
    let mut c = Controller::new(
        vec![PodConfig {
            name: "p".into(),
            address: "x".into(),
            capacity: 1,
        }],
        Duration::from_secs(5),
        Duration::from_millis(100),
    );
    c.apply_pod("p", snapshot("u", vec![]), now);
    c.apply_store(store(&["a", "b"]), now);
    let a = run(&c, "a").clone();
    c.register_result(&a.uid, 1, RegisterOutcome::Ok, now);
    let e = entry_for(run(&c, "a"), "u", own::Phase::Failed, "IdleTimeout");
    let actions = c.apply_pod("p", SourceUpdate::Upsert(e), now);
    assert_eq!(run(&c, "a").phase, Phase::Timeout);
    assert_eq!(run(&c, "a").reason, "IdleTimeout");
    assert!(actions.contains(&Action::Unregister {
        pod: "p".into(),
        run_uid: a.uid,
        mode: pb::UnregisterMode::Cancel
    }));
    assert_eq!(
        registers(&actions),
        vec![("p".into(), 1)],
        "b takes the freed capacity"
    );
}

#[test]
fn missing_registration_of_a_ready_run_is_reregistered_and_orphans_removed() {
    let now = Instant::now();
    let mut c = controller(1);
    c.apply_pod("runtimed-0", snapshot("u0", vec![]), now);
    c.apply_store(store(&["a"]), now);
    let uid = run(&c, "a").uid.clone();
    c.register_result(&uid, 1, RegisterOutcome::Ok, now);
    let orphan = own::OwnershipEntry {
        run_uid: "orphan".into(),
        ..Default::default()
    };
    let actions = c.apply_pod("runtimed-0", SourceUpdate::Lost, now);
    assert!(actions.is_empty());
    let actions = c.apply_pod("runtimed-0", snapshot("u0", vec![orphan]), now);
    assert_eq!(registers(&actions), vec![("runtimed-0".into(), 1)]);
    assert!(actions.contains(&Action::Unregister {
        pod: "runtimed-0".into(),
        run_uid: "orphan".into(),
        mode: pb::UnregisterMode::Cancel
    }));
}

#[test]
fn registration_failures_fail_or_retry() {
    let now = Instant::now();
    let mut c = controller(1);
    c.apply_pod("runtimed-0", snapshot("u0", vec![]), now);
    c.apply_store(store(&["a", "b"]), now);
    let a = run(&c, "a").uid.clone();
    let b = run(&c, "b").uid.clone();
    c.register_result(
        &a,
        1,
        RegisterOutcome::Permanent("SyntaxError: bad".into()),
        now,
    );
    assert_eq!(run(&c, "a").phase, Phase::Failed);
    assert!(run(&c, "a").message.contains("SyntaxError"));
    c.register_result(&b, 1, RegisterOutcome::Retryable("unavailable".into()), now);
    assert_eq!(run(&c, "b").phase, Phase::Pending);
    let actions = c.tick(now + Duration::from_millis(200));
    assert_eq!(registers(&actions), vec![("runtimed-0".into(), 1)]);
}

#[test]
fn invalid_and_unsupported_manifests_fail_without_scheduling() {
    let now = Instant::now();
    let mut c = controller(1);
    c.apply_pod("runtimed-0", snapshot("u0", vec![]), now);
    let mut m = store(&["bad", "task"]);
    m.get_mut("default/bad").unwrap().spec.mode.task = Some(crate::model::TaskMode::default());
    let t = m.get_mut("default/task").unwrap();
    t.spec.mode.function = None;
    t.spec.mode.task = Some(crate::model::TaskMode {
        entrypoint: Some("main.py".into()),
        args: vec![],
    });
    let actions = c.apply_store(m, now);
    assert!(actions.is_empty());
    assert_eq!(run(&c, "bad").phase, Phase::Failed);
    assert_eq!(run(&c, "bad").reason, "Invalid");
    assert_eq!(run(&c, "task").reason, "UnsupportedMode");
    assert!(c.ownership_entries().is_empty());
}

#[test]
fn startup_hold_waits_for_every_pod_or_the_deadline() {
    let now = Instant::now();
    let mut c = controller(2).with_startup_hold(now + Duration::from_secs(3));
    c.apply_store(store(&["a", "b"]), now);
    assert!(
        c.apply_pod("runtimed-0", snapshot("u0", vec![]), now)
            .is_empty()
    );
    let actions = c.apply_pod("runtimed-1", snapshot("u1", vec![]), now);
    let pods: std::collections::BTreeSet<_> =
        registers(&actions).into_iter().map(|(p, _)| p).collect();
    assert_eq!(pods.len(), 2, "runs spread over both pods");

    let mut c = controller(2).with_startup_hold(now + Duration::from_secs(3));
    c.apply_store(store(&["a"]), now);
    c.apply_pod("runtimed-0", snapshot("u0", vec![]), now);
    assert!(c.tick(now + Duration::from_secs(1)).is_empty());
    assert_eq!(
        registers(&c.tick(now + Duration::from_secs(4))),
        vec![("runtimed-0".into(), 1)]
    );
}

fn session_manifest(name: &str) -> RunManifest {
    let mut m = manifest(name);
    m.spec.runtime = "bash".into();
    m.spec.mode = RunMode {
        session: Some(crate::model::SessionMode {
            idle_timeout_seconds: Some(60),
            queue_size: Some(4),
            operation_timeout: Some(30),
        }),
        ..Default::default()
    };
    m
}

fn opens(actions: &[Action]) -> Vec<(String, u64)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::OpenSession { pod, request } => Some((pod.clone(), request.attempt)),
            _ => None,
        })
        .collect()
}

#[test]
fn sessions_take_an_idle_pod_exclusively_and_open_there() {
    let now = Instant::now();
    let mut c = controller(2);
    c.apply_pod("runtimed-0", snapshot("u0", vec![]), now);
    c.apply_pod("runtimed-1", snapshot("u1", vec![]), now);
    let mut m = store(&["f"]);
    m.insert("default/s1".into(), session_manifest("s1"));
    m.insert("default/s2".into(), session_manifest("s2"));
    let actions = c.apply_store(m, now);
    // Sessions are placed first, each on an idle Pod of its own; the
    // function Run waits for capacity no session holds.
    assert_eq!(opens(&actions).len(), 2);
    assert!(registers(&actions).is_empty());
    assert_eq!(run(&c, "f").phase, Phase::Pending);
    let s1 = run(&c, "s1");
    let req = open_session_request(s1);
    assert_eq!(
        (
            req.queue_size,
            req.operation_timeout_seconds,
            req.idle_timeout_seconds
        ),
        (4, 30, 60)
    );
    assert_ne!(run(&c, "s1").owner, run(&c, "s2").owner);
    assert!(c.status("https://gw").iter().any(|r| {
        r.endpoint
            .as_deref()
            .is_some_and(|e| e.ends_with(&format!("/sessions/{}", s1.uid)))
    }));
}

#[test]
fn a_lost_owner_ends_a_ready_session_instead_of_resuming_it() {
    let now = Instant::now();
    let mut c = controller(1);
    c.apply_pod("runtimed-0", snapshot("u0", vec![]), now);
    let mut m = BTreeMap::new();
    m.insert("default/s".to_owned(), session_manifest("s"));
    c.apply_store(m, now);
    let uid = run(&c, "s").uid.clone();
    c.register_result(&uid, 1, RegisterOutcome::Ok, now);
    assert_eq!(run(&c, "s").phase, Phase::Ready);
    let actions = c.apply_pod("runtimed-0", snapshot("u0-restarted", vec![]), now);
    assert!(opens(&actions).is_empty());
    assert_eq!(run(&c, "s").phase, Phase::Failed);
    assert_eq!(run(&c, "s").reason, "OwnerLost");
}

#[test]
fn drain_termination_finalizes_then_succeeds_and_immediate_cancels() {
    let now = Instant::now();
    let mut c = controller(2);
    c.apply_pod("runtimed-0", snapshot("u0", vec![]), now);
    c.apply_pod("runtimed-1", snapshot("u1", vec![]), now);
    let mut m = BTreeMap::new();
    m.insert("default/a".to_owned(), session_manifest("a"));
    m.insert("default/b".to_owned(), session_manifest("b"));
    c.apply_store(m.clone(), now);
    for n in ["a", "b"] {
        let uid = run(&c, n).uid.clone();
        c.register_result(&uid, 1, RegisterOutcome::Ok, now);
    }
    let a_uid = run(&c, "a").uid.clone();
    m.get_mut("default/a").unwrap().spec.termination = Some(crate::model::Termination {
        mode: TerminationMode::Drain,
    });
    m.get_mut("default/b").unwrap().spec.termination = Some(crate::model::Termination {
        mode: TerminationMode::Immediate,
    });
    let actions = c.apply_store(m.clone(), now);
    assert_eq!(
        run(&c, "a").uid,
        a_uid,
        "termination does not replace the Run"
    );
    assert_eq!(run(&c, "a").phase, Phase::Finalizing);
    assert!(actions.iter().any(
        |a| matches!(a, Action::CloseSession { run_uid, cancel: false, .. } if *run_uid == a_uid)
    ));
    assert!(
        actions
            .iter()
            .any(|a| matches!(a, Action::CloseSession { cancel: true, .. }))
    );
    c.close_result(&a_uid, true, now);
    assert_eq!(run(&c, "a").phase, Phase::Succeeded);
    let b_uid = run(&c, "b").uid.clone();
    c.close_result(&b_uid, true, now);
    assert_eq!(run(&c, "b").phase, Phase::Cancelled);
    // Monotonic: going back to Drain or removing termination changes nothing.
    m.get_mut("default/b").unwrap().spec.termination = None;
    assert!(c.apply_store(m, now).is_empty());
    assert_eq!(run(&c, "b").phase, Phase::Cancelled);
}

#[test]
fn idle_sessions_time_out_and_are_closed() {
    let now = Instant::now();
    let mut c = controller(1);
    c.apply_pod("runtimed-0", snapshot("u0", vec![]), now);
    let mut m = BTreeMap::new();
    m.insert("default/s".to_owned(), session_manifest("s"));
    c.apply_store(m, now);
    let uid = run(&c, "s").uid.clone();
    c.register_result(&uid, 1, RegisterOutcome::Ok, now);
    let mut e = entry_for(run(&c, "s"), "u0", own::Phase::Failed, "IdleTimeout");
    e.mode = own::Mode::Session as i32;
    let actions = c.apply_pod("runtimed-0", SourceUpdate::Upsert(e), now);
    assert_eq!(run(&c, "s").phase, Phase::Timeout);
    assert!(actions.contains(&Action::CloseSession {
        pod: "runtimed-0".into(),
        run_uid: uid,
        cancel: true
    }));
}

#[test]
fn total_timeout_ends_the_run_and_releases_it() {
    let now = Instant::now();
    let mut c = controller(1);
    c.apply_pod("runtimed-0", snapshot("u0", vec![]), now);
    let mut m = BTreeMap::new();
    let mut s = session_manifest("s");
    s.spec.timeout = Some(10);
    m.insert("default/s".to_owned(), s);
    c.apply_store(m, now);
    let uid = run(&c, "s").uid.clone();
    c.register_result(&uid, 1, RegisterOutcome::Ok, now);
    assert!(c.tick(now + Duration::from_secs(9)).is_empty());
    let actions = c.tick(now + Duration::from_secs(10));
    assert_eq!(run(&c, "s").phase, Phase::Timeout);
    assert_eq!(run(&c, "s").reason, "RunTimeout");
    assert!(actions.contains(&Action::CloseSession {
        pod: "runtimed-0".into(),
        run_uid: uid,
        cancel: true
    }));
}
