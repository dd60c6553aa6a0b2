//! The Runs this runtimed hosts, whatever their mode: an assignment is
//! validated once ([`crate::registration::assignment`]) and handed to the
//! function engine or the sessions, and a release finds whichever holds the
//! Run. Both ways a Run reaches this Pod go through here: the control
//! plane's `Agent` service ([`crate::dataplane::agent`]) and the Kubernetes
//! adapter ([`crate::cluster`]).

use std::sync::Arc;

use kruntimes_proto::agent::v1::AssignRequest;

use crate::function::Engine;
use crate::registration::{
    self, IdCheck, Mode, RegisterError, Release, StaleRegistration, check_id,
};
use crate::session::Sessions;
use crate::task::Tasks;

/// The function engine, the sessions and the tasks of this runtimed.
#[derive(Clone)]
pub struct Host {
    /// Function-mode Runs.
    pub engine: Arc<Engine>,
    /// Session-mode Runs.
    pub sessions: Arc<Sessions>,
    /// Task-mode Runs.
    pub tasks: Arc<Tasks>,
}

impl Host {
    /// Assigns a Run: registers its function, opens its session or starts
    /// its task; returns the registration id.
    pub async fn assign(&self, req: AssignRequest) -> Result<String, RegisterError> {
        let (assignment, mode) = registration::assignment(req)?;
        match mode {
            Mode::Function(f) => self.engine.register(assignment, f).await,
            Mode::Session(s) => self.sessions.open(assignment, s).await,
            Mode::Task(t) => self.tasks.start(assignment, t).await,
        }
    }

    /// Releases a Run, `how` its work ends; `false` when nothing is held
    /// for it. A `registration_id` (empty: whichever is current) that names
    /// an older registration is refused and touches nothing.
    pub async fn release(
        &self,
        run_uid: &str,
        registration_id: &str,
        how: Release,
    ) -> Result<bool, StaleRegistration> {
        if let Some(h) = self.tasks.get(run_uid) {
            return match check_id(Some(&h.record), registration_id) {
                IdCheck::Stale => Err(StaleRegistration),
                IdCheck::Current | IdCheck::Absent => Ok(self.tasks.close(run_uid).await),
            };
        }
        if let Some(h) = self.sessions.get(run_uid) {
            return match check_id(Some(&h.record), registration_id) {
                IdCheck::Stale => Err(StaleRegistration),
                IdCheck::Current | IdCheck::Absent => Ok(self.sessions.close(run_uid, how).await),
            };
        }
        // A drained session whose export is kept: forgotten now.
        if self.sessions.holds(run_uid) {
            return Ok(self.sessions.close(run_uid, how).await);
        }
        self.engine.unregister(run_uid, registration_id, how).await
    }

    /// Kills a task's process tree, keeping its result and log until it is
    /// released; `false` when no task is held for the Run.
    pub async fn kill(&self, run_uid: &str) -> bool {
        self.tasks.kill(run_uid).await
    }
}
