//! The operator in Kubernetes mode: a thin adapter around the pure
//! [`decide`], [`views`] and [`workloads`] functions.
//!
//! It keeps reflector caches of Runs, Runtime Pods and Runtimes (one watch
//! each), and on every change (and once a second, for timeouts) runs one
//! global decision pass: the operations the views call for, applied with
//! `resourceVersion` preconditions — a decision made on a stale view fails
//! with a conflict and is made again on the next pass. It also keeps each
//! Runtime's Deployment and Service applied ([`runtimes`]) and serves
//! `OwnershipTable.Watch` from its caches ([`watch`]). All state lives in
//! the API server: a restarted operator rebuilds everything from its first
//! list.

mod ca;
pub mod certificates;
pub mod decide;
pub mod leader;
pub mod metrics;
mod runtimes;
pub mod views;
mod watch;
pub mod workloads;
mod writes;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::Pod;
use kruntimes_api::{Run, Runtime};
use kruntimes_certs::TlsFiles;
use kruntimes_proto::ownership::v1 as own;
use kruntimes_proto::watch::{DEFAULT_LAG_CAPACITY, Publisher};
use kruntimes_support::kube::{set_finalizer, spawn_reflector};
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::reflector::Store;
use kube::runtime::watcher;

use crate::error::Doing as _;
use decide::{Op, Settings};
use views::RUNTIME_LABEL;
use workloads::PodSettings;

/// How long a stopping operator waits for its watch streams to end.
const WATCH_STOP_GRACE: Duration = Duration::from_secs(2);

/// Field manager of the operator's writes.
pub const FIELD_MANAGER: &str = "kruntimes-operator";

/// Kubernetes-mode configuration.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    /// Public gateway base URL (for `status.endpoint.url`).
    pub gateway_url: String,
    /// ConfigMap (`namespace`, `name`) whose `ca.crt` becomes
    /// `status.endpoint.caBundle`. Never a Secret.
    pub ca_configmap: Option<(String, String)>,
    /// Namespace searched for Runtimes a Run's namespace lacks.
    pub system_namespace: String,
    /// How Runtime Pods are built.
    pub pods: PodSettings,
    /// mTLS of the ownership watch server (server certificate + the CA
    /// gateway client certificates chain to).
    pub watch_tls: TlsFiles,
    /// Client certificate CNs allowed to watch (the gateways').
    pub watch_clients: Vec<String>,
    /// The leader election, when replicas elect one (else this replica
    /// always leads).
    pub leader_election: Option<leader::LeaderElection>,
}

struct Operator {
    client: kube::Client,
    cfg: ClusterConfig,
    runs: Store<Run>,
    pods: Store<Pod>,
    runtimes: Store<Runtime>,
    publisher: Publisher,
    applied: HashMap<String, String>,
    sizes: runtimes::Sizes,
    /// What the last pass left for the next ([`decide::Plan::memo`]).
    memo: BTreeMap<String, kruntimes_core::pass::PoolMemo>,
    ca: ca::CaBundle,
    leadership: Option<leader::Leadership>,
}

/// Runs the operator until `shutdown` resolves; the ownership watch is
/// served on `listener`.
pub async fn run(
    client: kube::Client,
    cfg: ClusterConfig,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> crate::Result<()> {
    let notify = Arc::new(tokio::sync::Notify::new());
    let runs = spawn_reflector(
        Api::<Run>::all(client.clone()),
        watcher::Config::default(),
        notify.clone(),
    );
    let pods = spawn_reflector(
        Api::<Pod>::all(client.clone()),
        watcher::Config::default().labels(RUNTIME_LABEL),
        notify.clone(),
    );
    let runtimes = spawn_reflector(
        Api::<Runtime>::all(client.clone()),
        watcher::Config::default(),
        notify.clone(),
    );
    // Only a complete first list of every kind may drive decisions.
    tokio::select! {
        r = async {
            runs.wait_until_ready().await?;
            pods.wait_until_ready().await?;
            runtimes.wait_until_ready().await
        } => r?,
        _ = tokio::time::sleep(Duration::from_secs(60)) => return Err(crate::Error::InitialListTimedOut),
    }
    tracing::info!("operator caches synced");
    let leadership = match &cfg.leader_election {
        Some(election) => {
            Some(leader::Leadership::join(client.clone(), &cfg.system_namespace, election).await?)
        }
        None => None,
    };
    let mut op = Operator {
        leadership,
        client,
        ca: ca::CaBundle::new(cfg.ca_configmap.clone()),
        cfg,
        runs,
        pods,
        runtimes,
        publisher: Publisher::new(
            own::SourceKind::ControlPlane,
            uuid::Uuid::new_v4().to_string(),
            DEFAULT_LAG_CAPACITY,
        ),
        applied: HashMap::new(),
        sizes: runtimes::Sizes::default(),
        memo: BTreeMap::new(),
    };
    // Serve gateways only once the table reflects the synced caches: an
    // early, empty snapshot would make them answer 404 for every Run.
    if let Err(e) = op.pass().await {
        tracing::warn!(error = %e, failures = 1, "reconcile pass failed");
    }
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let server = watch::serve(
        op.publisher.clone(),
        &op.cfg.watch_tls,
        op.cfg.watch_clients.clone(),
        listener,
        stop_rx,
    )?;

    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tokio::pin!(shutdown);
    let mut failures = 0u32;
    loop {
        tokio::select! {
            _ = notify.notified() => {
                // Coalesce bursts of events into one pass.
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            _ = tick.tick() => {}
            // A new leader decides at once rather than on the next tick.
            _ = async {
                match op.leadership.as_mut() {
                    Some(l) => l.changed().await,
                    None => std::future::pending().await,
                }
            } => {}
            _ = &mut shutdown => break,
        }
        let started = std::time::Instant::now();
        let passed = op.pass().await;
        if let Some(m) = metrics::get() {
            m.pass_duration.observe(started.elapsed().as_secs_f64());
            m.passes
                .with_label_values(&[if passed.is_ok() { "ok" } else { "failed" }])
                .inc();
        }
        match passed {
            Ok(()) => failures = 0,
            Err(e) => {
                failures += 1;
                let wait = pass_backoff(failures);
                tracing::warn!(error = %e, failures, retry_in_ms = wait.as_millis() as u64, "reconcile pass failed");
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = &mut shutdown => break,
                }
            }
        }
    }
    let _ = stop_tx.send(true);
    // A graceful stop waits for open watch streams, which gateways never
    // close: past a short grace they are cut (gateways keep their table and
    // re-sync with the next operator).
    let mut server = server;
    tokio::select! {
        _ = &mut server => {}
        _ = tokio::time::sleep(WATCH_STOP_GRACE) => {
            tracing::info!("closing the remaining ownership watch streams");
            server.abort();
        }
    }
    Ok(())
}

impl Operator {
    /// Whether this replica decides and writes now.
    async fn leading(&mut self) -> bool {
        let leading = match &mut self.leadership {
            Some(l) => l.confirmed().await,
            None => true,
        };
        if let Some(m) = metrics::get() {
            m.leader.set(i64::from(leading));
        }
        leading
    }

    /// The Runs the caches hold, their views and the Runtime Pods'.
    fn observed(&self) -> (Vec<Arc<Run>>, Vec<decide::RunView>, Vec<decide::PodInfo>) {
        let runs: Vec<Arc<Run>> = self.runs.state();
        let views = runs.iter().map(|r| views::run_view(r)).collect();
        let pods = self
            .pods
            .state()
            .iter()
            .filter_map(|p| views::pod_info(p))
            .collect();
        (runs, views, pods)
    }

    /// A replica that does not lead publishes the table its caches show and
    /// writes nothing.
    fn follow(&mut self) {
        let (_, views, pods) = self.observed();
        self.publisher
            .replace_all(views::ownership_entries(&views, &pods));
    }

    /// One global decision pass over every Run, then the Runtimes and the
    /// published table.
    async fn pass(&mut self) -> crate::Result<()> {
        if !self.leading().await {
            self.follow();
            return Ok(());
        }
        let settings = Settings {
            gateway_url: self.cfg.gateway_url.clone(),
            ca_bundle: self.ca.get(&self.client).await,
            system_namespace: self.cfg.system_namespace.clone(),
        };
        let (runs, views, pods) = self.observed();
        let runtimes: Vec<Arc<Runtime>> = self.runtimes.state();
        let infos: Vec<decide::RuntimeInfo> =
            runtimes.iter().map(|r| views::runtime_info(r)).collect();
        let by_key: BTreeMap<(String, String), &Arc<Run>> = runs
            .iter()
            .map(|r| ((r.namespace().unwrap_or_default(), r.name_any()), r))
            .collect();

        let mut written: Vec<Run> = Vec::new();
        // Views of `written`, made once: published as each status lands and
        // again at the end of the pass.
        let mut written_views: Vec<decide::RunView> = Vec::new();
        let mut failed: Vec<String> = Vec::new();
        let mut latest: HashMap<(String, String), Arc<Run>> = HashMap::new();
        let plan = decide::reconcile(
            &views,
            &pods,
            &infos,
            &settings,
            SystemTime::now(),
            &self.memo,
        );
        self.memo = plan.memo;
        if let Some(m) = metrics::get() {
            let r = &plan.report;
            m.cycles.with_label_values(&["bound"]).inc_by(r.placed);
            m.cycles
                .with_label_values(&["unplaced"])
                .inc_by(r.cycles.saturating_sub(r.placed));
            m.cycles.with_label_values(&["skipped"]).inc_by(r.skipped);
            for (source, n) in &r.wakeups {
                m.wakeups.with_label_values(&[source]).inc_by(*n);
            }
            for ((plugin, reason), n) in &r.rejections {
                m.filter_rejections
                    .with_label_values(&[plugin, reason])
                    .inc_by(*n);
            }
        }
        let demand = plan.demand;
        for op in plan.ops {
            let (Op::AddFinalizer { namespace, name }
            | Op::RemoveFinalizer { namespace, name }
            | Op::Delete {
                namespace, name, ..
            }
            | Op::Status {
                namespace, name, ..
            }) = &op;
            // A Run this pass already wrote (its finalizer, then its bind)
            // is written at the version that write returned: the decision
            // still holds, as only this pass changed it.
            let key = (namespace.clone(), name.clone());
            let Some(run) = latest
                .get(&key)
                .cloned()
                .or_else(|| by_key.get(&key).map(|r| Arc::clone(r)))
            else {
                continue;
            };
            let kind = match op {
                Op::Status { .. } => "status",
                Op::Delete { .. } => "delete",
                Op::AddFinalizer { .. } | Op::RemoveFinalizer { .. } => "finalizer",
            };
            if let Op::Delete { uid, .. } = &op {
                tracing::info!(namespace = %namespace, run = %name, "run deleted: its ttlSecondsAfterFinished passed");
                let result = writes::delete_expired(&self.client, &run, uid).await;
                if let Some(m) = metrics::get() {
                    let outcome = if result.is_ok() { "ok" } else { "error" };
                    m.writes.with_label_values(&[kind, outcome]).inc();
                }
                match result {
                    Ok(Some(run)) => {
                        latest.insert(key, Arc::new(run.clone()));
                        written_views.push(views::run_view(&run));
                        written.push(run);
                    }
                    Ok(None) => {}
                    Err(e) => failed.push(format!("{namespace}/{name}: {e}")),
                }
                continue;
            }
            let result = match &op {
                Op::AddFinalizer { .. } => set_finalizer(&self.client, &run, true)
                    .await
                    .doing(|| format!("add the finalizer of {namespace}/{name}")),
                Op::RemoveFinalizer { .. } => set_finalizer(&self.client, &run, false)
                    .await
                    .doing(|| format!("remove the finalizer of {namespace}/{name}")),
                Op::Delete { .. } => continue, // made above
                Op::Status { status, .. } => {
                    tracing::info!(
                        namespace = %namespace,
                        run = %name,
                        phase = ?status.phase,
                        reason = status.reason.as_deref().unwrap_or(""),
                        pod = status.assigned_pod.as_deref().unwrap_or(""),
                        attempt = status.attempt.unwrap_or(0),
                        "run status"
                    );
                    writes::patch_status(&self.client, &run, status).await
                }
            };
            if let Some(m) = metrics::get() {
                let outcome = match &result {
                    Ok(_) => "ok",
                    Err(e) if e.is_stale() => "conflict",
                    Err(_) => "error",
                };
                m.writes.with_label_values(&[kind, outcome]).inc();
                if let (Op::Status { status, .. }, Ok(_)) = (&op, &result)
                    && let Some(phase) = status.phase
                {
                    m.decisions
                        .with_label_values(&[&format!("{phase:?}")])
                        .inc();
                }
            }
            match result {
                Ok(run) => {
                    latest.insert(key, Arc::new(run.clone()));
                    let view = views::run_view(&run);
                    // A new assignment reaches the gateways now, not after
                    // the pass: its owner may register and go Ready before
                    // the last write of a burst, and a Run a client saw
                    // Ready must be settling in their tables (Scheduled
                    // with its owner), not Pending without one.
                    if matches!(op, Op::Status { .. }) {
                        for entry in views::ownership_entries(std::slice::from_ref(&view), &pods) {
                            self.publisher.upsert(entry);
                        }
                    }
                    written_views.push(view);
                    written.push(run);
                }
                // A conflict means a newer version exists (or the Run is
                // gone): the next pass decides again on it.
                Err(e) if e.is_stale() => {
                    tracing::debug!(error = %e, "operation not applied: stale decision")
                }
                Err(e) => failed.push(format!("{namespace}/{name}: {e}")),
            }
        }
        writes::catch_up(&self.runs, &written).await;
        // The Runs as this pass left them: what it decided on, with its own
        // writes applied.
        let after = views::with_written(views, written_views);

        let now = std::time::Instant::now();
        let mut keys = Vec::new();
        // Pods holding a Run, by UID.
        let busy: std::collections::BTreeSet<String> = after
            .iter()
            .filter(|r| r.status.life().phase.holds_capacity())
            .filter_map(|r| r.status.assigned_pod_uid.clone())
            .collect();
        for rt in &runtimes {
            let key = format!("{}/{}", rt.namespace().unwrap_or_default(), rt.name_any());
            let replicas = self.sizes.desired(rt, demand.get(&key), now);
            keys.push(key);
            if let Err(e) = runtimes::reconcile(
                &self.client,
                &mut self.applied,
                &self.cfg.pods,
                rt,
                replicas,
                &pods,
                &busy,
            )
            .await
            {
                tracing::warn!(runtime = %rt.name_any(), error = %e, "runtime not reconciled");
                if let Some(m) = metrics::get() {
                    m.runtime_errors.inc();
                }
            }
        }
        self.sizes.retain(&keys);
        // The table as this pass left it (publishing the views from before
        // its writes would take the assignments just upserted back to
        // Pending until the next pass).
        self.publisher
            .replace_all(views::ownership_entries(&after, &pods));
        match failed.as_slice() {
            [] => Ok(()),
            [first, ..] => Err(crate::Error::Writes {
                failed: failed.len(),
                first: first.clone(),
            }),
        }
    }
}

/// How long the loop waits after `failures` passes in a row failed: 1 s,
/// doubling, at most 30 s (the API server may be down; every pass would
/// fail the same way).
fn pass_backoff(failures: u32) -> Duration {
    let secs = 1u64 << failures.saturating_sub(1).min(5);
    Duration::from_secs(secs.min(30))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_passes_back_off_exponentially_up_to_thirty_seconds() {
        let waits: Vec<u64> = (1..=8).map(|n| pass_backoff(n).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 30, 30, 30]);
    }
}
