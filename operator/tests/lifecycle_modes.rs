//! One lifecycle, two control planes: every rule of docs/crds.md's lifecycle
//! table is run through the embedded control plane (`krt up`) and through
//! the Kubernetes operator with its owner runtimed, and both must end with
//! the same phase, reason and attempt.
//!
//! Both sides are their real pure cores — the embedded `Controller`, the
//! operator's `decide::reconcile` and the owner's `lifecycle::owner::decide`
//! — driven by small simulations of what happens around them (runtimed
//! tables, Pods coming and going, the clock).

// Test helpers panic on failure: that is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime};

use kruntimes_api::lifecycle::owner::{self, Local, Step};
use kruntimes_api::lifecycle::{Life, Rules};
use kruntimes_api::{
    FunctionMode, ModeKind, Phase, Reason, Run, RunMode, RunSpec, RunStatus, SessionMode, TaskMode,
    Termination, TerminationMode,
};
use kruntimes_operator::cluster::decide::{self, Op, PodInfo, RunView, RuntimeInfo, Settings};
use kruntimes_operator::embedded::controller::{Action, Controller, PodConfig, RegisterOutcome};
use kruntimes_proto::ownership::v1 as own;
use kruntimes_proto::watch::SourceUpdate;

/// What happens to the one Run of a scenario.
#[derive(Debug, Clone, Copy)]
enum Happening {
    /// The owner's Pod is gone and replaced by a fresh one.
    OwnerReplaced,
    /// The owner's Pod is gone for good.
    OwnerGone,
    /// The owner's runtimed restarted in place and lost its local state.
    OwnerRestarted,
    /// The owner reports idle expiry.
    IdleExpires,
    /// `spec.termination` is set.
    Terminate(TerminationMode),
    /// The clock moves on.
    Advance(u64),
}

use Happening::*;

/// The Run a scenario creates.
#[derive(Debug, Clone)]
struct Spec {
    mode: RunMode,
    max_retries: u32,
    timeout: Option<u32>,
    termination: Option<TerminationMode>,
    /// Its registration is refused by the owner.
    refused: bool,
}

fn function() -> Spec {
    Spec {
        mode: RunMode {
            function: Some(FunctionMode {
                handler: "main.invoke".into(),
                ..Default::default()
            }),
            ..Default::default()
        },
        max_retries: 3,
        timeout: None,
        termination: None,
        refused: false,
    }
}

fn session() -> Spec {
    Spec {
        mode: RunMode {
            session: Some(SessionMode::default()),
            ..Default::default()
        },
        ..function()
    }
}

impl Spec {
    fn run(&self) -> Run {
        let mut run = Run::new(
            "r",
            RunSpec {
                runtime: "python".into(),
                mode: self.mode.clone(),
                timeout: self.timeout,
                termination: self.termination.map(|mode| Termination { mode }),
                ..Default::default()
            },
        );
        run.metadata.namespace = Some("default".into());
        run.spec.retry_policy.max_retries = self.max_retries;
        run
    }
}

/// A control plane under test.
trait Mode {
    fn create(&mut self, spec: &Spec);
    fn step(&mut self, step: Happening);
    fn settle(&mut self);
    fn observe(&self) -> (Phase, Option<Reason>, u64);
}

// ---------------------------------------------------------------- embedded

/// The embedded control plane with healthy runtimed instances simulated
/// around it: their tables follow every RPC, as the real ones publish.
struct Embedded {
    c: Controller,
    now: Instant,
    refuse: bool,
    instances: BTreeMap<String, String>,
    queue: Vec<Action>,
    spec: Option<Spec>,
}

impl Embedded {
    fn new(pods: usize) -> Self {
        let now = Instant::now();
        let cfg = (0..pods)
            .map(|i| PodConfig {
                name: format!("pod-{i}"),
                address: format!("127.0.0.1:{}", 9000 + i),
                capacity: 4,
            })
            .collect();
        let mut e = Self {
            c: Controller::new(cfg, Duration::from_secs(5), Duration::ZERO),
            now,
            refuse: false,
            instances: BTreeMap::new(),
            queue: Vec::new(),
            spec: None,
        };
        for i in 0..pods {
            e.restart_pod(&format!("pod-{i}"), &format!("uid-{i}"));
        }
        e
    }

    fn restart_pod(&mut self, pod: &str, instance: &str) {
        self.instances.insert(pod.into(), instance.into());
        let snapshot = SourceUpdate::Snapshot {
            instance_id: instance.into(),
            entries: vec![],
        };
        let actions = self.c.apply_pod(pod, snapshot, self.now);
        self.queue.extend(actions);
    }

    fn owner(&self) -> String {
        self.c
            .runs()
            .next()
            .and_then(|r| r.owner.as_ref().map(|o| o.pod.clone()))
            .expect("the Run has an owner")
    }

    fn perform(&mut self, action: Action) {
        let now = self.now;
        let entry = |uid: &str, attempt, mode: own::Mode| own::OwnershipEntry {
            run_uid: uid.into(),
            attempt,
            phase: own::Phase::Ready as i32,
            mode: mode as i32,
            ..Default::default()
        };
        let more = match action {
            Action::Register { pod, request } => {
                let uid = request.run.clone().unwrap().uid;
                self.registered(
                    &pod,
                    &uid,
                    request.attempt,
                    entry(&uid, request.attempt, own::Mode::Function),
                )
            }
            Action::OpenSession { pod, request } => {
                let uid = request.run.clone().unwrap().uid;
                self.registered(
                    &pod,
                    &uid,
                    request.attempt,
                    entry(&uid, request.attempt, own::Mode::Session),
                )
            }
            Action::Unregister { pod, run_uid, .. } | Action::CloseSession { pod, run_uid, .. } => {
                let mut more = self
                    .c
                    .apply_pod(&pod, SourceUpdate::Delete(run_uid.clone()), now);
                more.extend(self.c.release_result(&pod, &run_uid, now));
                more
            }
        };
        self.queue.extend(more);
    }

    fn registered(
        &mut self,
        pod: &str,
        uid: &str,
        attempt: u64,
        entry: own::OwnershipEntry,
    ) -> Vec<Action> {
        let now = self.now;
        if self.refuse {
            let outcome = RegisterOutcome::Permanent("ImportError: no module main".into());
            return self.c.register_result(uid, attempt, outcome, now);
        }
        let mut more = self.c.apply_pod(pod, SourceUpdate::Upsert(entry), now);
        more.extend(
            self.c
                .register_result(uid, attempt, RegisterOutcome::Ok, now),
        );
        more
    }
}

impl Mode for Embedded {
    fn create(&mut self, spec: &Spec) {
        self.refuse = spec.refused;
        self.spec = Some(spec.clone());
        let run = spec.run();
        let actions = self
            .c
            .apply_store(BTreeMap::from([(run.key(), run)]), self.now);
        self.queue.extend(actions);
    }

    fn step(&mut self, step: Happening) {
        match step {
            OwnerReplaced => {
                let pod = self.owner();
                let fresh = format!("{}-replaced", self.instances[&pod]);
                self.restart_pod(&pod, &fresh);
            }
            OwnerGone => {
                let pod = self.owner();
                let actions = self.c.apply_pod(&pod, SourceUpdate::Lost, self.now);
                self.queue.extend(actions);
                self.now += Duration::from_secs(6);
            }
            OwnerRestarted => {
                let pod = self.owner();
                let instance = self.instances[&pod].clone();
                self.restart_pod(&pod, &instance);
            }
            IdleExpires => {
                let pod = self.owner();
                let run = self.c.runs().next().unwrap();
                let mode = match run.mode {
                    Ok(ModeKind::Session) => own::Mode::Session,
                    _ => own::Mode::Function,
                };
                let e = own::OwnershipEntry {
                    run_uid: run.uid().into(),
                    attempt: run.life.attempt,
                    phase: own::Phase::Failed as i32,
                    reason: "IdleTimeout".into(),
                    mode: mode as i32,
                    ..Default::default()
                };
                let actions = self.c.apply_pod(&pod, SourceUpdate::Upsert(e), self.now);
                self.queue.extend(actions);
            }
            Terminate(mode) => {
                let mut spec = self.spec.clone().unwrap();
                spec.termination = Some(mode);
                let run = spec.run();
                let actions = self
                    .c
                    .apply_store(BTreeMap::from([(run.key(), run)]), self.now);
                self.queue.extend(actions);
            }
            Advance(secs) => self.now += Duration::from_secs(secs),
        }
    }

    fn settle(&mut self) {
        for _ in 0..50 {
            while let Some(a) = self.queue.pop() {
                self.perform(a);
            }
            let actions = self.c.tick(self.now);
            if actions.is_empty() {
                return;
            }
            self.queue.extend(actions);
        }
        panic!("the embedded control plane did not settle");
    }

    fn observe(&self) -> (Phase, Option<Reason>, u64) {
        let l = self.c.runs().next().expect("the Run exists").life;
        (l.phase, l.reason, l.attempt)
    }
}

// -------------------------------------------------------------- Kubernetes

/// A Runtime Pod and the local table of its runtimed.
struct SimPod {
    info: PodInfo,
    locals: BTreeMap<String, Local>,
}

/// The operator's `reconcile` and each Pod's owner decisions, applied to an
/// in-memory API server until nothing changes.
struct Kubernetes {
    run: Option<RunView>,
    spec: Option<Spec>,
    pods: Vec<SimPod>,
    refuse: bool,
    now: SystemTime,
    created: SystemTime,
    next_pod: usize,
}

impl Kubernetes {
    fn new(pods: usize) -> Self {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let mut k = Self {
            run: None,
            spec: None,
            pods: Vec::new(),
            refuse: false,
            now,
            created: now,
            next_pod: 0,
        };
        for _ in 0..pods {
            k.add_pod();
        }
        k
    }

    fn add_pod(&mut self) {
        let i = self.next_pod;
        self.next_pod += 1;
        self.pods.push(SimPod {
            info: PodInfo {
                namespace: "kruntimes-system".into(),
                name: format!("pod-{i}"),
                uid: format!("uid-{i}"),
                runtime: "python".into(),
                ready: true,
                terminating: false,
                address: Some(format!("10.0.0.{i}:7443")),
            },
            locals: BTreeMap::new(),
        });
    }

    fn owner_index(&self) -> usize {
        let uid = self
            .run
            .as_ref()
            .and_then(|r| r.status.assigned_pod_uid.clone())
            .expect("the Run has an owner");
        self.pods
            .iter()
            .position(|p| p.info.uid == uid)
            .expect("the owner Pod exists")
    }

    fn view(&self, spec: &Spec, status: RunStatus) -> RunView {
        let run = spec.run();
        RunView {
            namespace: "default".into(),
            name: "r".into(),
            uid: "run-uid".into(),
            runtime: "python".into(),
            mode: run.validate(),
            created: self.created,
            timeout: spec.timeout,
            max_retries: spec.max_retries,
            termination: spec.termination,
            deleting: false,
            has_finalizer: true,
            status,
        }
    }

    /// The operator's pass; whether anything changed.
    fn operator(&mut self) -> bool {
        let Some(run) = self.run.clone() else {
            return false;
        };
        let pods: Vec<PodInfo> = self.pods.iter().map(|p| p.info.clone()).collect();
        let runtimes = [RuntimeInfo {
            namespace: "kruntimes-system".into(),
            name: "python".into(),
            capacity: 4,
        }];
        let settings = Settings {
            gateway_url: "https://gw".into(),
            ca_bundle: None,
            system_namespace: "kruntimes-system".into(),
        };
        let mut changed = false;
        for op in decide::reconcile(&[run], &pods, &runtimes, &settings, self.now) {
            if let Op::Status { status, .. } = op {
                self.run.as_mut().unwrap().status = *status;
                changed = true;
            }
        }
        changed
    }

    /// Every living runtimed's pass; whether anything changed.
    fn runtimeds(&mut self) -> bool {
        let mut changed = false;
        for i in 0..self.pods.len() {
            let Some(run) = self.run.clone() else {
                return changed;
            };
            let rules = Rules {
                mode: run.mode.clone().unwrap_or(ModeKind::Function),
                max_retries: run.max_retries,
                termination: run.termination,
            };
            let facts = owner::Facts {
                mine: run.status.assigned_pod_uid.as_deref()
                    == Some(self.pods[i].info.uid.as_str()),
                pod_gone: false,
                life: Life::of(Some(&run.status)),
                rules,
                deleting: false,
                has_finalizer: true,
            };
            let local = self.pods[i].locals.get(&run.uid).cloned();
            for step in owner::decide(&facts, local.as_ref()) {
                changed = true;
                match step {
                    Step::Report(t) => self.report(&t),
                    Step::Register => {
                        let life = Life::of(Some(&self.run.as_ref().unwrap().status));
                        let outcome = if self.refuse {
                            Err("ImportError: no module main")
                        } else {
                            self.pods[i].locals.insert(
                                run.uid.clone(),
                                Local {
                                    attempt: life.attempt,
                                    phase: own::Phase::Ready,
                                    reason: String::new(),
                                },
                            );
                            Ok(())
                        };
                        if let Some(t) = owner::registered(&life, &rules, outcome) {
                            self.report(&t);
                        }
                    }
                    Step::Release(_) => {
                        self.pods[i].locals.remove(&run.uid);
                    }
                    Step::RemoveFinalizer => {}
                }
            }
        }
        changed
    }

    fn report(&mut self, t: &kruntimes_api::lifecycle::Transition) {
        let status = &mut self.run.as_mut().unwrap().status;
        status.phase = Some(t.phase);
        status.reason = Some(t.reason.as_str().into());
        status.message = kruntimes_api::bounded_message(&t.message);
    }
}

impl Mode for Kubernetes {
    fn create(&mut self, spec: &Spec) {
        self.refuse = spec.refused;
        self.spec = Some(spec.clone());
        self.run = Some(self.view(spec, RunStatus::default()));
    }

    fn step(&mut self, step: Happening) {
        match step {
            OwnerReplaced => {
                let i = self.owner_index();
                self.pods.remove(i);
                self.add_pod();
            }
            OwnerGone => {
                let i = self.owner_index();
                self.pods.remove(i);
            }
            OwnerRestarted => {
                let i = self.owner_index();
                self.pods[i].locals.clear();
            }
            IdleExpires => {
                let i = self.owner_index();
                for l in self.pods[i].locals.values_mut() {
                    l.phase = own::Phase::Failed;
                    l.reason = "IdleTimeout".into();
                }
            }
            Terminate(mode) => {
                let spec = self.spec.as_mut().unwrap();
                spec.termination = Some(mode);
                self.run.as_mut().unwrap().termination = Some(mode);
            }
            Advance(secs) => self.now += Duration::from_secs(secs),
        }
    }

    fn settle(&mut self) {
        for _ in 0..50 {
            let a = self.operator();
            let b = self.runtimeds();
            if !a && !b {
                return;
            }
        }
        panic!("the Kubernetes control plane did not settle");
    }

    fn observe(&self) -> (Phase, Option<Reason>, u64) {
        let run = self.run.as_ref().expect("the Run exists");
        let l = Life::of(Some(&run.status));
        (l.phase, l.reason, l.attempt)
    }
}

// ----------------------------------------------------------------- the table

struct Rule {
    name: &'static str,
    pods: usize,
    spec: Spec,
    steps: Vec<Happening>,
    want: (Phase, Reason, u64),
}

fn rule(
    name: &'static str,
    pods: usize,
    spec: Spec,
    steps: Vec<Happening>,
    want: (Phase, Reason, u64),
) -> Rule {
    Rule {
        name,
        pods,
        spec,
        steps,
        want,
    }
}

fn rules() -> Vec<Rule> {
    use Phase::*;
    let retries = |n| Spec {
        max_retries: n,
        ..function()
    };
    let invalid = Spec {
        mode: RunMode::default(),
        ..function()
    };
    let task = Spec {
        mode: RunMode {
            task: Some(TaskMode::default()),
            ..Default::default()
        },
        ..function()
    };
    let timed = Spec {
        timeout: Some(30),
        ..function()
    };
    let refused = Spec {
        refused: true,
        ..function()
    };
    let terminated = Spec {
        termination: Some(TerminationMode::Drain),
        ..function()
    };
    vec![
        rule(
            "a function Run becomes Ready",
            2,
            function(),
            vec![],
            (Ready, Reason::Registered, 1),
        ),
        rule(
            "a session Run becomes Ready",
            2,
            session(),
            vec![],
            (Ready, Reason::Registered, 1),
        ),
        rule(
            "no Pod: it waits",
            0,
            function(),
            vec![],
            (Pending, Reason::Unschedulable, 0),
        ),
        rule(
            "an invalid spec fails",
            2,
            invalid,
            vec![],
            (Failed, Reason::InvalidSpec, 0),
        ),
        rule(
            "task mode is unsupported",
            2,
            task,
            vec![],
            (Failed, Reason::UnsupportedMode, 0),
        ),
        rule(
            "a refused registration fails",
            2,
            refused,
            vec![],
            (Failed, Reason::RegistrationFailed, 1),
        ),
        rule(
            "termination before a Pod cancels",
            0,
            terminated,
            vec![],
            (Cancelled, Reason::Terminated, 0),
        ),
        rule(
            "owner loss moves a function Run",
            2,
            function(),
            vec![OwnerReplaced],
            (Ready, Reason::Registered, 2),
        ),
        rule(
            "owner loss with nowhere to go waits",
            1,
            function(),
            vec![OwnerGone],
            (Pending, Reason::OwnerLost, 1),
        ),
        rule(
            "retries run out at attempt maxRetries + 1",
            2,
            retries(1),
            vec![OwnerReplaced, OwnerReplaced],
            (Failed, Reason::OwnerLost, 2),
        ),
        rule(
            "maxRetries 0 fails on the first loss",
            2,
            retries(0),
            vec![OwnerReplaced],
            (Failed, Reason::OwnerLost, 1),
        ),
        rule(
            "a session never moves",
            2,
            session(),
            vec![OwnerReplaced],
            (Failed, Reason::OwnerLost, 1),
        ),
        rule(
            "a restarted owner rebuilds a function",
            2,
            function(),
            vec![OwnerRestarted],
            (Ready, Reason::Registered, 1),
        ),
        rule(
            "a restarted owner loses a session",
            2,
            session(),
            vec![OwnerRestarted],
            (Failed, Reason::SessionLost, 1),
        ),
        rule(
            "idle expiry ends a function Run",
            2,
            function(),
            vec![IdleExpires],
            (Timeout, Reason::IdleTimeout, 1),
        ),
        rule(
            "idle expiry ends a session",
            2,
            session(),
            vec![IdleExpires],
            (Timeout, Reason::IdleTimeout, 1),
        ),
        rule(
            "spec.timeout ends a Ready Run",
            2,
            timed,
            vec![Advance(31)],
            (Timeout, Reason::RunTimeout, 1),
        ),
        rule(
            "Drain finishes then succeeds",
            2,
            function(),
            vec![Terminate(TerminationMode::Drain)],
            (Succeeded, Reason::Drained, 1),
        ),
        rule(
            "Drain a session",
            2,
            session(),
            vec![Terminate(TerminationMode::Drain)],
            (Succeeded, Reason::Drained, 1),
        ),
        rule(
            "Immediate cancels a function",
            2,
            function(),
            vec![Terminate(TerminationMode::Immediate)],
            (Cancelled, Reason::Terminated, 1),
        ),
        rule(
            "Immediate cancels a session",
            2,
            session(),
            vec![Terminate(TerminationMode::Immediate)],
            (Cancelled, Reason::Terminated, 1),
        ),
        rule(
            "an ended Run stays ended",
            2,
            function(),
            vec![
                Terminate(TerminationMode::Immediate),
                OwnerReplaced,
                Advance(3600),
            ],
            (Cancelled, Reason::Terminated, 1),
        ),
    ]
}

fn run_rule(mode: &mut dyn Mode, r: &Rule) -> (Phase, Option<Reason>, u64) {
    mode.create(&r.spec);
    mode.settle();
    for step in &r.steps {
        mode.step(*step);
        mode.settle();
    }
    mode.observe()
}

#[test]
fn both_control_planes_follow_the_same_lifecycle() {
    let mut failures = Vec::new();
    for r in rules() {
        let want = (r.want.0, Some(r.want.1), r.want.2);
        let embedded = run_rule(&mut Embedded::new(r.pods), &r);
        let kubernetes = run_rule(&mut Kubernetes::new(r.pods), &r);
        if embedded != want || kubernetes != want {
            failures.push(format!(
                "{}: want {want:?}, embedded {embedded:?}, kubernetes {kubernetes:?}",
                r.name
            ));
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}
