//! The table of registrations one mode keeps, keyed by Run UID. Each entry
//! is a [`Registration`]: the Run, its [`Record`] and the mode's payload (a
//! function's backend, a session's queue). The table applies the pure rules
//! of [`super::rules`] to what it holds.

use std::collections::HashMap;
use std::ops::Deref;
use std::sync::{Arc, RwLock};

use kruntimes_proto::runtime::v1::RunRef;

use super::RegisterError;
use super::rules::{self, Fence, FenceError, Record, RegisterDecision};

/// One registration of a Run on this Pod.
#[derive(Debug)]
pub struct Registration<T> {
    /// The Run.
    pub run: RunRef,
    /// Attempt, digest and registration id.
    pub record: Record,
    /// What the mode keeps for it.
    pub mode: T,
}

impl<T> Deref for Registration<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.mode
    }
}

/// What an assignment must do, decided against the table.
#[derive(Debug)]
pub enum Plan<T> {
    /// Nothing is registered: create.
    Create,
    /// Same attempt, same digest: answer with the existing registration.
    Idempotent(Arc<Registration<T>>),
    /// A higher attempt: remove this older registration, then create.
    Supersede(Arc<Registration<T>>),
}

/// Registrations keyed by Run UID, with one change in progress at a time.
#[derive(Debug)]
pub struct Table<T> {
    entries: RwLock<HashMap<String, Arc<Registration<T>>>>,
    changes: tokio::sync::Mutex<()>,
}

impl<T> Default for Table<T> {
    fn default() -> Self {
        Self {
            entries: RwLock::new(HashMap::new()),
            changes: tokio::sync::Mutex::new(()),
        }
    }
}

impl<T> Table<T> {
    /// Serializes registrations and removals: hold the guard from the
    /// decision to its insert or removal.
    pub async fn change(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.changes.lock().await
    }

    /// The current registration of a Run.
    pub fn get(&self, run_uid: &str) -> Option<Arc<Registration<T>>> {
        self.entries
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(run_uid)
            .cloned()
    }

    /// Every registration.
    pub fn all(&self) -> Vec<Arc<Registration<T>>> {
        self.entries
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect()
    }

    /// Decides a registration of `run_uid` at `attempt` with `digest`
    /// (see [`rules::decide_register`]); conflicts and stale attempts are
    /// refused.
    pub fn plan(
        &self,
        run_uid: &str,
        attempt: u64,
        digest: &str,
    ) -> Result<Plan<T>, RegisterError> {
        let current = self.get(run_uid);
        match (
            rules::decide_register(current.as_ref().map(|r| &r.record), attempt, digest),
            current,
        ) {
            (RegisterDecision::Idempotent, Some(r)) => Ok(Plan::Idempotent(r)),
            (RegisterDecision::Supersede, Some(r)) => Ok(Plan::Supersede(r)),
            (RegisterDecision::Conflict, _) => Err(RegisterError::Conflict(attempt)),
            (RegisterDecision::Stale, current) => Err(RegisterError::Stale {
                requested: attempt,
                current: current.map_or(0, |r| r.record.attempt),
            }),
            (_, _) => Ok(Plan::Create),
        }
    }

    /// Makes `reg` the current registration of its Run.
    pub fn insert(&self, reg: Arc<Registration<T>>) {
        self.entries
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(reg.run.uid.clone(), reg);
    }

    /// Removes `reg` if it is still the current registration of its Run (a
    /// newer one is never touched); `true` when it was.
    pub fn remove(&self, reg: &Arc<Registration<T>>) -> bool {
        let mut map = self.entries.write().unwrap_or_else(|p| p.into_inner());
        let current = map
            .get(&reg.run.uid)
            .is_some_and(|cur| Arc::ptr_eq(cur, reg));
        if current {
            map.remove(&reg.run.uid);
        }
        current
    }

    /// The registration a gateway-fenced request for `path_uid` may use on
    /// the Pod `my_pod_uid` (see [`rules::check_fence`]).
    pub fn fenced(
        &self,
        fence: Fence<'_>,
        path_uid: &str,
        my_pod_uid: &str,
    ) -> Result<Arc<Registration<T>>, FenceError> {
        let current = self.get(path_uid);
        rules::check_fence(
            fence,
            path_uid,
            my_pod_uid,
            current.as_ref().map(|r| &r.record),
        )?;
        // check_fence refuses a missing registration, so this is Some.
        current.ok_or_else(|| FenceError::NotRegistered {
            run: path_uid.to_owned(),
        })
    }
}
