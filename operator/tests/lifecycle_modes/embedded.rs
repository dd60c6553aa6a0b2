//! The embedded control plane under test, with healthy runtimed
//! instances simulated around it.

use super::*;

/// The embedded control plane with healthy runtimed instances simulated
/// around it: their tables follow every RPC, as the real ones publish.
pub(crate) struct Embedded {
    c: Controller,
    now: Instant,
    refuse: bool,
    instances: BTreeMap<String, String>,
    queue: Vec<Action>,
    spec: Option<Spec>,
}

impl Embedded {
    pub(crate) fn new(pods: usize) -> Self {
        let now = Instant::now();
        let cfg = (0..pods)
            .map(|i| PodConfig {
                name: format!("pod-{i}"),
                address: format!("127.0.0.1:{}", 9000 + i),
                capacity: 4,
                resources: Default::default(),
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
            Action::Assign { pod, request } => {
                let uid = request.run.clone().unwrap().uid;
                use kruntimes_proto::agent::v1::assign_request::Mode as Assigned;
                let mode = match request.mode {
                    Some(Assigned::Session(_)) => own::Mode::Session,
                    Some(Assigned::Task(_)) => own::Mode::Task,
                    _ => own::Mode::Function,
                };
                self.registered(
                    &pod,
                    &uid,
                    request.attempt,
                    entry(&uid, request.attempt, mode),
                )
            }
            // A kept task is killed: its exit is published, its entry stays.
            Action::Release {
                pod,
                run_uid,
                keep: true,
                ..
            } => {
                let attempt = self.c.runs().next().unwrap().life.attempt;
                let update = task_ended(&run_uid, attempt, 137);
                self.c.apply_pod(&pod, update, now)
            }
            Action::Release { pod, run_uid, .. } => {
                let mut more = self
                    .c
                    .apply_pod(&pod, SourceUpdate::Delete(run_uid.clone()), now);
                more.extend(self.c.release_result(&pod, &run_uid, true, now));
                more
            }
            // The case table runs on a fixed set of instances, with no TTL.
            Action::StartInstances { .. } | Action::StopInstance { .. } | Action::Delete { .. } => {
                unreachable!("a fixed set of instances is never resized, no TTL set: {action:?}")
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
        let mut more = self
            .c
            .apply_pod(pod, SourceUpdate::Upsert(Box::new(entry)), now);
        more.extend(
            self.c
                .register_result(uid, attempt, RegisterOutcome::Ok, now),
        );
        more
    }
}

/// runtimed's entry for a task attempt that exited with `code`.
fn task_ended(uid: &str, attempt: u64, code: i32) -> SourceUpdate {
    SourceUpdate::Upsert(Box::new(own::OwnershipEntry {
        run_uid: uid.into(),
        attempt,
        phase: own::Phase::Running as i32,
        mode: own::Mode::Task as i32,
        task: Some(own::TaskOutcome {
            ended: true,
            exit_code: code,
            ..Default::default()
        }),
        ..Default::default()
    }))
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
                let actions = self
                    .c
                    .apply_pod(&pod, SourceUpdate::Upsert(Box::new(e)), self.now);
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
            TaskExits(code) => {
                let pod = self.owner();
                let run = self.c.runs().next().unwrap();
                let update = task_ended(run.uid(), run.life.attempt, code);
                let actions = self.c.apply_pod(&pod, update, self.now);
                self.queue.extend(actions);
            }
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
