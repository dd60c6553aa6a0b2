use super::affinity::{LabelSelector, RunAffinityTerm, WeightedRunAffinityTerm};
use super::*;

fn node(name: &str, runs: u32, holders: usize) -> Node {
    let mut n = Node::new(
        name,
        &format!("{name}-uid"),
        "py",
        true,
        Capacity {
            runs,
            resources: Resources::new(),
        },
    );
    for _ in 0..holders {
        n.hold(Holder::default());
    }
    n
}

struct Run {
    labels: Labels,
    requests: Resources,
    affinity: Affinity,
    exclusive: bool,
}

impl Run {
    fn function() -> Self {
        Self {
            labels: Labels::new(),
            requests: Resources::new(),
            affinity: Affinity::default(),
            exclusive: false,
        }
    }

    fn session() -> Self {
        Self {
            exclusive: true,
            ..Self::function()
        }
    }

    fn labelled(mut self, k: &str, v: &str) -> Self {
        self.labels.insert(k.into(), v.into());
        self
    }

    fn candidate(&self) -> Candidate<'_> {
        Candidate {
            namespace: "ns",
            labels: &self.labels,
            runtime: "python",
            pool: "py",
            exclusive: self.exclusive,
            requests: &self.requests,
            affinity: &self.affinity,
        }
    }
}

fn selector(k: &str, v: &str) -> LabelSelector {
    LabelSelector {
        match_labels: [(k.to_owned(), v.to_owned())].into(),
        ..Default::default()
    }
}

fn holder(k: &str, v: &str) -> Holder {
    Holder {
        namespace: "ns".into(),
        labels: [(k.to_owned(), v.to_owned())].into(),
        ..Default::default()
    }
}

/// Places `runs` in order; the chosen Pod names (`-` for none).
fn place(runs: &[Run], nodes: Vec<Node>) -> Vec<String> {
    let mut snap = Snapshot::new(nodes);
    let fw = Framework::default();
    runs.iter()
        .map(|r| match fw.cycle(&r.candidate(), &mut snap) {
            Outcome::Placed(i) => snap.nodes()[i].name.clone(),
            Outcome::Unplaced(_) => "-".into(),
        })
        .collect()
}

fn why(run: &Run, nodes: Vec<Node>) -> Unplaced {
    match Framework::default().cycle(&run.candidate(), &mut Snapshot::new(nodes)) {
        Outcome::Unplaced(u) => u,
        Outcome::Placed(i) => panic!("placed on node {i}"),
    }
}

#[test]
fn function_runs_spread_across_pods_deterministically() {
    let got = place(
        &[Run::function(), Run::function(), Run::function()],
        vec![node("b", 2, 0), node("a", 2, 0)],
    );
    assert_eq!(got, ["a", "b", "a"]);
}

#[test]
fn reserve_makes_a_burst_respect_capacity_within_one_pass() {
    let runs: Vec<Run> = (0..5).map(|_| Run::function()).collect();
    let got = place(&runs, vec![node("a", 2, 0), node("b", 1, 0)]);
    assert_eq!(got, ["a", "a", "b", "-", "-"]);
}

#[test]
fn unready_pods_get_nothing_and_say_so() {
    let mut n = node("a", 4, 0);
    n.ready = false;
    let u = why(&Run::function(), vec![n]);
    assert_eq!(u.reason, Reason::NoIdlePod);
    assert_eq!(u.message, "0/1 python Pods can take this Run: 1 not ready");
}

#[test]
fn sessions_need_an_idle_pod_and_hold_it() {
    let got = place(
        &[Run::session(), Run::function(), Run::session()],
        vec![node("a", 4, 1), node("b", 4, 0)],
    );
    assert_eq!(got, ["b", "a", "-"]);
    let u = why(&Run::session(), vec![node("a", 4, 1), node("b", 4, 3)]);
    assert_eq!(u.reason, Reason::NoIdlePod);
    assert_eq!(
        u.message,
        "0/2 python Pods can take this session: 2 busy (a session needs an idle Pod)"
    );
    let mut held = node("c", 4, 0);
    held.hold(Holder {
        exclusive: true,
        ..Holder::default()
    });
    assert_eq!(held.used_runs(), 4);
    let u = why(&Run::function(), vec![held]);
    assert!(u.message.ends_with("1 held by a session"), "{}", u.message);
}

#[test]
fn an_empty_pool_says_no_pod_exists() {
    let u = why(&Run::session(), vec![]);
    assert_eq!(u.reason, Reason::NoIdlePod);
    assert_eq!(u.message, "no python Pod exists yet for this session");
    // Pods of another pool are not this Run's.
    let mut other = node("x", 4, 0);
    other.pool = "sh".into();
    assert_eq!(place(&[Run::function()], vec![other]), ["-"]);
}

#[test]
fn more_free_capacity_wins_over_name() {
    assert_eq!(
        place(&[Run::function()], vec![node("a", 4, 3), node("z", 4, 1)]),
        ["z"]
    );
}

#[test]
fn requests_fit_only_while_the_sum_stays_within_capacity() {
    let with_cpu = |name: &str| {
        let mut n = node(name, 8, 0);
        n.capacity.resources = Resources::new().with("cpu", 1000);
        n
    };
    let mut big = Run::function();
    big.requests = Resources::new().with("cpu", 600);
    let big2 = Run {
        requests: big.requests.clone(),
        ..Run::function()
    };
    let big3 = Run {
        requests: big.requests.clone(),
        ..Run::function()
    };
    assert_eq!(
        place(&[big, big2, big3], vec![with_cpu("a"), with_cpu("b")]),
        ["a", "b", "-"]
    );
    let mut huge = Run::function();
    huge.requests = Resources::new().with("cpu", 2000);
    let u = why(&huge, vec![with_cpu("a"), node("b", 0, 0)]);
    assert_eq!(u.reason, Reason::InsufficientResources);
    assert_eq!(
        u.message,
        "0/2 python Pods can take this Run: 1 insufficient cpu, 1 no free run slot"
    );
}

#[test]
fn resources_steer_the_spread() {
    let mut a = node("a", 8, 0);
    a.capacity.resources = Resources::new().with("memory", 1000);
    a.hold(Holder {
        requests: Resources::new().with("memory", 900),
        ..Holder::default()
    });
    let mut b = node("b", 8, 2);
    b.capacity.resources = Resources::new().with("memory", 1000);
    // a has more free slots, b far more free memory: b's average share wins.
    assert_eq!(place(&[Run::function()], vec![a, b]), ["b"]);
}

#[test]
fn required_affinity_follows_its_cohort_and_bootstraps_an_empty_one() {
    let mut follower = Run::function().labelled("app", "web");
    follower.affinity.run_affinity = Some(affinity::RunAffinity {
        required: vec![RunAffinityTerm {
            label_selector: selector("app", "web"),
        }],
        ..Default::default()
    });
    // The cohort is on b: follow it, even though a is emptier.
    let mut b = node("b", 4, 0);
    b.hold(holder("app", "web"));
    assert_eq!(place(&[follower], vec![node("a", 4, 0), b.clone()]), ["b"]);
    // No one matches and the Run matches itself: it starts the cohort, and
    // the next one follows it.
    let mut first = Run::function().labelled("app", "web");
    first.affinity.run_affinity = Some(affinity::RunAffinity {
        required: vec![RunAffinityTerm {
            label_selector: selector("app", "web"),
        }],
        ..Default::default()
    });
    let second = Run {
        affinity: first.affinity.clone(),
        ..Run::function().labelled("app", "web")
    };
    assert_eq!(
        place(&[first, second], vec![node("a", 4, 0), node("b", 4, 0)]),
        ["a", "a"]
    );
    // A Run that does not match its own term cannot bootstrap.
    let mut stranger = Run::function();
    stranger.affinity.run_affinity = Some(affinity::RunAffinity {
        required: vec![RunAffinityTerm {
            label_selector: selector("app", "web"),
        }],
        ..Default::default()
    });
    let u = why(&stranger, vec![node("a", 4, 0)]);
    assert_eq!(u.reason, Reason::AffinityUnsatisfied);
    assert_eq!(
        u.message,
        "0/1 python Pods can take this Run: 1 no Run its runAffinity requires"
    );
    // The cohort in another namespace does not count.
    let mut elsewhere = node("a", 4, 0);
    elsewhere.hold(Holder {
        namespace: "other".into(),
        ..holder("app", "web")
    });
    assert_eq!(
        why(&stranger, vec![elsewhere]).reason,
        Reason::AffinityUnsatisfied
    );
}

#[test]
fn required_anti_affinity_is_enforced_both_ways() {
    let mut loner = Run::function().labelled("app", "db");
    loner.affinity.run_anti_affinity = Some(affinity::RunAffinity {
        required: vec![RunAffinityTerm {
            label_selector: selector("app", "db"),
        }],
        ..Default::default()
    });
    let twin = Run {
        affinity: loner.affinity.clone(),
        ..Run::function().labelled("app", "db")
    };
    let third = Run {
        affinity: loner.affinity.clone(),
        ..Run::function().labelled("app", "db")
    };
    assert_eq!(
        place(
            &[loner, twin, third],
            vec![node("a", 4, 0), node("b", 4, 0)]
        ),
        ["a", "b", "-"]
    );
    // A plain Run may not join a Pod whose Run forbids it.
    let mut a = node("a", 4, 0);
    a.hold(Holder {
        anti: vec![selector("app", "web")],
        ..holder("app", "db")
    });
    let u = why(&Run::function().labelled("app", "web"), vec![a]);
    assert_eq!(u.reason, Reason::AffinityUnsatisfied);
    assert!(u.message.ends_with("1 a Run its runAntiAffinity forbids"));
}

#[test]
fn the_reason_names_the_stage_the_furthest_pods_reached() {
    let mut stranger = Run::function();
    stranger.requests = Resources::new().with("cpu", 10);
    stranger.affinity.run_affinity = Some(affinity::RunAffinity {
        required: vec![RunAffinityTerm {
            label_selector: selector("app", "web"),
        }],
        ..Default::default()
    });
    let mut full = node("full", 1, 1);
    full.ready = true;
    let mut small = node("small", 4, 0);
    small.capacity.resources = Resources::new().with("cpu", 5);
    let fits = node("fits", 4, 0);
    let u = why(&stranger, vec![full.clone(), small.clone(), fits]);
    assert_eq!(u.reason, Reason::AffinityUnsatisfied);
    let u = why(&stranger, vec![full.clone(), small]);
    assert_eq!(u.reason, Reason::InsufficientResources);
    assert_eq!(why(&stranger, vec![full]).reason, Reason::NoIdlePod);
    assert_eq!(u.rejections.values().sum::<u32>(), 2);
}

#[test]
fn preferred_terms_outweigh_spreading_and_anti_preferences_repel() {
    let mut likes = Run::function();
    likes.affinity.run_affinity = Some(affinity::RunAffinity {
        preferred: vec![WeightedRunAffinityTerm {
            weight: 10,
            label_selector: selector("app", "cache"),
        }],
        ..Default::default()
    });
    let mut busy = node("busy", 8, 3);
    busy.hold(holder("app", "cache"));
    assert_eq!(
        place(&[likes], vec![node("empty", 8, 0), busy.clone()]),
        ["busy"]
    );
    let mut avoids = Run::function();
    avoids.affinity.run_anti_affinity = Some(affinity::RunAffinity {
        preferred: vec![WeightedRunAffinityTerm {
            weight: 10,
            label_selector: selector("app", "cache"),
        }],
        ..Default::default()
    });
    let mut crowded = node("a", 8, 0);
    crowded.hold(holder("app", "cache"));
    assert_eq!(place(&[avoids], vec![crowded, node("z", 8, 4)]), ["z"]);
}

#[test]
fn scores_are_normalised_to_zero_to_a_hundred() {
    assert_eq!(normalise(&[]), Vec::<u64>::new());
    assert_eq!(normalise(&[5, 5]), [0, 0]);
    assert_eq!(normalise(&[-10, 0, 10]), [0, 50, 100]);
    assert_eq!(normalise(&[i64::MIN, i64::MAX]), [0, 100]);
}

#[test]
fn weights_decide_between_plugins() {
    struct Constant(&'static str, i64);
    impl Score for Constant {
        fn name(&self) -> &'static str {
            self.0
        }
        fn score(&self, _: &Candidate<'_>, node: &Node) -> i64 {
            if node.name == self.0 { self.1 } else { 0 }
        }
    }
    let fw = |wa, wb| {
        Framework::new(
            vec![Box::new(RuntimePodAvailability)],
            vec![
                (Box::new(Constant("a", 1)), wa),
                (Box::new(Constant("b", 1)), wb),
            ],
        )
    };
    let run = Run::function();
    for (wa, wb, want) in [(1, 2, "b"), (2, 1, "a"), (1, 1, "a")] {
        let mut snap = Snapshot::new(vec![node("b", 4, 0), node("a", 4, 0)]);
        let Outcome::Placed(i) = fw(wa, wb).cycle(&run.candidate(), &mut snap) else {
            panic!("unplaced")
        };
        assert_eq!(snap.nodes()[i].name, want, "weights {wa}/{wb}");
    }
    assert!(format!("{:?}", Framework::default()).contains("RunAffinity"));
}
