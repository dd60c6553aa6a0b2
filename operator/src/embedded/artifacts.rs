//! Artifact maintenance of the embedded control plane: every sweep, what
//! the store holds is compared with the Runs that exist
//! ([`kruntimes_artifacts::retention`] decides), and the artifacts of Runs
//! past their retention or gone are deleted. A failing store is logged and
//! tried again at the next sweep; nothing else waits for it.

use std::collections::BTreeMap;
use std::time::Duration;

use kruntimes_artifacts::Store;
use kruntimes_artifacts::retention::{Live, Sweep};
use tokio::sync::watch;

/// How the embedded control plane keeps its artifact store.
#[derive(Debug, Clone)]
pub struct ArtifactMaintenance {
    /// The store (`krt up --artifacts`).
    pub store: Store,
    /// How long a Run's artifacts are kept after it ended (`None`: until
    /// it is deleted).
    pub retain: Option<Duration>,
    /// Time between two sweeps.
    pub every: Duration,
    /// How long a stored UID must be unknown before it is an orphan.
    pub grace: Duration,
}

/// Bound on deleting one Run's artifacts in a sweep.
const DELETE_TIMEOUT: Duration = Duration::from_secs(60);

/// The Runs that exist, by UID: namespace and when they ended.
pub type RunsView = BTreeMap<String, (String, Option<std::time::Instant>)>;

/// Sweeps `m.store` every `m.every` against the latest view of the Runs,
/// until `stop` is set.
pub fn spawn(
    m: ArtifactMaintenance,
    mut runs: watch::Receiver<RunsView>,
    mut stop: watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut sweep = Sweep::default();
        loop {
            tokio::select! {
                _ = tokio::time::sleep(m.every) => {}
                _ = stop.wait_for(|s| *s) => return,
            }
            let now = std::time::Instant::now();
            let live: BTreeMap<String, Live> = runs
                .borrow_and_update()
                .iter()
                .map(|(uid, (namespace, ended))| {
                    let l = Live {
                        namespace: namespace.clone(),
                        ended_for: ended.map(|t| now.saturating_duration_since(t)),
                        retain: m.retain,
                    };
                    (uid.clone(), l)
                })
                .collect();
            let stored = match m.store.stored_runs().await {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(error = %e, "artifact sweep: cannot list the store; trying again at the next sweep");
                    continue;
                }
            };
            let plan = sweep.plan(&stored, &live, &Default::default(), m.grace, now);
            kruntimes_artifacts::sweep::carry_out(&m.store, plan, DELETE_TIMEOUT).await;
        }
    })
}
