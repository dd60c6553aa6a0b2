//! Wake-ups: a pool's waiting Runs get cycles only when something that
//! could change their answer happened in it.

use super::*;

fn pass(s: &Snapshot) -> Plan {
    super::super::decide(s, &Framework::default())
}

/// Three sessions, two Pods: one waits; the next pass, nothing changed.
fn waiting_one() -> Snapshot {
    let (plan, s) = decide(
        vec![session("s1", 1), session("s2", 2), session("s3", 3)],
        vec![pod("a", 2), pod("b", 2)],
    );
    assert_eq!(plan.report.wakeups.get("first"), Some(&1));
    assert_eq!(
        plan.memo["ns/python"].unplaced.keys().collect::<Vec<_>>(),
        ["s3-uid"]
    );
    s.after(&plan)
}

#[test]
fn a_pool_that_did_not_change_gives_its_waiting_runs_no_cycle() {
    let s = waiting_one();
    let plan = pass(&s);
    assert_eq!(plan.report.cycles, 0);
    assert_eq!(plan.report.skipped, 1);
    assert!(plan.report.wakeups.is_empty());
    assert!(plan.ops.is_empty(), "{:?}", plan.ops);
    // It still waits, and still counts for the pool's size.
    assert_eq!(plan.demand["ns/python"].waiting_sessions, 1);
    assert_eq!(plan.memo, s.memo, "the memo carries over");
}

#[test]
fn a_new_pod_wakes_the_pool() {
    let mut s = waiting_one();
    s.pods.push(pod("c", 2));
    let plan = pass(&s);
    assert_eq!(plan.report.wakeups.get("pods"), Some(&1));
    assert_eq!(
        outcomes(&plan, &s).get("s3").and_then(|o| o.2.clone()),
        Some("c".into())
    );
    assert!(plan.memo.is_empty(), "nothing waits");
}

#[test]
fn a_run_that_ends_or_a_pod_that_changes_wakes_the_pool() {
    // A session ends: its Pod is free.
    let mut s = waiting_one();
    let s1 = s.runs.iter().position(|r| r.name == "s1").unwrap();
    s.runs[s1].life.phase = Succeeded;
    let plan = pass(&s);
    assert_eq!(plan.report.wakeups.get("pods"), Some(&1));
    assert_eq!(plan.report.placed, 1);
    // A Pod turns not ready, or is resized: the same pool, changed.
    for change in [
        (|p: &mut PodFacts| p.ready = false) as fn(&mut PodFacts),
        |p: &mut PodFacts| p.capacity.runs = 3,
        |p: &mut PodFacts| p.uid = "a-replaced".into(),
    ] {
        let mut s = waiting_one();
        change(&mut s.pods[0]);
        assert_eq!(pass(&s).report.wakeups.get("pods"), Some(&1));
    }
}

#[test]
fn a_run_that_waits_anew_wakes_the_pool() {
    let mut s = waiting_one();
    s.runs.push(session("s4", 4));
    let plan = pass(&s);
    assert_eq!(plan.report.wakeups.get("runs"), Some(&1));
    assert_eq!(plan.report.cycles, 2);
    // So does one whose status does not yet say why it waits (the write
    // of the last pass failed).
    let mut s = waiting_one();
    let s3 = s.runs.iter().position(|r| r.name == "s3").unwrap();
    s.runs[s3].life = Life::default();
    let plan = pass(&s);
    assert_eq!(plan.report.wakeups.get("runs"), Some(&1));
    assert_eq!(plan.ops.len(), 1, "its reason is written again");
    // And one relabelled while it waits (anti-affinity may let it in now).
    let mut s = waiting_one();
    let s3 = s.runs.iter().position(|r| r.name == "s3").unwrap();
    s.runs[s3].labels.insert("tier".into(), "gold".into());
    assert_eq!(pass(&s).report.wakeups.get("runs"), Some(&1));
}

#[test]
fn another_pools_change_leaves_a_pool_asleep() {
    let mut s = waiting_one();
    let mut other = pod("bash-0", 2);
    other.pool = "ns/bash".into();
    s.pods.push(other);
    let mut r = run("f", 9);
    r.pool = Ok("ns/bash".into());
    s.runs.push(r);
    let plan = pass(&s);
    // The bash pool's first wake-up places its Run; python's sleeps.
    assert_eq!(plan.report.wakeups.get("first"), Some(&1));
    assert_eq!(plan.report.skipped, 1);
    assert_eq!(plan.report.placed, 1);
}

#[test]
fn the_fingerprint_ignores_the_order_of_pods_and_holders() {
    let s = waiting_one();
    let mut reordered = s.clone();
    reordered.pods.reverse();
    reordered.runs.reverse();
    let a = crate::pass::memo::fingerprint(&nodes_of(&s), "ns/python");
    let b = crate::pass::memo::fingerprint(&nodes_of(&reordered), "ns/python");
    assert_eq!(a, b);
    assert_eq!(pass(&reordered).report.skipped, 1);
}

#[test]
fn a_run_turned_away_before_another_was_placed_is_tried_again() {
    // The follower needs a Run labelled app=web beside it; the web Run is
    // newer, so in the pass that places it the follower's cycle came first.
    let mut follower = run("follower", 1);
    follower.affinity = Affinity {
        run_affinity: Some(crate::scheduler::affinity::RunAffinity {
            required: vec![crate::scheduler::affinity::RunAffinityTerm {
                label_selector: crate::scheduler::affinity::LabelSelector {
                    match_labels: [("app".to_owned(), "web".to_owned())].into(),
                    ..Default::default()
                },
            }],
            ..Default::default()
        }),
        ..Default::default()
    };
    let mut web = run("web", 2);
    web.labels = [("app".to_owned(), "web".to_owned())].into();
    let (plan, s) = decide(vec![follower, web], vec![pod("a", 4)]);
    assert_eq!(plan.report.placed, 1, "only web, on this pass");
    assert!(plan.memo.is_empty(), "the follower saw the pool before web");
    let next = s.after(&plan);
    let plan = pass(&next);
    assert_eq!(plan.report.wakeups.get("first"), Some(&1));
    assert_eq!(
        outcomes(&plan, &next)
            .get("follower")
            .and_then(|o| o.2.clone()),
        Some("a".into())
    );
}
