//! The function engine: the table of registered functions, registration
//! (see [`crate::registration::rules`] for idempotent / conflict / supersede
//! / stale) on the Runtime Server, unregistration (drain or cancel), idle
//! expiry, the server's restarts and shutdown. Invocations are served in
//! [`super::invoke`].

use std::sync::Arc;
use std::time::Duration;

use kruntimes_proto::agent::v1::FunctionAssignment;
use kruntimes_proto::ownership::v1 as own;
use kruntimes_proto::runtime::v1 as rt;
use kruntimes_proto::watch::Publisher;

use super::config::EngineConfig;
use super::prepare;
use super::registered::{Function, Registered, State};
use crate::artifacts::Artifacts;
use crate::local::LocalPod;
use crate::registration::{
    Assignment, IdCheck, Plan, Record, RegisterError, Registration, Release, StaleRegistration,
    Table, check_id,
};
use crate::runtime::{self, Change, Link};

/// The engine. Cheap to share behind an `Arc`.
pub struct Engine {
    pod: Arc<LocalPod>,
    cfg: EngineConfig,
    link: Arc<Link>,
    functions: Table<Function>,
    /// The Runtime's artifact store: each function gets an artifacts
    /// directory, and what an invocation leaves there is exported with its
    /// answer.
    artifacts: Option<Arc<Artifacts>>,
}

impl Engine {
    /// Creates an engine with no registrations, publishing into `pod`'s
    /// ownership table and registering on the server behind `link`.
    /// With `artifacts`, what an invocation leaves in its artifacts
    /// directory is exported before it is answered.
    pub fn new(
        pod: Arc<LocalPod>,
        cfg: EngineConfig,
        link: Arc<Link>,
        artifacts: Option<Arc<Artifacts>>,
    ) -> Arc<Self> {
        Arc::new(Self {
            pod,
            cfg,
            link,
            functions: Table::default(),
            artifacts,
        })
    }

    /// The artifact store, when the Runtime has one.
    pub(super) fn artifacts(&self) -> Option<&Arc<Artifacts>> {
        self.artifacts.as_ref()
    }

    /// The local ownership table.
    pub fn publisher(&self) -> &Publisher {
        self.pod.publisher()
    }

    pub(super) fn pod(&self) -> &LocalPod {
        &self.pod
    }

    pub(super) fn link(&self) -> &Link {
        &self.link
    }

    /// The link, shared (for work that outlives a caller).
    pub(super) fn link_arc(&self) -> Arc<Link> {
        self.link.clone()
    }

    pub(super) fn table(&self) -> &Table<Function> {
        &self.functions
    }

    /// Publishes `f`'s entry; while the Runtime Server does not answer, a
    /// ready function is shown as not ready (it could not be served).
    fn publish(&self, f: &Registered) {
        let (state, reason) = f.state();
        let (phase, reason) = if state == State::Ready && !self.link.available() {
            (own::Phase::Running, runtime::UNAVAILABLE_REASON.to_owned())
        } else {
            (state.phase(), reason)
        };
        self.pod
            .publish(&f.run, f.record.attempt, f.published(phase, &reason));
    }

    async fn register_on_server(
        &self,
        req: rt::RegisterFunctionRequest,
    ) -> Result<String, RegisterError> {
        let mut client = self
            .link
            .ready()
            .await
            .map_err(RegisterError::Unavailable)?;
        let resp = client
            .functions
            .register_function(req)
            .await
            .map_err(|s| runtime::refused(s.into()))?;
        Ok(resp.into_inner().handle)
    }

    /// Unregisters `f` on the server (which kills its processes, a leased
    /// worker included) and gives its lease up.
    async fn unregister_on_server(&self, f: &Registered) {
        let req = rt::UnregisterFunctionRequest {
            run_uid: f.run.uid.clone(),
            handle: f.handle(),
        };
        if let Err(e) = self.link.client().functions.unregister_function(req).await {
            tracing::warn!(run_uid = %f.run.uid, error = %e.message(), "runtime server did not unregister");
        }
        f.drop_lease().await;
    }

    /// Registers a function (see [`crate::registration::rules`]); returns
    /// the registration id.
    pub async fn register(
        &self,
        a: Assignment,
        f: FunctionAssignment,
    ) -> Result<String, RegisterError> {
        let r = self.register_inner(a, f).await;
        crate::metrics::registration(r.is_ok());
        r
    }

    async fn register_inner(
        &self,
        a: Assignment,
        fa: FunctionAssignment,
    ) -> Result<String, RegisterError> {
        let _change = self.functions.change().await;
        match self.functions.plan(&a.run.uid, a.attempt, &a.digest)? {
            Plan::Idempotent(f) => return Ok(f.record.registration_id.clone()),
            Plan::Supersede(old) => {
                tracing::info!(run_uid = %a.run.uid, old_attempt = old.record.attempt, attempt = a.attempt, "superseding registration");
                self.remove(&old, Release::Cancel, false).await;
            }
            Plan::Create => {}
        }
        let record = Record::issue(a.attempt, a.digest.clone());
        let mut p = prepare::prepare(&self.cfg, &a, &fa);
        p.request.artifacts = self.artifacts.is_some();
        let handle = self.register_on_server(p.request.clone()).await?;
        tracing::info!(run_uid = %a.run.uid, attempt = record.attempt, runtime = %a.run.runtime, "function registered");
        let f = Arc::new(Registration {
            run: a.run,
            record,
            mode: Function::new(p.kind, p.bounds, p.request, handle),
        });
        self.publish(&f);
        let id = f.record.registration_id.clone();
        self.functions.insert(f);
        Ok(id)
    }

    /// Unregisters; absent registrations succeed with `false`. A stale
    /// registration id is refused and never touches the newer registration.
    pub async fn unregister(
        &self,
        uid: &str,
        registration_id: &str,
        how: Release,
    ) -> Result<bool, StaleRegistration> {
        let _change = self.functions.change().await;
        let current = self.functions.get(uid);
        match check_id(current.as_ref().map(|f| &f.record), registration_id) {
            IdCheck::Absent => Ok(false),
            IdCheck::Stale => Err(StaleRegistration),
            IdCheck::Current => {
                if let Some(f) = current {
                    self.remove(&f, how, true).await;
                }
                Ok(true)
            }
        }
    }

    /// Drains or cancels, unregisters on the server (which kills the
    /// function's processes and removes its directory) and drops the entry.
    async fn remove(&self, f: &Arc<Registered>, how: Release, publish_drain: bool) {
        f.set_state(State::Draining, "Unregistering");
        if publish_drain {
            self.publish(f);
        }
        let drained = match how {
            Release::Drain => tokio::time::timeout(
                f.bounds.timeout + Duration::from_secs(1),
                f.permit.clone().acquire_owned(),
            )
            .await
            .is_ok(),
            Release::Cancel => false,
        };
        if !drained {
            let _ = f.cancel.send(true);
        }
        self.unregister_on_server(f).await;
        f.permit.close();
        self.functions.remove(f);
        self.pod.withdraw(&f.run.uid);
        tracing::info!(run_uid = %f.run.uid, attempt = f.record.attempt, ?how, "function unregistered");
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
            self.unregister_on_server(&f).await;
        }
    }

    /// Runs [`Engine::expire_idle`] every `period` until the engine is dropped.
    pub fn spawn_idle_reaper(self: &Arc<Self>, period: Duration) {
        crate::periodic::spawn_periodic(self, period, |engine| async move {
            engine.expire_idle().await
        });
    }

    /// Follows the Runtime Server: readiness is republished when it stops or
    /// starts answering, and after a restart every ready function is
    /// registered again (a fresh worker) or, failing that, ends FAILED.
    pub async fn server_changed(&self, change: Change) {
        let _change = self.functions.change().await;
        for f in self.functions.all() {
            if matches!(change, Change::Lost | Change::Restarted) {
                // Its worker went with the server.
                f.drop_lease().await;
            }
            if change == Change::Restarted && f.state().0 == State::Ready {
                match self.register_on_server(f.request.clone()).await {
                    Ok(handle) => {
                        tracing::info!(run_uid = %f.run.uid, "registered again on the restarted runtime server");
                        f.set_handle(handle);
                    }
                    Err(e) => {
                        tracing::warn!(run_uid = %f.run.uid, error = %e, "could not register again");
                        f.set_state(State::Failed, runtime::LOST_REASON);
                    }
                }
            }
            self.publish(&f);
        }
    }

    /// Ends every invocation and unregisters every function (on shutdown).
    pub async fn shutdown(&self) {
        for f in self.functions.all() {
            let _ = f.cancel.send(true);
            self.unregister_on_server(&f).await;
        }
    }

    /// The current record of a Run.
    #[cfg(test)]
    pub fn current_record(&self, uid: &str) -> Option<Record> {
        self.functions.get(uid).map(|f| f.record.clone())
    }
}
