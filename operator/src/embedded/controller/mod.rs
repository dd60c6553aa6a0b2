//! The embedded control plane's decision core. Pure: every input is an
//! event (a store scan, a Pod's ownership watch, an RPC outcome, a tick),
//! every output is an [`Action`] for the adapter to perform over gRPC; Run
//! status and the ownership table are read back from the state.
//!
//! Each input is followed by one decision pass: the core's
//! [`kruntimes_core::pass::decide`] — the same pass the Kubernetes operator
//! runs — for the control plane's share (validation, `spec.timeout`, owner
//! loss, termination before a Pod, scheduling), then [`owner::decide`] on
//! behalf of each living owner (registration, readiness, termination, idle
//! expiry, release), fed with that runtimed's own ownership table. Both
//! modes therefore follow the same rules. With an [`InstancePool`], the
//! pass's demand sizes the set of runtimed instances as the operator sizes
//! a Runtime's Deployment ([`kruntimes_core::pool`]): the controller asks
//! for instances ([`Action::StartInstances`]) and retires idle ones
//! ([`Action::StopInstance`]); the adapter reports what it started and
//! stopped.

mod pass;
mod view;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use kruntimes_api::lifecycle::owner;
use kruntimes_api::lifecycle::{self, Event, Life, Rules};
use kruntimes_api::{ModeKind, Run, TerminationMode};
use kruntimes_core::Resources;
use kruntimes_core::pool::{PoolSpec, Sizer};
use kruntimes_core::scheduler::Capacity;
use kruntimes_proto::agent::v1 as agent;
use kruntimes_proto::ownership::v1 as own;
use kruntimes_proto::watch::SourceUpdate;

use pass::set;
pub use view::{PodStatus, PoolStatus, RunStatus};

/// A Runtime Pod (a runtimed instance) the control plane schedules onto.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodConfig {
    /// Instance name.
    pub name: String,
    /// Address of its TLS port.
    pub address: String,
    /// `runs` capacity.
    pub capacity: u32,
    /// Resources its Runs' requests are accounted against (none: not
    /// accounted).
    pub resources: Resources,
}

/// How the set of runtimed instances follows demand (`krt up --min-idle`,
/// `--max-runtimed`): the same rules as `Runtime.spec.pool`.
#[derive(Debug, Clone, PartialEq)]
pub struct InstancePool {
    /// Floor, idle instances kept, ceiling, scale-down delay.
    pub spec: PoolSpec,
    /// What every new instance offers.
    pub capacity: Capacity,
}

/// The pool's state: its rules, its size, the starts asked for and not yet
/// reported.
#[derive(Debug, Clone)]
struct PoolState {
    cfg: InstancePool,
    sizer: Sizer,
    starting: u32,
    /// After a start failed, none is asked for again until then.
    blocked_until: Option<Instant>,
}

/// Side effects requested by the core.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Assign a Run to a Pod (register its function, open its session); the
    /// outcome comes back through [`Controller::register_result`].
    Assign {
        /// Pod name.
        pod: String,
        /// The request (boxed: it carries the inline source).
        request: Box<agent::AssignRequest>,
    },
    /// Release a Run on a Pod (unregister its function, close its
    /// session); completion comes back through
    /// [`Controller::release_result`].
    Release {
        /// Pod name.
        pod: String,
        /// Run UID.
        run_uid: String,
        /// Cancel instead of draining.
        cancel: bool,
        /// A task's: kill its process, keep its result and log.
        keep: bool,
    },
    /// Start this many runtimed instances; each is reported through
    /// [`Controller::instance_started`] (or
    /// [`Controller::instance_start_failed`]).
    StartInstances {
        /// How many.
        count: u32,
    },
    /// Stop this idle instance (no Run is placed on it any more); reported
    /// through [`Controller::instance_stopped`].
    StopInstance {
        /// Instance name.
        pod: String,
    },
    /// Delete this Run from the store: its `ttlSecondsAfterFinished` passed.
    /// Once the store drops it, it is released like any deleted Run.
    Delete {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
    },
}

/// How long the pool waits to ask for an instance again after a start
/// failed.
const START_RETRY: Duration = Duration::from_secs(5);

/// Outcome of an Assign RPC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegisterOutcome {
    /// Registered.
    Ok,
    /// The owner could not be reached: treated as owner loss.
    Retryable(String),
    /// The registration itself is wrong (bad handler, import error).
    Permanent(String),
}

/// The Pod that owns a Run: its name and the instance (UID) it had when
/// the Run was assigned.
pub use kruntimes_core::pass::OwnerRef as Owner;

/// An owner step sent but not yet reflected in the owner's table: the Run
/// is not decided about again until it is (or the RPC failed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum InFlight {
    /// Assign at this attempt; `done` once the RPC answered.
    Register { attempt: u64, done: bool },
    /// Unregister/CloseSession; `done` once the RPC answered. A `drain`
    /// that succeeded is settled only once the owner's table shows its end
    /// (the entry withdrawn, or the export's outcome published): the RPC's
    /// answer and the table travel on different streams, and a drain asked
    /// again of a session already drained would find nothing to export.
    Release { done: bool, drain: bool, ok: bool },
}

/// One Run's state.
#[derive(Debug, Clone)]
pub struct RunState {
    /// The Run as read from the store, with the UID given at creation.
    pub run: Run,
    /// Its mode, or why the spec is invalid.
    pub mode: Result<ModeKind, String>,
    /// Phase, reason and attempt.
    pub life: Life,
    /// Bounded message of the last transition.
    pub message: String,
    /// The owner, once assigned.
    pub owner: Option<Owner>,
    /// Its manifest is gone: released by its owner, then forgotten.
    pub deleting: bool,
    /// How its task ended (task Runs, once their owner reported it).
    pub task: Option<kruntimes_api::TaskStatus>,
    /// What its task left in its artifacts directory, uploaded.
    pub artifacts: Vec<kruntimes_api::ArtifactRef>,
    /// When it reached its terminal phase.
    finished_at: Option<Instant>,
    /// Its `ttlSecondsAfterFinished` passed and its deletion was asked
    /// for ([`Action::Delete`]); the store has not dropped it yet.
    expired: bool,
    in_flight: Option<InFlight>,
    retry_at: Option<Instant>,
    assigned_at: Option<Instant>,
    created: Instant,
    seq: u64,
}

impl RunState {
    /// UID.
    pub fn uid(&self) -> &str {
        self.run.uid_str()
    }

    fn rules(&self) -> Option<Rules> {
        self.mode.as_ref().ok().map(|m| self.run.rules(*m))
    }

    fn owned_by(&self, pod: &str, pod_uid: Option<&str>) -> bool {
        self.owner
            .as_ref()
            .is_some_and(|o| o.pod == pod && Some(o.pod_uid.as_str()) == pod_uid)
    }
}

#[derive(Debug, Clone)]
struct PodState {
    cfg: PodConfig,
    uid: Option<String>,
    connected: bool,
    lost_at: Option<Instant>,
    entries: HashMap<String, own::OwnershipEntry>,
    /// Chosen to go: takes no new Run, stopped once idle.
    retiring: bool,
}

impl PodState {
    fn new(cfg: PodConfig) -> Self {
        Self {
            cfg,
            uid: None,
            connected: false,
            lost_at: None,
            entries: HashMap::new(),
            retiring: false,
        }
    }
}

/// The control plane's state.
#[derive(Debug)]
pub struct Controller {
    /// Every Run by UID (a deleted Run stays until its owner released it,
    /// possibly beside a new Run of the same name).
    runs: BTreeMap<String, RunState>,
    pods: BTreeMap<String, PodState>,
    /// Orphaned registrations (`pod`, `uid`) whose release is in flight.
    releasing: BTreeSet<(String, String)>,
    seq: u64,
    owner_grace: Duration,
    retry_backoff: Duration,
    hold_until: Option<Instant>,
    pool: Option<PoolState>,
    /// What the last pass left for the next (`pass::Plan::memo`).
    memo: BTreeMap<String, kruntimes_core::pass::PoolMemo>,
}

impl Controller {
    /// A controller over fixed Pods. `owner_grace` is how long a Pod may
    /// stay unreachable before its Runs move elsewhere; `retry_backoff` how
    /// long a Run waits after owner loss before it is placed again.
    pub fn new(pods: Vec<PodConfig>, owner_grace: Duration, retry_backoff: Duration) -> Self {
        Self {
            runs: BTreeMap::new(),
            pods: pods
                .into_iter()
                .map(|cfg| (cfg.name.clone(), PodState::new(cfg)))
                .collect(),
            releasing: BTreeSet::new(),
            seq: 0,
            owner_grace,
            retry_backoff,
            hold_until: None,
            pool: None,
            memo: BTreeMap::new(),
        }
    }

    /// Sizes the set of instances by demand (the Pods given to [`new`]
    /// are the first ones; the floor is `pool.spec.min_replicas`).
    ///
    /// [`new`]: Controller::new
    pub fn with_pool(mut self, pool: InstancePool) -> Self {
        let have = u32::try_from(self.pods.len()).unwrap_or(u32::MAX);
        self.pool = Some(PoolState {
            sizer: Sizer::new(have),
            cfg: pool,
            starting: 0,
            blocked_until: None,
        });
        self
    }

    /// The pool's size as last decided (the instances, those starting
    /// included), and its rules; `None` for a fixed set of instances.
    pub fn pool_size(&self) -> Option<(u32, &InstancePool)> {
        self.pool.as_ref().map(|p| (p.sizer.asked(), &p.cfg))
    }

    /// An instance asked for by [`Action::StartInstances`] started: Runs
    /// are placed on it once its ownership watch reports its table.
    pub fn instance_started(&mut self, cfg: PodConfig, now: Instant) -> Vec<Action> {
        if let Some(pool) = self.pool.as_mut() {
            pool.starting = pool.starting.saturating_sub(1);
        }
        tracing::info!(pod = %cfg.name, address = %cfg.address, "runtimed instance added");
        self.pods.insert(cfg.name.clone(), PodState::new(cfg));
        self.pass(now)
    }

    /// An instance asked for could not be started: asked for again after a
    /// pause.
    pub fn instance_start_failed(&mut self, now: Instant) -> Vec<Action> {
        if let Some(pool) = self.pool.as_mut() {
            pool.starting = pool.starting.saturating_sub(1);
            pool.blocked_until = Some(now + START_RETRY);
        }
        self.pass(now)
    }

    /// A retired instance stopped: forgotten.
    pub fn instance_stopped(&mut self, pod: &str, now: Instant) -> Vec<Action> {
        if self.pods.remove(pod).is_some() {
            tracing::info!(pod, "runtimed instance removed");
        }
        self.releasing.retain(|(p, _)| p != pod);
        self.pass(now)
    }

    /// Defers placement until every Pod reported its table once or `until`
    /// passes, so Runs present at start-up spread over all Pods instead of
    /// piling onto the first one to connect.
    pub fn with_startup_hold(mut self, until: Instant) -> Self {
        self.hold_until = Some(until);
        self
    }

    /// The Runs that exist (deleted ones being released are left out).
    pub fn runs(&self) -> impl Iterator<Item = &RunState> {
        self.runs.values().filter(|r| !r.deleting)
    }

    /// Applies the full set of manifests (keyed `namespace/name`, UIDs
    /// unset). New keys create Runs with fresh UIDs; removed keys delete
    /// them; changed execution inputs replace the Run (they are immutable);
    /// `termination` (monotonically), `timeout`, `retryPolicy`, the priority and the labels change in
    /// place.
    pub fn apply_store(&mut self, manifests: BTreeMap<String, Run>, now: Instant) -> Vec<Action> {
        let mut live: BTreeMap<String, String> = BTreeMap::new();
        for (uid, state) in self.runs.iter_mut().filter(|(_, r)| !r.deleting) {
            match manifests.get(&state.run.key()) {
                Some(m) if m.same_inputs(&state.run) => {
                    update_in_place(&mut state.run, m);
                    live.insert(state.run.key(), uid.clone());
                }
                _ => {
                    tracing::info!(run = %state.run.key(), uid = %uid, "run deleted");
                    state.deleting = true;
                }
            }
        }
        for (key, mut run) in manifests {
            if live.contains_key(&key) {
                continue;
            }
            self.seq += 1;
            let uid = uuid::Uuid::new_v4().to_string();
            run.metadata.uid = Some(uid.clone());
            run.metadata.namespace = Some(run.namespace_or_default().to_owned());
            run.status = None;
            let mode = run.validate();
            tracing::info!(run = %key, uid = %uid, "run created");
            self.runs.insert(
                uid,
                RunState {
                    run,
                    mode,
                    life: Life::default(),
                    message: String::new(),
                    owner: None,
                    deleting: false,
                    task: None,
                    artifacts: Vec::new(),
                    finished_at: None,
                    expired: false,
                    in_flight: None,
                    retry_at: None,
                    assigned_at: None,
                    created: now,
                    seq: self.seq,
                },
            );
        }
        self.pass(now)
    }

    /// Applies what a Pod's ownership watch reported.
    pub fn apply_pod(&mut self, pod: &str, update: SourceUpdate, now: Instant) -> Vec<Action> {
        let Some(state) = self.pods.get_mut(pod) else {
            return Vec::new();
        };
        match update {
            SourceUpdate::Snapshot {
                instance_id,
                entries,
            } => {
                if state.uid.as_ref().is_some_and(|u| *u != instance_id) {
                    tracing::warn!(pod, new_uid = %instance_id, "pod restarted; fencing its runs");
                }
                state.uid = Some(instance_id);
                state.connected = true;
                state.lost_at = None;
                state.entries = entries
                    .into_iter()
                    .map(|e| (e.run_uid.clone(), e))
                    .collect();
            }
            SourceUpdate::Upsert(e) => {
                state.entries.insert(e.run_uid.clone(), *e);
            }
            SourceUpdate::Delete(uid) => {
                state.entries.remove(&uid);
            }
            SourceUpdate::Lost => {
                if state.connected {
                    tracing::warn!(pod, "lost ownership watch of pod");
                    state.connected = false;
                    state.lost_at = Some(now);
                }
            }
        }
        self.pass(now)
    }

    /// Records an Assign outcome for `uid` at `attempt` (late
    /// outcomes of an older attempt are ignored).
    pub fn register_result(
        &mut self,
        uid: &str,
        attempt: u64,
        outcome: RegisterOutcome,
        now: Instant,
    ) -> Vec<Action> {
        let backoff = self.retry_backoff;
        if let Some(run) = self.runs.get_mut(uid)
            && run.in_flight
                == Some(InFlight::Register {
                    attempt,
                    done: false,
                })
        {
            match outcome {
                // Ready once the owner's own table shows the registration:
                // the table the gateway routes from.
                RegisterOutcome::Ok => {
                    run.in_flight = Some(InFlight::Register {
                        attempt,
                        done: true,
                    })
                }
                RegisterOutcome::Permanent(why) => {
                    run.in_flight = None;
                    if let Some(rules) = run.rules()
                        && let Some(t) = owner::registered(&run.life, &rules, Err(&why))
                    {
                        // A task that could not start waits out the
                        // lifecycle's backoff, as on a cluster.
                        let backoff = if rules.mode == ModeKind::Task {
                            lifecycle::retry_backoff(t.attempt)
                        } else {
                            backoff
                        };
                        set(run, t, now, backoff);
                    }
                }
                RegisterOutcome::Retryable(why) => {
                    run.in_flight = None;
                    let pod = run
                        .owner
                        .as_ref()
                        .map(|o| o.pod.clone())
                        .unwrap_or_default();
                    tracing::warn!(uid, pod = %pod, error = %why, "owner unreachable while registering");
                    if let Some(rules) = run.rules()
                        && let Some(t) =
                            lifecycle::apply(&run.life, &rules, &Event::OwnerLost { pod: &pod })
                    {
                        set(run, t, now, backoff);
                    }
                }
            }
        }
        self.pass(now)
    }

    /// Records that an Unregister/CloseSession of `uid` on `pod` answered:
    /// `ok`, or it failed (and is decided about again at once).
    pub fn release_result(&mut self, pod: &str, uid: &str, ok: bool, now: Instant) -> Vec<Action> {
        self.releasing.remove(&(pod.to_owned(), uid.to_owned()));
        if let Some(run) = self.runs.get_mut(uid)
            && let Some(InFlight::Release {
                done: false, drain, ..
            }) = run.in_flight
        {
            run.in_flight = Some(InFlight::Release {
                done: true,
                drain,
                ok,
            });
        }
        self.pass(now)
    }

    /// Periodic work: grace periods and backoffs expire, timeouts elapse.
    pub fn tick(&mut self, now: Instant) -> Vec<Action> {
        self.pass(now)
    }
}

/// Takes the fields that may change in place: `termination` (only as the
/// API server's CEL rule allows: set once, or Drain → Immediate), `timeout`,
/// `retryPolicy`, the priority and the labels.
fn update_in_place(run: &mut Run, manifest: &Run) {
    let monotonic = matches!(
        (run.termination(), manifest.termination()),
        (None, Some(_))
            | (
                Some(TerminationMode::Drain),
                Some(TerminationMode::Immediate)
            )
    );
    if monotonic {
        run.spec.termination = manifest.spec.termination.clone();
    }
    run.spec.timeout = manifest.spec.timeout;
    run.spec.retry_policy = manifest.spec.retry_policy.clone();
    run.spec.priority = manifest.spec.priority;
    run.spec.priority_class_name = manifest.spec.priority_class_name;
    run.metadata.labels = manifest.metadata.labels.clone();
}

#[cfg(test)]
mod tests;
