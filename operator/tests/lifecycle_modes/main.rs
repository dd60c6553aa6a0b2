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
use kruntimes_api::lifecycle::{Rules, TablePhase};
use kruntimes_api::{
    FunctionMode, ModeKind, Phase, Reason, Run, RunMode, RunSpec, RunStatus, SessionMode, TaskMode,
    Termination, TerminationMode,
};
use kruntimes_core::scheduler::Capacity;
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
    /// The owner's task process exits with this code.
    TaskExits(i32),
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
    /// `retryPolicy.onExitCodes`.
    retry_exit_codes: Vec<i32>,
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
        retry_exit_codes: vec![],
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
        run.spec.retry_policy.on_exit_codes = self.retry_exit_codes.clone();
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

mod embedded;
mod kubernetes;

use embedded::Embedded;
use kubernetes::Kubernetes;

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
            task: Some(TaskMode {
                entrypoint: Some("main.py".into()),
                args: vec![],
            }),
            ..Default::default()
        },
        ..function()
    };
    let retried_task = Spec {
        max_retries: 1,
        retry_exit_codes: vec![75],
        ..task.clone()
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
            (Pending, Reason::NoIdlePod, 0),
        ),
        rule(
            "an invalid spec fails",
            2,
            invalid,
            vec![],
            (Failed, Reason::InvalidSpec, 0),
        ),
        rule(
            "a task Run starts once and runs",
            2,
            task.clone(),
            vec![],
            (Running, Reason::Started, 1),
        ),
        rule(
            "a task that exits 0 succeeds",
            2,
            task.clone(),
            vec![TaskExits(0)],
            (Succeeded, Reason::Completed, 1),
        ),
        rule(
            "a task that exits non-zero fails",
            2,
            task.clone(),
            vec![TaskExits(3)],
            (Failed, Reason::NonZeroExit, 1),
        ),
        rule(
            "an exit code the policy names is retried after a backoff",
            2,
            retried_task.clone(),
            vec![TaskExits(75), Advance(2)],
            (Running, Reason::Started, 2),
        ),
        rule(
            "a retried code fails once retries run out",
            2,
            retried_task.clone(),
            vec![TaskExits(75), Advance(2), TaskExits(75)],
            (Failed, Reason::NonZeroExit, 2),
        ),
        rule(
            "an exit code the policy does not name is not retried",
            2,
            retried_task,
            vec![TaskExits(3)],
            (Failed, Reason::NonZeroExit, 1),
        ),
        rule(
            "owner loss retries a running task",
            2,
            task.clone(),
            vec![OwnerReplaced, Advance(2)],
            (Running, Reason::Started, 2),
        ),
        rule(
            "a restarted owner loses a running task",
            2,
            Spec {
                max_retries: 0,
                ..task.clone()
            },
            vec![OwnerRestarted],
            (Failed, Reason::OwnerLost, 1),
        ),
        rule(
            "Drain lets a task finish",
            2,
            task.clone(),
            vec![Terminate(TerminationMode::Drain), TaskExits(0)],
            (Succeeded, Reason::Completed, 1),
        ),
        rule(
            "Immediate kills a task",
            2,
            task.clone(),
            vec![Terminate(TerminationMode::Immediate)],
            (Cancelled, Reason::Terminated, 1),
        ),
        rule(
            "a finished task stays finished",
            2,
            task,
            vec![TaskExits(0), OwnerReplaced, Advance(3600)],
            (Succeeded, Reason::Completed, 1),
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
