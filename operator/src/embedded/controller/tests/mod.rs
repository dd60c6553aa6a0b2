//! Tests of the embedded decision core, with helpers that play healthy
//! runtimed instances (their tables follow every RPC).

pub(super) use super::*;
pub(super) use kruntimes_api::{
    FunctionMode, Phase, Reason, RunMode, RunSpec, SessionMode, SourceSpec, TaskMode, Termination,
};

pub(super) fn function(name: &str) -> Run {
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

pub(super) fn session(name: &str) -> Run {
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

pub(super) fn store(runs: &[Run]) -> BTreeMap<String, Run> {
    runs.iter().map(|r| (r.key(), r.clone())).collect()
}

pub(super) fn functions(names: &[&str]) -> BTreeMap<String, Run> {
    store(&names.iter().map(|n| function(n)).collect::<Vec<_>>())
}

pub(super) fn pods(n: usize, capacity: u32) -> Vec<PodConfig> {
    (0..n)
        .map(|i| PodConfig {
            name: format!("runtimed-{i}"),
            address: format!("127.0.0.1:{}", 9000 + i),
            capacity,
            resources: Default::default(),
        })
        .collect()
}

pub(super) fn controller(n: usize) -> Controller {
    Controller::new(
        pods(n, 2),
        Duration::from_secs(5),
        Duration::from_millis(100),
    )
}

pub(super) fn snapshot(instance: &str, entries: Vec<own::OwnershipEntry>) -> SourceUpdate {
    SourceUpdate::Snapshot {
        instance_id: instance.into(),
        entries,
    }
}

pub(super) fn by_name<'a>(c: &'a Controller, name: &str) -> &'a RunState {
    c.runs().find(|r| r.run.name_str() == name).unwrap()
}

pub(super) fn life(c: &Controller, name: &str) -> (Phase, Option<Reason>, u64) {
    let l = by_name(c, name).life;
    (l.phase, l.reason, l.attempt)
}

pub(super) fn uid(c: &Controller, name: &str) -> String {
    by_name(c, name).uid().to_owned()
}

/// Whether an assignment opens a session.
pub(super) fn is_session(request: &kruntimes_proto::agent::v1::AssignRequest) -> bool {
    matches!(
        request.mode,
        Some(kruntimes_proto::agent::v1::assign_request::Mode::Session(_))
    )
}

/// Whether an assignment starts a task.
pub(super) fn is_task(request: &kruntimes_proto::agent::v1::AssignRequest) -> bool {
    matches!(
        request.mode,
        Some(kruntimes_proto::agent::v1::assign_request::Mode::Task(_))
    )
}

pub(super) fn registers(actions: &[Action]) -> Vec<(String, u64)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Assign { pod, request } => Some((pod.clone(), request.attempt)),
            _ => None,
        })
        .collect()
}

pub(super) fn entry(
    uid: &str,
    attempt: u64,
    phase: own::Phase,
    reason: &str,
) -> own::OwnershipEntry {
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
pub(super) fn settle(c: &mut Controller, actions: Vec<Action>, now: Instant) -> Vec<Action> {
    settle_with(c, actions, now, true)
}

/// [`settle`], but instances asked to stop keep running (unanswered) when
/// `answer_stops` is false.
pub(super) fn settle_with(
    c: &mut Controller,
    mut actions: Vec<Action>,
    now: Instant,
    answer_stops: bool,
) -> Vec<Action> {
    let mut seen = Vec::new();
    while let Some(action) = actions.pop() {
        seen.push(action.clone());
        match action {
            Action::Assign { pod, request } => {
                let uid = request.run.clone().unwrap().uid;
                let mut e = entry(&uid, request.attempt, own::Phase::Ready, "");
                if is_session(&request) {
                    e.mode = own::Mode::Session as i32;
                }
                if is_task(&request) {
                    // Started, running.
                    e.mode = own::Mode::Task as i32;
                    e.phase = own::Phase::Running as i32;
                    e.task = Some(own::TaskOutcome::default());
                }
                actions.extend(c.apply_pod(&pod, SourceUpdate::Upsert(Box::new(e)), now));
                actions.extend(c.register_result(&uid, request.attempt, RegisterOutcome::Ok, now));
            }
            // A killed task is kept, with its end.
            Action::Release {
                pod,
                run_uid,
                keep: true,
                ..
            } => {
                let attempt = c.runs.get(&run_uid).map_or(0, |r| r.life.attempt);
                let mut e = entry(&run_uid, attempt, own::Phase::Running, "");
                e.mode = own::Mode::Task as i32;
                e.task = Some(own::TaskOutcome {
                    ended: true,
                    cancelled: true,
                    exit_code: 143,
                    ..Default::default()
                });
                actions.extend(c.apply_pod(&pod, SourceUpdate::Upsert(Box::new(e)), now));
                actions.extend(c.release_result(&pod, &run_uid, true, now));
            }
            Action::Release { pod, run_uid, .. } => {
                actions.extend(c.apply_pod(&pod, SourceUpdate::Delete(run_uid.clone()), now));
                actions.extend(c.release_result(&pod, &run_uid, true, now));
            }
            // The store's deletion is the test's to make (seen).
            Action::Delete { .. } => {}
            // A launcher that starts each instance under the lowest free
            // name, and whose instances report their table at once.
            Action::StartInstances { count } => {
                for _ in 0..count {
                    let name = (0..)
                        .map(|i| format!("runtimed-{i}"))
                        .find(|n| !c.pods.contains_key(n))
                        .unwrap();
                    let mut cfg = pods(1, 2).remove(0);
                    cfg.name = name.clone();
                    actions.extend(c.instance_started(cfg, now));
                    actions.extend(c.apply_pod(&name, snapshot(&format!("u-{name}"), vec![]), now));
                }
            }
            Action::StopInstance { pod } if answer_stops => {
                actions.extend(c.instance_stopped(&pod, now))
            }
            Action::StopInstance { .. } => {}
        }
    }
    seen
}

/// A controller with `n` connected Pods (instances `u0`, `u1`, …).
pub(super) fn connected(n: usize, now: Instant) -> Controller {
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

mod endings;
mod owners;
mod placement;
mod pool;
mod tasks;
