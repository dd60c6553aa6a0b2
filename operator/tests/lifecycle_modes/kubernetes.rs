//! The Kubernetes operator and its owner runtimed under test, over an
//! in-memory API server.

use super::*;

/// A Runtime Pod and the local table of its runtimed.
struct SimPod {
    info: PodInfo,
    locals: BTreeMap<String, Local>,
}

/// The operator's `reconcile` and each Pod's owner decisions, applied to an
/// in-memory API server until nothing changes.
pub(crate) struct Kubernetes {
    run: Option<RunView>,
    spec: Option<Spec>,
    pods: Vec<SimPod>,
    refuse: bool,
    now: SystemTime,
    created: SystemTime,
    next_pod: usize,
}

impl Kubernetes {
    pub(crate) fn new(pods: usize) -> Self {
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
                delete_first: false,
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
            labels: Default::default(),
            runtime: "python".into(),
            requests: Default::default(),
            priority: 0,
            affinity: Default::default(),
            mode: run.validate(),
            created: self.created,
            timeout: spec.timeout,
            max_retries: spec.max_retries,
            termination: spec.termination,
            ttl_after_finished: None,
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
            capacity: Capacity {
                runs: 4,
                resources: Default::default(),
            },
        }];
        let settings = Settings {
            gateway_url: "https://gw".into(),
            ca_bundle: None,
            system_namespace: "kruntimes-system".into(),
        };
        let mut changed = false;
        for op in decide::reconcile(
            &[run],
            &pods,
            &runtimes,
            &settings,
            self.now,
            &Default::default(),
        )
        .ops
        {
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
                retry_exit_codes: kruntimes_api::lifecycle::ExitCodes::of(
                    &self.spec.as_ref().unwrap().retry_exit_codes,
                )
                .unwrap(),
            };
            let facts = owner::Facts {
                mine: run.status.assigned_pod_uid.as_deref()
                    == Some(self.pods[i].info.uid.as_str()),
                pod_gone: false,
                life: run.status.life(),
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
                        let life = self.run.as_ref().unwrap().status.life();
                        let outcome = if self.refuse {
                            Err("ImportError: no module main")
                        } else {
                            self.pods[i].locals.insert(
                                run.uid.clone(),
                                Local {
                                    attempt: life.attempt,
                                    phase: Some(TablePhase::Ready),
                                    reason: String::new(),
                                    exit: None,
                                    exported: false,
                                    artifacts_failed: None,
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
                    Step::Kill => {
                        if let Some(l) = self.pods[i].locals.get_mut(&run.uid) {
                            l.exit = Some(137);
                        }
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
                    l.phase = Some(TablePhase::Failed);
                    l.reason = "IdleTimeout".into();
                }
            }
            Terminate(mode) => {
                let spec = self.spec.as_mut().unwrap();
                spec.termination = Some(mode);
                self.run.as_mut().unwrap().termination = Some(mode);
            }
            Advance(secs) => self.now += Duration::from_secs(secs),
            TaskExits(code) => {
                let i = self.owner_index();
                for l in self.pods[i].locals.values_mut() {
                    l.exit = Some(code);
                }
            }
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
        let l = run.status.life();
        (l.phase, l.reason, l.attempt)
    }
}
