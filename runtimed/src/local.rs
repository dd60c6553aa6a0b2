//! This Pod as both modes see it: who it is (name, UID, the dataplane
//! address the gateway dials) and the local ownership table it publishes
//! over `OwnershipTable/Watch`. (The Runs' working directories belong to
//! the Runtime Server.)
//!
//! Function registrations and sessions publish their entries here; neither
//! needs the other to do so.

use std::sync::Arc;

use kruntimes_proto::ownership::v1 as own;
use kruntimes_proto::runtime::v1::RunRef;
use kruntimes_proto::watch::{DEFAULT_LAG_CAPACITY, Publisher};

/// This Pod (or, under `krt up`, this runtimed instance).
pub struct LocalPod {
    /// The Pod's name, reported as `X-Kruntimes-Served-By`.
    pub name: String,
    /// The Pod's UID; a restart yields a new one.
    pub uid: String,
    /// Dataplane address published in ownership entries.
    pub dataplane_address: String,
    publisher: Publisher,
}

/// The state of one Run as this Pod publishes it.
#[derive(Debug, Clone)]
pub struct Published<'a> {
    /// Function or session.
    pub mode: own::Mode,
    /// Readiness of the local registration.
    pub phase: own::Phase,
    /// Why it is in that phase (`IdleTimeout`, `Unregistering`, …).
    pub reason: &'a str,
    /// Per-Run bounds the gateway enforces, when the mode has them.
    pub limits: Option<own::EntryLimits>,
}

impl std::fmt::Debug for LocalPod {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalPod")
            .field("name", &self.name)
            .field("uid", &self.uid)
            .finish_non_exhaustive()
    }
}

impl LocalPod {
    /// A Pod with an empty ownership table; its instance id is the Pod UID.
    pub fn new(
        name: impl Into<String>,
        uid: impl Into<String>,
        dataplane_address: impl Into<String>,
    ) -> Arc<Self> {
        let uid = uid.into();
        Arc::new(Self {
            publisher: Publisher::new(own::SourceKind::Runtimed, uid.clone(), DEFAULT_LAG_CAPACITY),
            name: name.into(),
            uid,
            dataplane_address: dataplane_address.into(),
        })
    }

    /// The local ownership table.
    pub fn publisher(&self) -> &Publisher {
        &self.publisher
    }

    /// Upserts the entry of `run` at `attempt`, owned by this Pod.
    pub fn publish(&self, run: &RunRef, attempt: u64, state: Published<'_>) {
        self.publisher.upsert(self.entry(run, attempt, state));
    }

    fn entry(&self, run: &RunRef, attempt: u64, state: Published<'_>) -> own::OwnershipEntry {
        own::OwnershipEntry {
            namespace: run.namespace.clone(),
            run_name: run.name.clone(),
            run_uid: run.uid.clone(),
            runtime: run.runtime.clone(),
            mode: state.mode as i32,
            owner: Some(own::Owner {
                pod_name: self.name.clone(),
                pod_uid: self.uid.clone(),
                dataplane_address: self.dataplane_address.clone(),
            }),
            attempt,
            phase: state.phase as i32,
            limits: state.limits,
            reason: state.reason.to_owned(),
            ..Default::default()
        }
    }

    /// Upserts the entry of a Run with how its task went and how the
    /// export of its artifacts ended, as far as they are known.
    pub fn publish_outcome(
        &self,
        run: &RunRef,
        attempt: u64,
        state: Published<'_>,
        task: Option<own::TaskOutcome>,
        export: Option<own::ExportOutcome>,
    ) {
        self.publisher.upsert(own::OwnershipEntry {
            task,
            export,
            ..self.entry(run, attempt, state)
        });
    }

    /// Removes a Run's entry.
    pub fn withdraw(&self, run_uid: &str) {
        self.publisher.delete(run_uid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run() -> RunRef {
        RunRef {
            namespace: "team".into(),
            name: "hello".into(),
            uid: "uid-1".into(),
            runtime: "python".into(),
        }
    }

    #[test]
    fn published_entries_name_this_pod_as_owner() {
        let pod = LocalPod::new("runtimed-0", "pod-uid", "10.0.0.1:7443");
        assert_eq!(pod.publisher().instance_id(), "pod-uid");
        pod.publish(
            &run(),
            3,
            Published {
                mode: own::Mode::Session,
                phase: own::Phase::Ready,
                reason: "",
                limits: None,
            },
        );
        let entry = pod.publisher().entries().pop().unwrap();
        let owner = entry.owner.unwrap();
        assert_eq!(
            (owner.pod_name.as_str(), owner.pod_uid.as_str()),
            ("runtimed-0", "pod-uid")
        );
        assert_eq!(owner.dataplane_address, "10.0.0.1:7443");
        assert_eq!((entry.run_uid.as_str(), entry.attempt), ("uid-1", 3));
        assert_eq!(entry.mode, own::Mode::Session as i32);
        pod.withdraw("uid-1");
        assert!(pod.publisher().entries().is_empty());
    }
}
