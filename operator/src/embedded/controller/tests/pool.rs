//! A pool of instances that follows demand (`krt up --min-idle`).

use super::*;
use kruntimes_core::pool::PoolSpec;

fn pooled(floor: usize, min_idle: u32, max: u32, delay_secs: u64, now: Instant) -> Controller {
    let mut c = connected(floor, now).with_pool(InstancePool {
        spec: PoolSpec {
            min_replicas: floor as u32,
            min_idle,
            max_replicas: max,
            scale_down_delay: Duration::from_secs(delay_secs),
        },
        capacity: Capacity {
            runs: 2,
            resources: Default::default(),
        },
    });
    // The first pass sizes the pool.
    let actions = c.tick(now);
    settle(&mut c, actions, now);
    c
}

fn names(c: &Controller) -> Vec<String> {
    c.pod_status().into_iter().map(|p| p.name).collect()
}

fn sessions(n: usize) -> BTreeMap<String, Run> {
    store(
        &(0..n)
            .map(|i| session(&format!("s{i}")))
            .collect::<Vec<_>>(),
    )
}

#[test]
fn a_session_that_takes_the_idle_instance_brings_another() {
    let now = Instant::now();
    let mut c = pooled(1, 1, 3, 30, now);
    // One instance, free: the pool is at its size.
    assert_eq!(names(&c), ["runtimed-0"]);
    let actions = c.apply_store(sessions(1), now);
    let seen = settle(&mut c, actions, now);
    assert!(seen.contains(&Action::StartInstances { count: 1 }));
    assert_eq!(names(&c), ["runtimed-0", "runtimed-1"]);
    assert_eq!(life(&c, "s0").0, Phase::Ready);
    assert_eq!(c.pool_status().unwrap().desired, 2);
    // A floor below the instances kept free starts them at once.
    let c = pooled(1, 3, 5, 30, now);
    assert_eq!(names(&c), ["runtimed-0", "runtimed-1", "runtimed-2"]);
}

#[test]
fn the_pool_stops_at_its_ceiling_and_a_waiting_session_says_why() {
    let now = Instant::now();
    let mut c = pooled(1, 1, 3, 30, now);
    let actions = c.apply_store(sessions(4), now);
    settle(&mut c, actions, now);
    assert_eq!(c.pod_status().len(), 3, "never above the ceiling");
    let ready = c.runs().filter(|r| r.life.phase == Phase::Ready).count();
    assert_eq!(ready, 3);
    let waiting = c.runs().find(|r| r.life.phase == Phase::Pending).unwrap();
    assert_eq!(waiting.life.reason, Some(Reason::NoIdlePod));
    assert!(
        waiting.message.contains("0/3"),
        "the reason counts the instances: {}",
        waiting.message
    );
}

#[test]
fn shared_runs_that_wait_ask_for_enough_instances_at_their_capacity() {
    let now = Instant::now();
    let mut c = pooled(1, 0, 5, 30, now);
    assert_eq!(names(&c), ["runtimed-0"]);
    // Two fit on the first instance; three wait, which two more take.
    let actions = c.apply_store(functions(&["a", "b", "c", "d", "e"]), now);
    settle(&mut c, actions, now);
    assert_eq!(c.pod_status().len(), 3);
    assert!(c.runs().all(|r| r.life.phase == Phase::Ready));
}

#[test]
fn idle_instances_beyond_the_need_go_after_the_delay_newest_first() {
    let t0 = Instant::now();
    let at = |secs| t0 + Duration::from_secs(secs);
    let mut c = pooled(1, 1, 5, 30, t0);
    let actions = c.apply_store(sessions(3), t0);
    settle(&mut c, actions, t0);
    // Three busy, one free.
    assert_eq!(c.pod_status().len(), 4);
    // Two sessions end (one cancelled, its Run kept; one deleted): two
    // instances are idle beyond the one kept free.
    let mut cancelled = session("s1");
    cancelled.spec.termination = Some(Termination {
        mode: TerminationMode::Immediate,
    });
    let keep = store(&[session("s0"), cancelled]);
    let actions = c.apply_store(keep.clone(), at(1));
    let seen = settle(&mut c, actions, at(1));
    assert!(
        !seen
            .iter()
            .any(|a| matches!(a, Action::StopInstance { .. })),
        "nothing goes before the delay"
    );
    let actions = c.tick(at(20));
    assert!(settle(&mut c, actions, at(20)).is_empty());
    let actions = c.tick(at(31));
    let seen = settle(&mut c, actions, at(31));
    let stopped: Vec<_> = seen
        .iter()
        .filter_map(|a| match a {
            Action::StopInstance { pod } => Some(pod.as_str()),
            _ => None,
        })
        .collect();
    let owner = by_name(&c, "s0").owner.clone().unwrap().pod;
    assert_eq!(stopped.len(), 2);
    assert!(!stopped.contains(&owner.as_str()), "never the busy one");
    // Busy + one free.
    assert_eq!(c.pod_status().len(), 2);
    assert_eq!(life(&c, "s0").0, Phase::Ready);
    assert!(life(&c, "s1").0.is_terminal());
}

#[test]
fn a_retiring_instance_takes_no_new_run() {
    let t0 = Instant::now();
    let mut c = pooled(1, 0, 3, 0, t0);
    let actions = c.apply_store(sessions(2), t0);
    settle(&mut c, actions, t0);
    assert_eq!(c.pod_status().len(), 2);
    // Both end; with no delay the surplus goes at once ...
    let actions = c.apply_store(BTreeMap::new(), t0);
    let seen = settle_with(&mut c, actions, t0, false);
    let stops: Vec<&String> = seen
        .iter()
        .filter_map(|a| match a {
            Action::StopInstance { pod } => Some(pod),
            _ => None,
        })
        .collect();
    assert_eq!(stops.len(), 1, "{seen:?}");
    let pod = &stops[0].clone();
    // ... and a session that arrives before the instance is gone is not
    // placed on it.
    let actions = c.apply_store(sessions(1), t0);
    let seen = settle_with(&mut c, actions, t0, false);
    for a in &seen {
        if let Action::Assign { pod: p, .. } = a {
            assert_ne!(p, pod, "a Run placed on a retiring instance");
        }
    }
    assert!(c.pod_status().iter().any(|p| p.name == *pod && p.retiring));
    let actions = c.instance_stopped(pod, t0);
    settle(&mut c, actions, t0);
    assert!(c.pod_status().iter().all(|p| p.name != *pod));
    assert_eq!(life(&c, "s0").0, Phase::Ready);
}

#[test]
fn a_failed_start_is_asked_for_again_after_a_pause() {
    let t0 = Instant::now();
    let mut c = connected(1, t0).with_pool(InstancePool {
        spec: PoolSpec {
            min_replicas: 1,
            min_idle: 2,
            max_replicas: 3,
            scale_down_delay: Duration::from_secs(30),
        },
        capacity: Capacity {
            runs: 2,
            resources: Default::default(),
        },
    });
    assert_eq!(c.tick(t0), [Action::StartInstances { count: 1 }]);
    // Asked once: not again while it starts.
    assert!(c.tick(t0).is_empty());
    assert!(c.instance_start_failed(t0).is_empty());
    assert!(c.tick(t0 + Duration::from_secs(4)).is_empty());
    assert_eq!(
        c.tick(t0 + Duration::from_secs(5)),
        [Action::StartInstances { count: 1 }]
    );
}

#[test]
fn a_fixed_set_of_instances_never_asks_for_more() {
    let now = Instant::now();
    let mut c = connected(1, now);
    let actions = c.apply_store(sessions(3), now);
    let seen = settle(&mut c, actions, now);
    assert!(!seen.iter().any(|a| matches!(
        a,
        Action::StartInstances { .. } | Action::StopInstance { .. }
    )));
    assert!(c.pool_status().is_none());
}

#[test]
fn instances_start_a_few_at_a_time() {
    let now = Instant::now();
    let mut c = pooled(1, 0, 20, 30, now);
    // Ten sessions: one takes the instance, nine wait for one each.
    let actions = c.apply_store(sessions(10), now);
    let asked: u32 = actions
        .iter()
        .map(|a| match a {
            Action::StartInstances { count } => *count,
            _ => 0,
        })
        .sum();
    assert_eq!(asked, super::super::pass::MAX_STARTING);
    // The session placed at once registers.
    let placed: Vec<Action> = actions
        .into_iter()
        .filter(|a| !matches!(a, Action::StartInstances { .. }))
        .collect();
    let seen = settle(&mut c, placed, now);
    assert!(
        !seen
            .iter()
            .any(|a| matches!(a, Action::StartInstances { .. })),
        "{seen:?}"
    );
    // Started but not yet reporting: still in flight, nothing more asked.
    for i in 0..asked {
        let mut cfg = pods(1, 2).remove(0);
        cfg.name = format!("new-{i}");
        let more = c.instance_started(cfg, now);
        assert!(
            !more
                .iter()
                .any(|a| matches!(a, Action::StartInstances { .. })),
            "{more:?}"
        );
    }
    assert!(c.tick(now).is_empty());
    // One reports its table: one more is asked for.
    let more = c.apply_pod("new-0", snapshot("u-new-0", vec![]), now);
    assert!(
        more.contains(&Action::StartInstances { count: 1 }),
        "{more:?}"
    );
    // Answered as a launcher does, the burst is placed in the end.
    settle(&mut c, more, now);
    for i in 1..asked {
        let name = format!("new-{i}");
        let more = c.apply_pod(&name, snapshot(&format!("u-{name}"), vec![]), now);
        settle(&mut c, more, now);
    }
    assert!(c.runs().all(|r| r.life.phase == Phase::Ready));
    assert_eq!(c.pod_status().len(), 10);
}
