//! The kruntimes client library: where a caller acts — the embedded stack
//! of `krt up` (its state directory) or a Kubernetes cluster (a kubeconfig,
//! a context, or the in-cluster service account) — and calls through the
//! gateway. Both targets answer the same questions — which Runs exist, how
//! to create, end and delete one, where a Run's endpoint is and which token
//! reaches it — so every verb of `krt` (and a future dashboard) works the
//! same in both modes.
//!
//! - [`Target`], opened from a [`Selector`]: [`embedded`] or [`cluster`].
//! - [`gateway`]: an HTTPS client for a Run's endpoint and the typed error
//!   ([`ApiError`]) the gateway or runtimed answer with.
//! - [`Error`]: why a call failed, one enum; the API's refusals are
//!   [`Error::Api`].
#![forbid(unsafe_code)]

pub mod cluster;
pub mod embedded;
mod error;
pub mod gateway;
mod kubeauth;
pub mod stack_lock;

pub use error::{Error, Result};
pub use gateway::{ApiError, Gateway};

use std::path::PathBuf;
use std::time::{Duration, Instant};

use kruntimes_api::{Phase, Run, TerminationMode};
use serde::Serialize;

/// How long `krt apply` on `krt up` waits for the control plane to take a
/// new or replaced Run in (it reads the runs directory within moments).
const APPLY_SETTLE: Duration = Duration::from_secs(10);

/// A Run as the verbs show it, in either mode.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunInfo {
    /// Name.
    pub name: String,
    /// Namespace.
    pub namespace: String,
    /// `spec.runtime`.
    pub runtime: String,
    /// UID.
    pub uid: String,
    /// `function`, `session`, `task` or `invalid`.
    pub mode: String,
    /// Phase (`Pending` before the control plane wrote one).
    pub phase: String,
    /// Reason.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// Message.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// Owner Pod.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub assigned_pod: Option<String>,
    /// Attempt.
    pub attempt: u64,
    /// Endpoint URL on the gateway.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// How its task ended (task Runs, once it has).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task: Option<kruntimes_api::TaskStatus>,
    /// What it left in its artifacts directory (task Runs of a Runtime
    /// with an artifact store, at most 100).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub artifacts: Vec<kruntimes_api::ArtifactRef>,
}

impl RunInfo {
    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// Whether the Run has ended.
    pub fn ended(&self) -> bool {
        ["Succeeded", "Failed", "Timeout", "Cancelled"].contains(&self.phase.as_str())
    }
}

/// How a Runtime pool is doing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeInfo {
    /// Name.
    pub name: String,
    /// Namespace.
    pub namespace: String,
    /// Pods asked for.
    pub desired_replicas: i64,
    /// Pods ready.
    pub ready_replicas: i64,
    /// Runs per Pod.
    pub capacity_per_pod: u64,
    /// Runs holding capacity now.
    pub runs_in_use: u64,
    /// What the ready Pods' `capacity.resources` still offer beside the
    /// requests of the Runs they hold (none when the Runtime declares none).
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub free: std::collections::BTreeMap<String, String>,
    /// Image of the Runtime Server.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub image: String,
}

/// Which mode the global flags select.
#[derive(Debug, Clone, Default)]
pub struct Selector {
    /// `--state-dir`: the embedded stack.
    pub state_dir: PathBuf,
    /// `--kubeconfig`.
    pub kubeconfig: Option<PathBuf>,
    /// `--context`.
    pub context: Option<String>,
    /// `--cluster`: use the default kubeconfig or the in-cluster config.
    pub cluster: bool,
    /// `--token`: the caller's token for the gateway, overriding the
    /// kubeconfig's or `client.json`'s.
    pub token: Option<String>,
}

impl Selector {
    /// Whether the flags name a cluster.
    pub fn is_cluster(&self) -> bool {
        self.cluster || self.kubeconfig.is_some() || self.context.is_some()
    }
}

/// The embedded stack or a cluster.
pub enum Target {
    /// `krt up`'s state directory.
    Embedded(Box<embedded::Embedded>),
    /// A Kubernetes cluster.
    Cluster(Box<cluster::Cluster>),
}

impl Target {
    /// Opens the target the flags select.
    pub async fn open(sel: &Selector) -> Result<Self> {
        if sel.is_cluster() {
            Ok(Self::Cluster(Box::new(
                cluster::Cluster::connect(sel).await?,
            )))
        } else {
            Ok(Self::Embedded(Box::new(embedded::Embedded::open(sel)?)))
        }
    }

    /// Every Run (of `namespace`, or all).
    pub async fn runs(&self, namespace: Option<&str>) -> Result<Vec<RunInfo>> {
        match self {
            Self::Embedded(e) => e.runs(namespace),
            Self::Cluster(c) => c.runs(namespace).await,
        }
    }

    /// The manifests the embedded store could not read (file, why); none
    /// on a cluster, whose API server refuses them at once.
    pub fn skipped(&self) -> Result<Vec<(String, String)>> {
        match self {
            Self::Embedded(e) => e.skipped(),
            Self::Cluster(_) => Ok(Vec::new()),
        }
    }

    /// One Run, with its full object (for `-o json|yaml`).
    pub async fn run(&self, namespace: &str, name: &str) -> Result<(RunInfo, serde_json::Value)> {
        match self {
            Self::Embedded(e) => e.run(namespace, name),
            Self::Cluster(c) => c.run(namespace, name).await,
        }
    }

    /// Creates or updates Runs (and, on a cluster, Runtimes); returns one
    /// line per object.
    pub async fn apply(&self, docs: Vec<serde_json::Value>) -> Result<Vec<String>> {
        match self {
            Self::Embedded(e) => {
                let applied = e.apply(docs)?;
                Ok(e.settled(applied, APPLY_SETTLE).await)
            }
            Self::Cluster(c) => c.apply(docs).await,
        }
    }

    /// Creates a Run from its typed form.
    pub async fn create(&self, run: &Run) -> Result<()> {
        let doc = serde_json::to_value(run).map_err(|e| Error::Invalid(e.to_string()))?;
        match self {
            // A session's manifest is the file the SDKs keep sandboxes in
            // (`session-NS-NAME.yaml`), so either may close it.
            Self::Embedded(e) if run.spec.mode.session.is_some() => e.create_session(&doc),
            _ => self.apply(vec![doc]).await.map(drop),
        }
    }

    /// Deletes a Run.
    pub async fn delete(&self, namespace: &str, name: &str) -> Result<()> {
        match self {
            Self::Embedded(e) => e.delete(namespace, name),
            Self::Cluster(c) => c.delete(namespace, name).await,
        }
    }

    /// Sets `spec.termination`.
    pub async fn terminate(
        &self,
        namespace: &str,
        name: &str,
        mode: TerminationMode,
    ) -> Result<()> {
        match self {
            Self::Embedded(e) => e.terminate(namespace, name, mode),
            Self::Cluster(c) => c.terminate(namespace, name, mode).await,
        }
    }

    /// How to call `run` through the gateway.
    pub async fn gateway(&self, run: &RunInfo) -> Result<Gateway> {
        match self {
            Self::Embedded(e) => e.gateway(),
            Self::Cluster(c) => c.gateway(run).await,
        }
    }

    /// The Runtime pools.
    pub async fn runtimes(&self) -> Result<Vec<RuntimeInfo>> {
        match self {
            Self::Embedded(e) => e.runtimes(),
            Self::Cluster(c) => c.runtimes().await,
        }
    }

    /// Waits until `namespace/name` reaches one of `phases`; an end in any
    /// other phase is an error, and so is `timeout` passing.
    pub async fn wait(
        &self,
        namespace: &str,
        name: &str,
        phases: &[Phase],
        timeout: Duration,
    ) -> Result<RunInfo> {
        self.wait_seeing(namespace, name, phases, timeout, |_| {})
            .await
    }

    /// [`Self::wait`], calling `seen` with the Run each time it is read
    /// while it waits (`None` while it is not listed), for a progress line.
    pub async fn wait_seeing(
        &self,
        namespace: &str,
        name: &str,
        phases: &[Phase],
        timeout: Duration,
        mut seen_now: impl FnMut(Option<&RunInfo>),
    ) -> Result<RunInfo> {
        let want: Vec<String> = phases.iter().map(|p| format!("{p:?}")).collect();
        let deadline = Instant::now() + timeout;
        let mut seen = None;
        loop {
            if let Ok((r, _)) = self.run(namespace, name).await {
                if want.contains(&r.phase) {
                    return Ok(r);
                }
                if r.ended() {
                    return Err(Error::Ended {
                        namespace: namespace.into(),
                        name: name.into(),
                        phase: r.phase,
                        reason: r.reason,
                        message: r.message,
                    });
                }
                seen_now(Some(&r));
                seen = Some(r);
            } else {
                seen_now(None);
            }
            if Instant::now() > deadline {
                return Err(Error::WaitTimedOut {
                    namespace: namespace.into(),
                    name: name.into(),
                    wanted: want,
                    timeout,
                    last: last_seen(seen.as_ref()),
                });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// A Run that exists and is of `mode`.
    pub async fn run_of_mode(&self, namespace: &str, name: &str, mode: &str) -> Result<RunInfo> {
        let (r, _) = self.run(namespace, name).await?;
        if r.mode != mode {
            return Err(Error::WrongMode {
                namespace: namespace.into(),
                name: name.into(),
                mode: r.mode,
                wanted: mode.into(),
            });
        }
        Ok(r)
    }
}

/// The endpoint of `r`, or why it has none yet.
pub fn endpoint(r: &RunInfo) -> Result<&str> {
    match r.endpoint.as_deref() {
        Some(e) => Ok(e),
        None => Err(Error::NoEndpoint {
            run: r.key(),
            phase: r.phase.clone(),
        }),
    }
}

/// What a wait saw of a Run last: its phase, and why it waits when its
/// status says (`phase Pending, NoIdlePod: 0/2 bash Pods can take this session: …`), or that it
/// was never listed.
/// Where a Run stands, in words (`phase Pending, NoIdlePod: …`; `not
/// listed` for none), as waits report it.
pub fn last_seen(run: Option<&RunInfo>) -> String {
    let Some(r) = run else {
        return "not listed".into();
    };
    let why: Vec<&str> = [r.reason.as_str(), r.message.as_str()]
        .into_iter()
        .filter(|part| !part.is_empty())
        .collect();
    if why.is_empty() {
        format!("phase {}", r.phase)
    } else {
        format!("phase {}, {}", r.phase, why.join(": "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(phase: &str, reason: &str, message: &str) -> RunInfo {
        RunInfo {
            phase: phase.into(),
            reason: reason.into(),
            message: message.into(),
            ..RunInfo::default()
        }
    }

    #[test]
    fn a_wait_that_runs_out_says_what_it_saw_last_and_why() {
        assert_eq!(last_seen(None), "not listed");
        assert_eq!(
            last_seen(Some(&run("Scheduled", "", ""))),
            "phase Scheduled"
        );
        assert_eq!(
            last_seen(Some(&run(
                "Pending",
                "NoIdlePod",
                "0/2 bash Pods can take this session: 2 busy (a session needs an idle Pod)"
            ))),
            "phase Pending, NoIdlePod: 0/2 bash Pods can take this session: 2 busy (a session needs an idle Pod)"
        );
        assert_eq!(
            last_seen(Some(&run("Pending", "", "only a message"))),
            "phase Pending, only a message"
        );
    }
}
