//! Creation, placement and readiness.

use super::*;

#[test]
fn runs_wait_for_a_pod_register_and_become_ready_from_the_owners_table() {
    let now = Instant::now();
    let mut c = controller(1);
    assert!(c.apply_store(functions(&["a"]), now).is_empty());
    assert_eq!(life(&c, "a"), (Phase::Pending, Some(Reason::NoIdlePod), 0));
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
        c.apply_pod("runtimed-0", SourceUpdate::Upsert(Box::new(ready)), now)
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
            Action::Assign { request, .. } if is_session(request) => Some(request.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(opens.len(), 2);
    let Some(kruntimes_proto::agent::v1::assign_request::Mode::Session(bounds)) = &opens[0].mode
    else {
        panic!("not a session: {:?}", opens[0]);
    };
    assert_eq!(
        (
            bounds.queue_size,
            bounds.operation_timeout_seconds,
            bounds.idle_timeout_seconds
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
fn invalid_manifests_fail_without_scheduling_and_tasks_are_started() {
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
    assert_eq!(
        life(&c, "bad"),
        (Phase::Failed, Some(Reason::InvalidSpec), 0)
    );
    assert_eq!(actions.len(), 1);
    assert!(matches!(&actions[0], Action::Assign { request, .. } if is_task(request)));
    assert_eq!(
        life(&c, "task"),
        (Phase::Scheduled, Some(Reason::Scheduled), 1)
    );
    // Tasks are in the table (the gateway reads their artifacts), as tasks:
    // the invoke and session routes refuse them.
    let entries = c.ownership_entries();
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert_eq!(
        entries[0].mode,
        kruntimes_proto::ownership::v1::Mode::Task as i32
    );
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
fn a_run_its_owner_never_makes_ready_is_placed_again_after_the_deadline() {
    let now = Instant::now();
    let mut c = connected(2, now);
    let actions = c.apply_store(functions(&["a"]), now);
    // The owner never answers the Assign.
    assert_eq!(registers(&actions).len(), 1);
    let at = |s: u64| now + Duration::from_secs(s);
    assert!(registers(&c.tick(at(119))).is_empty());
    assert_eq!(life(&c, "a").0, Phase::Running);
    c.tick(at(120));
    assert_eq!(
        life(&c, "a"),
        (Phase::Pending, Some(Reason::RegistrationTimeout), 1)
    );
    assert!(by_name(&c, "a").message.contains("not Ready within 120s"));
    // After the backoff it is placed again, fencing the old attempt.
    let again = c.tick(at(121));
    assert_eq!(registers(&again).len(), 1);
    assert_eq!(registers(&again)[0].1, 2);
    settle(&mut c, again, at(121));
    assert_eq!(life(&c, "a"), (Phase::Ready, Some(Reason::Registered), 2));
}

#[test]
fn priority_and_labels_change_in_place_and_inputs_replace_the_run() {
    let now = Instant::now();
    let mut c = controller(1);
    c.apply_store(functions(&["a"]), now);
    let first = uid(&c, "a");
    let mut edited = function("a");
    edited.spec.priority_class_name = Some(kruntimes_core::scheduler::queue::PriorityClass::High);
    edited.metadata.labels = Some([("tier".to_owned(), "gold".to_owned())].into());
    c.apply_store(store(&[edited.clone()]), now);
    let a = by_name(&c, "a");
    assert_eq!(a.uid(), first, "the same Run");
    assert_eq!(a.run.priority(), 500);
    assert_eq!(
        a.run
            .metadata
            .labels
            .as_ref()
            .unwrap()
            .get("tier")
            .map(String::as_str),
        Some("gold")
    );
    // A field a Run keeps for life replaces it.
    edited.spec.runtime = "bash".into();
    c.apply_store(store(&[edited]), now);
    assert_ne!(uid(&c, "a"), first);
}
