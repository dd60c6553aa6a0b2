//! The gateway's merged ownership table. Pure.
//!
//! Two kinds of sources feed it: the control plane (assignments: which Pod
//! owns a Run at which attempt) and every runtimed that assignments name
//! (readiness of its local registrations). A Run is routed only when the
//! assignment and the owner's readiness agree on Pod UID and attempt and both
//! sources are live or within the staleness window.

use std::collections::BTreeSet;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};

// Looked up on every request by Run UID (from the control plane); foldhash is
// seeded per process and ~5× cheaper per lookup than SipHash.
use foldhash::HashMap;
use kruntimes_api::lifecycle::Reason;
use kruntimes_proto::ownership::v1::{Owner, OwnershipEntry, Phase};
use kruntimes_proto::watch::SourceUpdate;

#[derive(Debug, Default)]
struct Source {
    instance: Option<String>,
    connected: bool,
    lost_at: Option<Instant>,
    /// Shared with the routes handed out, which copy none of it.
    entries: HashMap<String, Arc<OwnershipEntry>>,
}

impl Source {
    fn apply(&mut self, update: SourceUpdate, now: Instant) {
        match update {
            SourceUpdate::Snapshot {
                instance_id,
                entries,
            } => {
                self.instance = Some(instance_id);
                self.connected = true;
                self.lost_at = None;
                self.entries = entries
                    .into_iter()
                    .map(|e| (e.run_uid.clone(), Arc::new(e)))
                    .collect();
            }
            SourceUpdate::Upsert(e) => {
                self.entries.insert(e.run_uid.clone(), Arc::from(e));
            }
            SourceUpdate::Delete(uid) => {
                self.entries.remove(&uid);
            }
            SourceUpdate::Lost => {
                if self.connected || self.lost_at.is_none() {
                    self.lost_at = Some(now);
                }
                self.connected = false;
            }
        }
    }

    /// Whether the source can vouch for its entries at `now`.
    fn fresh(&self, now: Instant, window: Duration) -> bool {
        self.instance.is_some()
            && (self.connected || self.lost_at.is_some_and(|t| now.duration_since(t) < window))
    }
}

/// Where to send a Run's request, with the fencing values to attach: the
/// control plane's assignment, shared with the table (a route copies none
/// of its text), and the owner's invocation timeout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// Names an owner: [`Route::new`] refuses an assignment without one.
    assignment: Arc<OwnershipEntry>,
    /// Invocation timeout of the registration, when known.
    pub timeout: Option<Duration>,
}

impl Route {
    /// The route to the owner `assignment` names; `None` if it names none.
    pub(crate) fn new(assignment: Arc<OwnershipEntry>, timeout: Option<Duration>) -> Option<Self> {
        assignment.owner.as_ref()?;
        Some(Self {
            assignment,
            timeout,
        })
    }

    fn owner(&self) -> &Owner {
        /// Never used: `new`, the only constructor, refuses an assignment
        /// without an owner, and the shared assignment is never mutated.
        static NO_OWNER: Owner = Owner {
            pod_name: String::new(),
            pod_uid: String::new(),
            dataplane_address: String::new(),
        };
        self.assignment.owner.as_ref().unwrap_or(&NO_OWNER)
    }

    /// Owner dataplane address.
    pub fn address(&self) -> &str {
        &self.owner().dataplane_address
    }

    /// Owner Pod name.
    pub fn pod_name(&self) -> &str {
        &self.owner().pod_name
    }

    /// Owner Pod UID.
    pub fn pod_uid(&self) -> &str {
        &self.owner().pod_uid
    }

    /// Registration attempt.
    pub fn attempt(&self) -> u64 {
        self.assignment.attempt
    }

    /// Run name (for authorization).
    pub fn run_name(&self) -> &str {
        &self.assignment.run_name
    }

    /// Mode of the Run (`kruntimes.ownership.v1.Mode`).
    pub fn mode(&self) -> i32 {
        self.assignment.mode
    }
}

/// Why a Run cannot be routed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RouteError {
    /// No such Run UID, or not in that namespace/Runtime (404).
    NotFound,
    /// Known but not Ready; a retry may find it Ready (503).
    NotReady(&'static str),
    /// Waiting for a Pod: the control plane's entry, with its reason (503).
    Pending(Arc<OwnershipEntry>),
    /// Ended or ending, for good: the control plane's entry (with the Run's
    /// phase and message), or the owner's when it reports idle expiry
    /// first (409 `RunFailed` / 410 `RunEnded`).
    Ended(Arc<OwnershipEntry>),
    /// Known and on its way to Ready, or Ready with the owner's readiness
    /// not yet agreeing: the table is converging, a short wait may route it
    /// (503 if it does not).
    Settling(&'static str),
    /// The table can no longer vouch for the owner (503).
    Stale(&'static str),
}

/// The merged table.
#[derive(Debug)]
pub struct Table {
    control: Source,
    runtimed: HashMap<String, Source>,
    window: Duration,
    /// Bumped on every change, for requests waiting for a route to settle.
    changed: tokio::sync::watch::Sender<u64>,
}

impl Table {
    /// An empty table with a staleness window.
    pub fn new(window: Duration) -> Self {
        Self {
            control: Source::default(),
            runtimed: HashMap::default(),
            window,
            changed: tokio::sync::watch::Sender::new(0),
        }
    }

    /// A receiver that sees every later change of the table.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changed.subscribe()
    }

    fn touch(&self) {
        self.changed.send_modify(|v| *v = v.wrapping_add(1));
    }

    /// Applies a control-plane update.
    pub fn apply_control_plane(&mut self, update: SourceUpdate, now: Instant) {
        self.control.apply(update, now);
        self.touch();
    }

    /// Applies an update from the runtimed watched at `address`.
    pub fn apply_runtimed(&mut self, address: &str, update: SourceUpdate, now: Instant) {
        self.runtimed
            .entry(address.to_owned())
            .or_default()
            .apply(update, now);
        self.touch();
    }

    /// Forgets a runtimed no assignment names any more.
    pub fn remove_runtimed(&mut self, address: &str) {
        self.runtimed.remove(address);
        self.touch();
    }

    /// Dataplane addresses the assignments name: the runtimed to watch.
    pub fn owner_addresses(&self) -> BTreeSet<String> {
        self.control
            .entries
            .values()
            .filter_map(|e| e.owner.as_ref())
            .filter(|o| !o.dataplane_address.is_empty())
            .map(|o| o.dataplane_address.clone())
            .collect()
    }

    /// Whether the control plane's table is usable (for `/readyz`).
    pub fn control_plane_fresh(&self, now: Instant) -> bool {
        self.control.fresh(now, self.window)
    }

    /// Number of assignments (for metrics).
    pub fn len(&self) -> usize {
        self.control.entries.len()
    }

    /// The name of the Run with this UID in that namespace/Runtime, if the
    /// control plane knows it (routable or not).
    pub fn run_name(&self, namespace: &str, runtime: &str, uid: &str) -> Option<String> {
        self.control
            .entries
            .get(uid)
            .filter(|a| a.namespace == namespace && a.runtime == runtime)
            .map(|a| a.run_name.clone())
    }

    /// The mode (`kruntimes.ownership.v1.Mode`) of the Run with this UID in
    /// that namespace/Runtime, if the control plane knows it.
    pub fn run_mode(&self, namespace: &str, runtime: &str, uid: &str) -> Option<i32> {
        self.control
            .entries
            .get(uid)
            .filter(|a| a.namespace == namespace && a.runtime == runtime)
            .map(|a| a.mode)
    }

    /// The control plane's assignment of the Run with this UID in that
    /// namespace/Runtime, while its table is fresh.
    fn assignment(
        &self,
        namespace: &str,
        runtime: &str,
        uid: &str,
        now: Instant,
    ) -> Result<&Arc<OwnershipEntry>, RouteError> {
        if !self.control.fresh(now, self.window) {
            return Err(RouteError::Stale("control plane table is stale"));
        }
        let a = self.control.entries.get(uid).ok_or(RouteError::NotFound)?;
        if a.namespace != namespace || a.runtime != runtime {
            return Err(RouteError::NotFound);
        }
        Ok(a)
    }

    /// Routes a Run.
    pub fn route(
        &self,
        namespace: &str,
        runtime: &str,
        uid: &str,
        now: Instant,
    ) -> Result<Route, RouteError> {
        let a = self.assignment(namespace, runtime, uid, now)?;
        match Phase::try_from(a.phase) {
            Ok(Phase::Ready) => {}
            Ok(Phase::Scheduled | Phase::Running) => {
                return Err(RouteError::Settling("run is not ready yet"));
            }
            Ok(Phase::Pending) => return Err(RouteError::Pending(a.clone())),
            Ok(Phase::Draining | Phase::Failed) => return Err(RouteError::Ended(a.clone())),
            Ok(Phase::Unspecified) | Err(_) => {
                return Err(RouteError::NotReady("run is not ready"));
            }
        }
        let route = Route::new(a.clone(), None).ok_or(RouteError::NotReady("run has no owner"))?;
        let owner = route.owner();
        let source = self
            .runtimed
            .get(&owner.dataplane_address)
            .ok_or(RouteError::Settling("owner readiness not yet known"))?;
        if !source.fresh(now, self.window) {
            return Err(RouteError::Stale("owner is unreachable"));
        }
        if source.instance.as_deref() != Some(owner.pod_uid.as_str()) {
            return Err(RouteError::Settling(
                "owner pod does not match the assignment",
            ));
        }
        let r = source
            .entries
            .get(uid)
            .ok_or(RouteError::Settling("owner has not registered the run"))?;
        if r.attempt != a.attempt {
            return Err(RouteError::Settling(
                "owner registration attempt does not match",
            ));
        }
        if r.phase == Phase::Scheduled as i32 || r.phase == Phase::Running as i32 {
            // The control plane already says Ready; the owner's own word
            // is on its way (or the owner is between two states): settle.
            return Err(RouteError::Settling("owner registration is not ready yet"));
        }
        // Idle expiry is the one failure an owner reports that is final.
        if r.phase == Phase::Failed as i32 && r.reason == Reason::IdleTimeout.as_str() {
            // Final: the control plane's word (`Timeout`) is on its way.
            return Err(RouteError::Ended(r.clone()));
        }
        if r.phase != Phase::Ready as i32 {
            // Draining or failed at the owner, with the control plane still
            // saying Ready: it decides next (a retry, another owner).
            return Err(RouteError::NotReady("owner registration is not ready"));
        }
        let timeout = r
            .limits
            .as_ref()
            .filter(|l| l.timeout_ms > 0)
            .map(|l| Duration::from_millis(l.timeout_ms.into()));
        Ok(Route { timeout, ..route })
    }
}

impl Table {
    /// Where to read a Run's artifacts: any runtimed of the Run's Runtime
    /// holds the store's credentials and streams them back. The Run's
    /// owner when its runtimed answers (the Run may have ended: artifacts
    /// outlive it), else another runtimed that hosts a Run of the same
    /// namespace and Runtime.
    pub fn artifact_route(
        &self,
        namespace: &str,
        runtime: &str,
        uid: &str,
        now: Instant,
    ) -> Result<Route, RouteError> {
        let a = self.assignment(namespace, runtime, uid, now)?;
        let answers = |address: &str, pod_uid: Option<&str>| {
            self.runtimed.get(address).is_some_and(|s| {
                s.fresh(now, self.window)
                    && pod_uid.is_none_or(|p| s.instance.as_deref() == Some(p))
            })
        };
        if let Some(o) = &a.owner
            && answers(&o.dataplane_address, Some(&o.pod_uid))
        {
            return Route::new(a.clone(), None).ok_or(RouteError::NotReady("run has no owner"));
        }
        let mut peers: Vec<(&String, &Source)> = self
            .runtimed
            .iter()
            .filter(|(addr, s)| {
                answers(addr, None)
                    && s.entries
                        .values()
                        .any(|e| e.namespace == namespace && e.runtime == runtime)
            })
            .collect();
        // The same peer for the same table: predictable, and spread by UID.
        peers.sort_by(|x, y| x.0.cmp(y.0));
        let pick = uid
            .bytes()
            .fold(0usize, |h, b| h.wrapping_mul(31).wrapping_add(b.into()));
        let Some((address, source)) = peers.get(pick % peers.len().max(1)) else {
            return Err(RouteError::Stale(
                "no runtimed of the run's Runtime is reachable to read its artifacts",
            ));
        };
        let mut entry = (**a).clone();
        entry.owner = Some(Owner {
            pod_name: String::new(),
            pod_uid: source.instance.clone().unwrap_or_default(),
            dataplane_address: (*address).clone(),
        });
        Route::new(Arc::new(entry), None).ok_or(RouteError::NotReady("run has no owner"))
    }
}

/// Reads the shared table.
pub fn read(t: &RwLock<Table>) -> RwLockReadGuard<'_, Table> {
    // Table updates are single map operations; a panic mid-update cannot
    // leave it inconsistent, so a poisoned lock is still usable.
    t.read().unwrap_or_else(|p| p.into_inner())
}

/// Writes the shared table (poisoning ignored, as in [`read`]).
pub fn write(t: &RwLock<Table>) -> RwLockWriteGuard<'_, Table> {
    t.write().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
pub(crate) mod fixtures;
#[cfg(test)]
mod tests;
