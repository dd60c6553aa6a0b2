//! The artifact sweep on a cluster: retention and orphans.
//!
//! Only runtimed holds the store's credentials, and a Run's owner may be
//! long gone when its retention passes or when it is deleted (a pool
//! shrinks, a node goes), so one runtimed of each Runtime sweeps the store
//! for all: the first of the Runtime's ready Pods by name ([`elect`]),
//! chosen again every sweep (two sweepers for a moment only delete twice).
//!
//! A sweep lists what the store holds, then the Runs of each namespace found
//! there — in that order, so a Run that exported before the store was listed
//! is in the Run list — and [`kruntimes_artifacts::retention`] decides:
//! a Run of this Runtime past `retainAfterRunSeconds` loses its artifacts
//! (Runs of other Runtimes sharing the store keep theirs: their own sweeper
//! knows their retention; which Runs are this Runtime's is [`owns`]), and a
//! UID no Run of its namespace has any more
//! is an orphan once it has been missing for the grace. A namespace whose
//! Runs cannot be listed is left alone for that sweep.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kruntimes_api::{RUNTIME_LABEL, Run, Runtime};
use kruntimes_artifacts::retention::{Live, Sweep};
use kube::ResourceExt;
use kube::api::{Api, ListParams};

use crate::artifacts::Artifacts;

/// Runs per page of a namespace's list.
const PAGE: u32 = 500;
/// Bound on deleting one Run's artifacts.
const DELETE_TIMEOUT: Duration = Duration::from_secs(60);

/// Who sweeps and what.
pub struct Sweeper {
    /// The API.
    pub client: kube::Client,
    /// This Pod's namespace.
    pub namespace: String,
    /// This Pod's name.
    pub pod: String,
    /// Its Runtime (`kruntimes.io/runtime`).
    pub runtime: String,
    /// The store, its retention and the sweep's period and grace.
    pub artifacts: Arc<Artifacts>,
    /// The operator's system namespace, whose Runtimes serve the
    /// namespaces without one of the name (`None`: unknown).
    pub system_namespace: Option<String>,
}

/// The Pod that sweeps among a Runtime's `(name, ready)` Pods: the first
/// ready one by name (`None`: none is ready).
pub fn elect<'a>(pods: impl IntoIterator<Item = (&'a str, bool)>) -> Option<&'a str> {
    pods.into_iter()
        .filter(|(_, ready)| *ready)
        .map(|(name, _)| name)
        .min()
}

/// Whether a Run of namespace `run_ns` naming this Runtime (`spec.runtime`)
/// is this Runtime's, the Runtime being in `runtime_ns`: a Run takes the
/// Runtime of its own namespace first (`shadowed`: its namespace has one of
/// the name), then the system namespace's. Without the system namespace
/// known, only Runs of the Runtime's own namespace are.
pub fn owns(run_ns: &str, runtime_ns: &str, system_ns: Option<&str>, shadowed: bool) -> bool {
    run_ns == runtime_ns || (system_ns == Some(runtime_ns) && !shadowed)
}

/// What the sweep knows of a Run: its namespace, how long ago it ended,
/// and the retention that applies (this Runtime's for its own Runs —
/// `mine` —, none for another's: that one's sweeper knows it).
pub fn known(
    run: &Run,
    mine: bool,
    retain: Option<Duration>,
    now: k8s_openapi::jiff::Timestamp,
) -> Live {
    let ended_for = run
        .status
        .as_ref()
        .filter(|s| s.phase.is_some_and(|p| p.is_terminal()))
        .and_then(|s| s.completion_time.as_ref())
        .and_then(|t| u64::try_from(now.duration_since(t.0).as_millis()).ok())
        .map(Duration::from_millis);
    Live {
        namespace: run.namespace().unwrap_or_default(),
        ended_for,
        retain: retain.filter(|_| mine),
    }
}

impl Sweeper {
    /// Sweeps every `sweep_every` while elected, until `stop` is set.
    pub async fn run(self, mut stop: tokio::sync::watch::Receiver<bool>) {
        tracing::info!(
            runtime = %self.runtime,
            every_secs = self.artifacts.sweep_every.as_secs(),
            grace_secs = self.artifacts.orphan_grace.as_secs(),
            "artifact sweep: on whenever this pod is the runtime's first ready pod"
        );
        let mut sweep = Sweep::default();
        let mut tick = tokio::time::interval(self.artifacts.sweep_every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = stop.wait_for(|s| *s) => return,
            }
            match self.elected().await {
                Ok(true) => self.pass(&mut sweep).await,
                // Another Pod sweeps; should this one be elected again,
                // every grace starts over.
                Ok(false) => sweep = Sweep::default(),
                Err(e) => {
                    tracing::warn!(error = %e, "artifact sweep: cannot list the runtime's pods; trying again at the next sweep")
                }
            }
        }
    }

    async fn elected(&self) -> Result<bool, kube::Error> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.namespace);
        let selector = format!("{RUNTIME_LABEL}={}", self.runtime);
        let list = pods.list(&ListParams::default().labels(&selector)).await?;
        let named: Vec<(String, bool)> = list
            .items
            .iter()
            .map(|p| (p.name_any(), kruntimes_api::pod::is_ready(p)))
            .collect();
        Ok(elect(named.iter().map(|(n, r)| (n.as_str(), *r))) == Some(self.pod.as_str()))
    }

    async fn pass(&self, sweep: &mut Sweep) {
        let store = &self.artifacts.store;
        let stored = match store.stored_runs().await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "artifact sweep: cannot list the store; trying again at the next sweep");
                return;
            }
        };
        let namespaces: BTreeSet<&str> = stored.iter().map(|(ns, _)| ns.as_str()).collect();
        let mut live = BTreeMap::new();
        let mut unlisted = BTreeSet::new();
        for ns in namespaces {
            if let Err(e) = self.runs_of(ns, &mut live).await {
                tracing::warn!(namespace = %ns, error = %e, "artifact sweep: cannot list the namespace's runs; its artifacts wait for the next sweep");
                unlisted.insert(ns.to_owned());
            }
        }
        let plan = sweep.plan(
            &stored,
            &live,
            &unlisted,
            self.artifacts.orphan_grace,
            Instant::now(),
        );
        for o in kruntimes_artifacts::sweep::carry_out(store, plan, DELETE_TIMEOUT).await {
            if o.result.is_ok() {
                crate::metrics::artifact_cleanup(o.why.as_str());
            }
        }
    }

    /// Adds the Runs of `ns` to `live`, a page at a time (only what the
    /// sweep needs of each is kept).
    async fn runs_of(
        &self,
        ns: &str,
        live: &mut BTreeMap<String, Live>,
    ) -> Result<(), kube::Error> {
        // Whether `ns` has a Runtime of this name of its own (only asked
        // when this Runtime is the system namespace's, serving others).
        let shadowed = ns != self.namespace
            && self.system_namespace.as_deref() == Some(self.namespace.as_str())
            && Api::<Runtime>::namespaced(self.client.clone(), ns)
                .get_opt(&self.runtime)
                .await?
                .is_some();
        let ours = owns(
            ns,
            &self.namespace,
            self.system_namespace.as_deref(),
            shadowed,
        );
        let api: Api<Run> = Api::namespaced(self.client.clone(), ns);
        let mut params = ListParams::default().limit(PAGE);
        loop {
            let page = api.list(&params).await?;
            let now = k8s_openapi::jiff::Timestamp::now();
            for run in &page.items {
                if let Some(uid) = run.uid() {
                    let mine = ours && run.spec.runtime == self.runtime;
                    live.insert(uid, known(run, mine, self.artifacts.retain, now));
                }
            }
            match page.metadata.continue_ {
                Some(token) if !token.is_empty() => params = params.continue_token(&token),
                _ => return Ok(()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_runtime_owns_its_namespaces_runs_and_the_system_runtime_the_unshadowed_others() {
        let sys = Some("kruntimes-system");
        // A team's own Runtime: its namespace's Runs only.
        assert!(owns("team", "team", sys, false));
        assert!(!owns("other", "team", sys, false));
        // The system namespace's: its own, and every namespace without a
        // Runtime of the name.
        assert!(owns("kruntimes-system", "kruntimes-system", sys, false));
        assert!(owns("team", "kruntimes-system", sys, false));
        assert!(!owns("team", "kruntimes-system", sys, true));
        // The system namespace unknown: its own namespace only.
        assert!(!owns("team", "kruntimes-system", None, false));
        assert!(owns("kruntimes-system", "kruntimes-system", None, false));
    }

    #[test]
    fn the_first_ready_pod_by_name_sweeps() {
        assert_eq!(elect([("b", true), ("a", true), ("c", true)]), Some("a"));
        assert_eq!(
            elect([("b", true), ("a", false)]),
            Some("b"),
            "a is not ready"
        );
        assert_eq!(elect([("a", false)]), None);
        assert_eq!(elect([]), None);
    }

    fn run(runtime: &str, phase: Option<&str>, completed: Option<&str>) -> Run {
        let mut v = serde_json::json!({
            "apiVersion": "kruntimes.io/v1alpha1", "kind": "Run",
            "metadata": {"name": "r", "namespace": "team", "uid": "u"},
            "spec": {"runtime": runtime, "source": {"inline": "x"}, "mode": {"task": {}}},
        });
        if let Some(p) = phase {
            v["status"] = serde_json::json!({"phase": p});
            if let Some(t) = completed {
                v["status"]["completionTime"] = t.into();
            }
        }
        serde_json::from_value(v).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn a_run_is_seen_with_its_end_and_the_retention_of_its_own_runtime_only() {
        let now: k8s_openapi::jiff::Timestamp = "2026-12-07T12:00:00Z"
            .parse()
            .unwrap_or_else(|e| panic!("{e}"));
        let retain = Some(Duration::from_secs(30));
        let ended = run("python", Some("Succeeded"), Some("2026-12-07T11:59:00Z"));
        assert_eq!(
            known(&ended, true, retain, now),
            Live {
                namespace: "team".into(),
                ended_for: Some(Duration::from_secs(60)),
                retain
            }
        );
        // Another Runtime's Run sharing the store: known, never expired here.
        assert_eq!(known(&ended, false, retain, now).retain, None);
        // Running (a completion time without a terminal phase counts not).
        assert_eq!(
            known(
                &run("python", Some("Running"), Some("2026-12-07T11:59:00Z")),
                true,
                retain,
                now
            )
            .ended_for,
            None
        );
        assert_eq!(
            known(&run("python", None, None), true, retain, now).ended_for,
            None
        );
        // A clock behind the completion time: not ended long enough.
        let future = run("python", Some("Failed"), Some("2026-12-07T12:01:00Z"));
        assert_eq!(known(&future, true, retain, now).ended_for, None);
    }
}
