//! The function engine: the table of registered functions, registration
//! (see [`crate::registration::rules`] for idempotent / conflict / supersede
//! / stale), unregistration (drain or cancel), idle expiry and shutdown.
//! Invocations are served in [`super::invoke`].

use std::sync::Arc;
use std::time::Duration;

use kruntimes_proto::function::v1 as pb;
use kruntimes_proto::watch::Publisher;

use super::backend;
pub use super::config::{EngineConfig, MAX_IO_BYTES};
use super::error::EngineError;
use super::prepare::{self, Context};
use super::registered::{Function, Registered, State};
use crate::local::LocalPod;
use crate::registration::{
    IdCheck, Plan, Record, RegisterError, Registration, Table, addressable_run, check_id,
};

/// The engine. Cheap to share behind an `Arc`.
pub struct Engine {
    pod: Arc<LocalPod>,
    cfg: EngineConfig,
    spares: Option<Arc<backend::SparePool>>,
    functions: Table<Function>,
}

impl Engine {
    /// Creates an engine with no registrations, publishing into `pod`'s
    /// ownership table.
    pub fn new(pod: Arc<LocalPod>, cfg: EngineConfig) -> Arc<Self> {
        let spares = (cfg.python_spares > 0).then(|| {
            backend::SparePool::new(cfg.python.clone(), pod.work_root.clone(), cfg.python_spares)
        });
        Arc::new(Self {
            pod,
            cfg,
            spares,
            functions: Table::default(),
        })
    }

    /// Static configuration.
    pub fn config(&self) -> &EngineConfig {
        &self.cfg
    }

    /// The local ownership table.
    pub fn publisher(&self) -> &Publisher {
        self.pod.publisher()
    }

    pub(super) fn pod(&self) -> &LocalPod {
        &self.pod
    }

    pub(super) fn table(&self) -> &Table<Function> {
        &self.functions
    }

    fn publish(&self, f: &Registered) {
        let (state, reason) = f.state();
        self.pod
            .publish(&f.run, f.record.attempt, f.published(state, &reason));
    }

    /// Registers a function (see [`crate::registration::rules`]).
    pub async fn register(
        &self,
        req: pb::RegisterRequest,
    ) -> Result<pb::Registration, RegisterError> {
        let run = addressable_run(req.run.as_ref())?;
        let _change = self.functions.change().await;
        match self.functions.plan(&run.uid, req.attempt, &req.digest)? {
            Plan::Idempotent(f) => return Ok(f.describe()),
            Plan::Supersede(old) => {
                tracing::info!(run_uid = %run.uid, old_attempt = old.record.attempt, attempt = req.attempt, "superseding registration");
                self.remove(&old, pb::UnregisterMode::Cancel, false).await;
            }
            Plan::Create => {}
        }
        let record = Record::issue(req.attempt, req.digest.clone());
        let ctx = Context {
            cfg: &self.cfg,
            workdir: self.pod.workdir(&run.uid),
            spares: self.spares.clone(),
        };
        let function = prepare::prepare(ctx, &run, req).await?;
        tracing::info!(run_uid = %run.uid, attempt = record.attempt, runtime = %run.runtime, "function registered");
        let f = Arc::new(Registration {
            run,
            record,
            mode: function,
        });
        self.publish(&f);
        let reg = f.describe();
        self.functions.insert(f);
        Ok(reg)
    }

    /// Reports a registration.
    pub fn status(&self, uid: &str) -> Option<pb::Registration> {
        self.functions.get(uid).map(|f| f.describe())
    }

    /// Unregisters; absent registrations succeed with `false`. A stale
    /// registration id is refused and never touches the newer registration.
    pub async fn unregister(
        &self,
        uid: &str,
        registration_id: &str,
        mode: pb::UnregisterMode,
    ) -> Result<bool, EngineError> {
        let _change = self.functions.change().await;
        let current = self.functions.get(uid);
        match check_id(current.as_ref().map(|f| &f.record), registration_id) {
            IdCheck::Absent => Ok(false),
            IdCheck::Stale => Err(EngineError::StaleRegistration),
            IdCheck::Current => {
                if let Some(f) = current {
                    self.remove(&f, mode, true).await;
                }
                Ok(true)
            }
        }
    }

    /// Drains or cancels, stops the backend, removes local state and the
    /// table entry.
    async fn remove(&self, f: &Arc<Registered>, mode: pb::UnregisterMode, publish_drain: bool) {
        f.set_state(State::Draining, "Unregistering");
        if publish_drain {
            self.publish(f);
        }
        let drained = match mode {
            pb::UnregisterMode::Drain => tokio::time::timeout(
                f.bounds.timeout + Duration::from_secs(1),
                f.permit.clone().acquire_owned(),
            )
            .await
            .is_ok(),
            pb::UnregisterMode::Cancel => false,
        };
        if !drained {
            let _ = f.cancel.send(true);
        }
        f.backend.lock().await.shutdown().await;
        f.permit.close();
        self.functions.remove(f);
        self.pod.withdraw(&f.run.uid);
        let _ = std::fs::remove_dir_all(&f.workdir);
        tracing::info!(run_uid = %f.run.uid, attempt = f.record.attempt, ?mode, "function unregistered");
    }

    /// Expires idle registrations: the entry turns FAILED with reason
    /// `IdleTimeout` and the worker stops; the control plane then ends the
    /// Run and unregisters it.
    pub async fn expire_idle(&self) {
        let candidates = self.functions.all().into_iter().filter(|f| f.expired());
        for f in candidates {
            tracing::info!(run_uid = %f.run.uid, "registration idle timeout");
            f.set_state(State::Failed, "IdleTimeout");
            self.publish(&f);
            f.backend.lock().await.shutdown().await;
        }
    }

    /// Runs [`Engine::expire_idle`] every `period` until the engine is dropped.
    pub fn spawn_idle_reaper(self: &Arc<Self>, period: Duration) {
        crate::periodic::spawn_periodic(self, period, |engine| async move {
            engine.expire_idle().await
        });
    }

    /// Stops every backend (on shutdown).
    pub async fn shutdown(&self) {
        for f in self.functions.all() {
            let _ = f.cancel.send(true);
            f.backend.lock().await.shutdown().await;
        }
    }

    /// The current record of a Run (tests and diagnostics).
    pub fn current_record(&self, uid: &str) -> Option<Record> {
        self.functions.get(uid).map(|f| f.record.clone())
    }
}
