//! The sessions a runtimed hosts: a registration table keyed by Run UID (the
//! same rules as functions: idempotent / conflict / supersede / stale),
//! close, idle expiry, the Runtime Server's restarts and their ownership
//! entries.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use kruntimes_proto::agent::v1::SessionAssignment;
use kruntimes_proto::ownership::v1 as own;

use super::Session;
use super::prepare;
use crate::artifacts::Artifacts;
use crate::local::{LocalPod, Published};
use crate::registration::Release;
use crate::registration::{
    Assignment, Fence, FenceError, Plan, Record, RegisterError, Registration, Table,
};
use crate::runtime::{self, Change, Link};

/// What a hosted session adds to its registration.
#[derive(Debug)]
pub struct Hosted {
    /// The session.
    pub session: Arc<Session>,
    idle_timeout: Option<Duration>,
    expired: AtomicBool,
    /// The Runtime Server restarted under it: its workspace is gone.
    lost: AtomicBool,
}

/// A session in the registration table.
pub type HostedSession = Registration<Hosted>;

impl HostedSession {
    fn idle_expired(&self) -> bool {
        matches!(
            (self.idle_timeout, self.session.idle_for()),
            (Some(limit), Some(idle)) if idle >= limit
        )
    }
}

/// Every session of this runtimed.
pub struct Sessions {
    pod: Arc<LocalPod>,
    link: Arc<Link>,
    table: Table<Hosted>,
    /// The Runtime's artifact store: a drained session's artifacts
    /// directory is exported there before its workspace goes.
    artifacts: Option<Arc<Artifacts>>,
    /// Drained sessions whose export is over: (attempt, outcome), their
    /// entry kept until they are released.
    exported: std::sync::Mutex<std::collections::HashMap<String, (u64, own::ExportOutcome)>>,
}

impl Sessions {
    /// An empty set publishing into `pod`'s ownership table, opening
    /// sessions on the server behind `link`.
    /// With `artifacts`, each session gets an artifacts directory, exported
    /// when it drains.
    pub fn new(
        pod: Arc<LocalPod>,
        link: Arc<Link>,
        artifacts: Option<Arc<Artifacts>>,
    ) -> Arc<Self> {
        Arc::new(Self {
            pod,
            link,
            table: Table::default(),
            artifacts,
            exported: std::sync::Mutex::new(Default::default()),
        })
    }

    /// How the export of `uid`'s drained session at `attempt` ended, once
    /// it has.
    pub fn export(&self, uid: &str, attempt: u64) -> Option<own::ExportOutcome> {
        self.exported
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(uid)
            .filter(|(a, _)| *a == attempt)
            .map(|(_, x)| x.clone())
    }

    /// Forgets a drained session's export (its entry withdrawn); `false`
    /// when there is none.
    fn forget_export(&self, uid: &str) -> bool {
        let had = self
            .exported
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(uid)
            .is_some();
        if had {
            self.pod.withdraw(uid);
            tracing::info!(run_uid = %uid, "drained session forgotten");
        }
        had
    }

    /// A hosted session.
    pub fn get(&self, uid: &str) -> Option<Arc<HostedSession>> {
        self.table.get(uid)
    }

    /// The session a gateway-fenced request for `path_uid` may use.
    pub fn fenced(
        &self,
        fence: Fence<'_>,
        path_uid: &str,
    ) -> Result<Arc<HostedSession>, FenceError> {
        self.table.fenced(fence, path_uid, &self.pod.uid)
    }

    /// Publishes `h`'s entry; while the Runtime Server does not answer, a
    /// ready session is shown as not ready.
    fn publish(&self, h: &HostedSession, phase: own::Phase, reason: &str) {
        let (phase, reason) = if phase == own::Phase::Ready && !self.link.available() {
            (own::Phase::Running, runtime::UNAVAILABLE_REASON)
        } else {
            (phase, reason)
        };
        self.pod.publish(
            &h.run,
            h.record.attempt,
            Published {
                mode: own::Mode::Session,
                phase,
                reason,
                limits: None,
            },
        );
    }

    /// Opens a session (see [`crate::registration::rules`]: a retry at the
    /// same attempt and digest answers with the open session); returns the
    /// registration id.
    pub async fn open(&self, a: Assignment, s: SessionAssignment) -> Result<String, RegisterError> {
        let _change = self.table.change().await;
        match self.table.plan(&a.run.uid, a.attempt, &a.digest)? {
            Plan::Idempotent(h) => return Ok(h.record.registration_id.clone()),
            Plan::Supersede(old) => self.remove(&old, Release::Cancel).await,
            Plan::Create => {}
        }
        let session = prepare::prepare(&a, &self.link, &s, self.artifacts.as_deref()).await?;
        let hosted = Arc::new(Registration {
            run: a.run,
            record: Record::issue(a.attempt, a.digest),
            mode: Hosted {
                session,
                idle_timeout: (s.idle_timeout_seconds > 0)
                    .then(|| Duration::from_secs(s.idle_timeout_seconds.into())),
                expired: AtomicBool::new(false),
                lost: AtomicBool::new(false),
            },
        });
        self.publish(&hosted, own::Phase::Ready, "");
        self.table.insert(hosted.clone());
        tracing::info!(
            run_uid = %hosted.run.uid,
            attempt = hosted.record.attempt,
            registration_id = %hosted.record.registration_id,
            "session opened"
        );
        Ok(hosted.record.registration_id.clone())
    }

    async fn remove(&self, h: &Arc<HostedSession>, mode: Release) {
        self.publish(h, own::Phase::Draining, "Closing");
        let artifacts = self.artifacts.as_ref().filter(|_| mode == Release::Drain);
        let Some(artifacts) = artifacts else {
            h.session.close(mode).await;
            self.table.remove(h);
            self.pod.withdraw(&h.run.uid);
            return;
        };
        // Drained: what its commands left is exported before the workspace
        // goes; the outcome stays published until the Run is released.
        h.session.finish(mode).await;
        let export = artifacts
            .export(&self.link, &h.run.namespace, &h.run.uid)
            .await
            .to_wire();
        h.session.close_on_server(mode).await;
        self.table.remove(h);
        self.exported
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(h.run.uid.clone(), (h.record.attempt, export.clone()));
        self.pod.publish_outcome(
            &h.run,
            h.record.attempt,
            Published {
                mode: own::Mode::Session,
                phase: own::Phase::Draining,
                reason: "Drained",
                limits: None,
            },
            None,
            Some(export),
        );
    }

    /// Closes a session (a drained one's export is then kept until it is
    /// cancelled); absent sessions succeed with `false`. Draining a session
    /// already drained changes nothing: its export's outcome stays.
    pub async fn close(&self, uid: &str, mode: Release) -> bool {
        let _change = self.table.change().await;
        match self.table.get(uid) {
            Some(h) => {
                self.remove(&h, mode).await;
                true
            }
            None if mode == Release::Drain => self.holds(uid),
            None => self.forget_export(uid),
        }
    }

    /// Whether this runtimed holds anything of `uid`'s session: open, or
    /// drained with its export kept.
    pub fn holds(&self, uid: &str) -> bool {
        self.table.get(uid).is_some()
            || self
                .exported
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .contains_key(uid)
    }

    /// Session operations queued or running, over every session.
    pub fn pending_operations(&self) -> usize {
        self.table
            .all()
            .iter()
            .map(|h| h.session.status().pending_operations)
            .sum()
    }

    /// Marks idle sessions `FAILED`/`IdleTimeout`; the control plane ends
    /// the Run and closes them.
    pub fn expire_idle(&self) {
        for h in self.table.all() {
            if h.idle_expired() && !h.expired.swap(true, Ordering::AcqRel) {
                tracing::info!(run_uid = %h.run.uid, "session idle timeout");
                self.publish(&h, own::Phase::Failed, "IdleTimeout");
            }
        }
    }

    /// Follows the Runtime Server: readiness is republished when it stops or
    /// starts answering; after a restart every session is lost (its
    /// workspace and processes went with the server) and ends FAILED.
    pub async fn server_changed(&self, change: Change) {
        let _change = self.table.change().await;
        for h in self.table.all() {
            if change == Change::Restarted {
                h.lost.store(true, Ordering::Release);
            }
            if h.lost.load(Ordering::Acquire) {
                self.publish(&h, own::Phase::Failed, runtime::LOST_REASON);
            } else if h.expired.load(Ordering::Acquire) {
                self.publish(&h, own::Phase::Failed, "IdleTimeout");
            } else {
                self.publish(&h, own::Phase::Ready, "");
            }
        }
    }

    /// Runs [`Sessions::expire_idle`] every `period`.
    pub fn spawn_idle_reaper(self: &Arc<Self>, period: Duration) {
        crate::periodic::spawn_periodic(self, period, |s| async move { s.expire_idle() });
    }

    /// Cancels every session (shutdown).
    pub async fn shutdown(&self) {
        for h in self.table.all() {
            h.session.close(Release::Cancel).await;
        }
    }
}

#[cfg(test)]
mod tests;
