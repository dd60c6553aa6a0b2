//! The operator in Kubernetes mode: a thin adapter around the pure
//! [`decide`] and [`objects`] functions.
//!
//! It keeps reflector caches of Runs, Runtime Pods and Runtimes (one watch
//! each), and on every change (and once a second, for timeouts) computes the
//! operations the views call for and applies them with `resourceVersion`
//! preconditions: a decision made on a stale view fails with a conflict and
//! is made again on the next pass. It also keeps each Runtime's Deployment
//! and Service applied (server-side apply, field manager
//! `kruntimes-operator`) and serves `OwnershipTable.Watch` from its caches.
//! All state lives in the API server: a restarted operator rebuilds
//! everything from its first list.

pub mod decide;
pub mod objects;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use anyhow::Context as _;
use base64::Engine as _;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kruntimes_proto::ownership::v1 as own;
use kruntimes_proto::ownership::v1::ownership_table_server::OwnershipTableServer;
use kruntimes_proto::watch::{DEFAULT_LAG_CAPACITY, Publisher};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};
use tonic::transport::{Certificate, Identity, Server, ServerTlsConfig};

use crate::crd::{FINALIZER, Run, RunPhase, Runtime, RuntimeStatus};
use crate::embedded::TlsFiles;
use decide::{Op, Settings};
use objects::{PodSettings, RUNTIME_LABEL};

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
}

fn read(path: &std::path::Path) -> anyhow::Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("read {}", path.display()))
}

/// A JSON merge patch turning `old` into `new` (removed keys become null).
pub fn merge_diff(old: &Value, new: &Value) -> Value {
    match (old, new) {
        (Value::Object(o), Value::Object(n)) => {
            let mut out = serde_json::Map::new();
            for (k, nv) in n {
                match o.get(k) {
                    Some(ov) if ov == nv => {}
                    Some(ov) => {
                        out.insert(k.clone(), merge_diff(ov, nv));
                    }
                    None => {
                        out.insert(k.clone(), nv.clone());
                    }
                }
            }
            for k in o.keys() {
                if !n.contains_key(k) {
                    out.insert(k.clone(), Value::Null);
                }
            }
            Value::Object(out)
        }
        _ => new.clone(),
    }
}

/// A client from `kubeconfig`, or else `KUBECONFIG` / `~/.kube/config`, or
/// else the in-cluster configuration.
pub async fn kube_client(kubeconfig: Option<&std::path::Path>) -> anyhow::Result<kube::Client> {
    let config = match kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("read kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?
        }
        None => kube::Config::infer()
            .await
            .context("no kubeconfig and no in-cluster configuration")?,
    };
    Ok(kube::Client::try_from(config)?)
}

/// A reflector cache of `api` kept by a background task, which wakes
/// `notify` on every change (watch errors are retried with backoff).
pub fn spawn_reflector<K>(
    api: Api<K>,
    cfg: watcher::Config,
    notify: Arc<tokio::sync::Notify>,
) -> Store<K>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let (reader, writer) = reflector::store();
    let stream = reflector::reflector(writer, watcher(api, cfg))
        .default_backoff()
        .touched_objects();
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(item) = stream.next().await {
            if let Err(e) = item {
                tracing::warn!(error = %e, "watch error; retrying");
            }
            notify.notify_one();
        }
    });
    reader
}

struct Operator {
    client: kube::Client,
    cfg: ClusterConfig,
    runs: Store<Run>,
    pods: Store<Pod>,
    runtimes: Store<Runtime>,
    publisher: Publisher,
    applied: HashMap<String, String>,
    ca: Option<(std::time::Instant, Option<String>)>,
}

/// How long the CA bundle read from the ConfigMap is reused.
const CA_REFRESH: Duration = Duration::from_secs(10);

/// Runs the operator until `shutdown` resolves; the ownership watch is
/// served on `listener`.
pub async fn run(
    client: kube::Client,
    cfg: ClusterConfig,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
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
    let publisher = Publisher::new(
        own::SourceKind::ControlPlane,
        uuid::Uuid::new_v4().to_string(),
        DEFAULT_LAG_CAPACITY,
    );
    // Only a complete first list of every kind may drive decisions.
    tokio::select! {
        r = async {
            runs.wait_until_ready().await?;
            pods.wait_until_ready().await?;
            runtimes.wait_until_ready().await
        } => r.context("initial list")?,
        _ = tokio::time::sleep(Duration::from_secs(60)) => anyhow::bail!("initial list timed out"),
    }
    tracing::info!("operator caches synced");
    let mut op = Operator {
        client,
        cfg,
        runs,
        pods,
        runtimes,
        publisher,
        applied: HashMap::new(),
        ca: None,
    };
    // Serve gateways only once the table reflects the synced caches: an
    // early, empty snapshot would make them answer 404 for every Run.
    if let Err(e) = op.pass().await {
        tracing::warn!(error = %e, "reconcile pass failed");
    }
    let tls = ServerTlsConfig::new()
        .identity(Identity::from_pem(
            read(&op.cfg.watch_tls.cert)?,
            read(&op.cfg.watch_tls.key)?,
        ))
        .client_ca_root(Certificate::from_pem(read(&op.cfg.watch_tls.ca)?));
    let server =
        Server::builder()
            .tls_config(tls)?
            .add_service(OwnershipTableServer::with_interceptor(
                op.publisher.clone(),
                peer_allowed(op.cfg.watch_clients.clone()),
            ));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
    let mut server_stop = stop_rx.clone();
    let server_task = tokio::spawn(async move {
        let stop = async move {
            let _ = server_stop.wait_for(|s| *s).await;
        };
        if let Err(e) = server.serve_with_incoming_shutdown(incoming, stop).await {
            tracing::error!(error = %e, "ownership watch server failed");
        }
    });

    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = notify.notified() => {
                // Coalesce bursts of events into one pass.
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            _ = tick.tick() => {}
            _ = &mut shutdown => break,
        }
        if let Err(e) = op.pass().await {
            tracing::warn!(error = %e, "reconcile pass failed");
        }
    }
    let _ = stop_tx.send(true);
    let _ = server_task.await;
    Ok(())
}

impl Operator {
    /// The CA bundle, re-read from its ConfigMap at most every
    /// [`CA_REFRESH`].
    async fn ca_bundle(&mut self) -> Option<String> {
        if let Some((at, bundle)) = &self.ca
            && at.elapsed() < CA_REFRESH
        {
            return bundle.clone();
        }
        let bundle = match self.read_ca_bundle().await {
            Ok(b) => b,
            // A failed read is not a removed CA: keep publishing the last one.
            Err(e) => {
                tracing::warn!(error = %e, "CA ConfigMap not readable; keeping the last bundle");
                self.ca.as_ref().and_then(|(_, b)| b.clone())
            }
        };
        self.ca = Some((std::time::Instant::now(), bundle.clone()));
        bundle
    }

    /// `Ok(None)` when the ConfigMap or its key is absent.
    async fn read_ca_bundle(&self) -> anyhow::Result<Option<String>> {
        let Some((ns, name)) = self.cfg.ca_configmap.as_ref() else {
            return Ok(None);
        };
        let Some(cm) = Api::<ConfigMap>::namespaced(self.client.clone(), ns)
            .get_opt(name)
            .await?
        else {
            return Ok(None);
        };
        let Some(pem) = cm.data.as_ref().and_then(|d| d.get("ca.crt")) else {
            return Ok(None);
        };
        let bundle = base64::engine::general_purpose::STANDARD.encode(pem.as_bytes());
        if bundle.len() > crate::crd::MAX_CA_BUNDLE_BYTES {
            tracing::warn!(
                configmap = %format!("{ns}/{name}"),
                bytes = bundle.len(),
                "ca.crt is too large for status.endpoint.caBundle; omitted"
            );
            return Ok(None);
        }
        Ok(Some(bundle))
    }

    async fn pass(&mut self) -> anyhow::Result<()> {
        let settings = Settings {
            gateway_url: self.cfg.gateway_url.clone(),
            ca_bundle: self.ca_bundle().await,
            system_namespace: self.cfg.system_namespace.clone(),
        };
        let runs: Vec<Arc<Run>> = self.runs.state();
        let views: Vec<decide::RunView> = runs.iter().map(|r| objects::run_view(r)).collect();
        let pods: Vec<decide::PodInfo> = self
            .pods
            .state()
            .iter()
            .filter_map(|p| objects::pod_info(p))
            .collect();
        let runtimes: Vec<Arc<Runtime>> = self.runtimes.state();
        let infos: Vec<decide::RuntimeInfo> =
            runtimes.iter().map(|r| objects::runtime_info(r)).collect();
        let by_key: BTreeMap<(String, String), &Arc<Run>> = runs
            .iter()
            .map(|r| ((r.namespace().unwrap_or_default(), r.name_any()), r))
            .collect();

        let mut written: Vec<Run> = Vec::new();
        for op in decide::reconcile(&views, &pods, &infos, &settings, SystemTime::now()) {
            let result = match &op {
                Op::AddFinalizer { namespace, name } | Op::RemoveFinalizer { namespace, name } => {
                    let Some(run) = by_key.get(&(namespace.clone(), name.clone())) else {
                        continue;
                    };
                    let add = matches!(op, Op::AddFinalizer { .. });
                    set_finalizer(&self.client, run, add).await
                }
                Op::Status {
                    namespace,
                    name,
                    status,
                } => {
                    let Some(run) = by_key.get(&(namespace.clone(), name.clone())) else {
                        continue;
                    };
                    let mut status = (**status).clone();
                    let terminal = status.phase.is_some_and(RunPhase::is_terminal);
                    if terminal && status.completion_time.is_none() {
                        status.completion_time = Some(Time(jiff_now()));
                    }
                    status.observed_generation = run.meta().generation;
                    tracing::info!(
                        namespace = %namespace,
                        run = %name,
                        phase = ?status.phase,
                        reason = status.reason.as_deref().unwrap_or(""),
                        pod = status.assigned_pod.as_deref().unwrap_or(""),
                        attempt = status.attempt.unwrap_or(0),
                        "run status"
                    );
                    patch_status(&self.client, run, &status).await
                }
            };
            match result {
                Ok(run) => written.push(run),
                // Conflicts are expected (a newer version exists); the next
                // pass decides again on it.
                Err(e) => tracing::debug!(error = %e, "operation not applied"),
            }
        }

        // The next pass must see this pass's own writes: deciding capacity
        // from a cache that lags an assignment would overcommit a Pod.
        self.catch_up(&written).await;

        for rt in &runtimes {
            if let Err(e) = self.reconcile_runtime(rt, &pods).await {
                tracing::warn!(runtime = %rt.name_any(), error = %e, "runtime not reconciled");
            }
        }

        // The ownership table served to gateways.
        let entries = objects::ownership_entries(&views, &pods);
        let current: BTreeMap<String, own::OwnershipEntry> = self
            .publisher
            .entries()
            .into_iter()
            .map(|e| (e.run_uid.clone(), e))
            .collect();
        let wanted: BTreeMap<String, own::OwnershipEntry> = entries
            .into_iter()
            .map(|e| (e.run_uid.clone(), e))
            .collect();
        for (uid, e) in &wanted {
            if current.get(uid) != Some(e) {
                self.publisher.upsert(e.clone());
            }
        }
        for uid in current.keys() {
            if !wanted.contains_key(uid) {
                self.publisher.delete(uid);
            }
        }
        Ok(())
    }

    /// Waits (bounded) until the Runs cache holds every object in `written`
    /// at its written version or a newer one.
    async fn catch_up(&self, written: &[Run]) {
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        for run in written {
            let key = reflector::ObjectRef::<Run>::new(&run.name_any())
                .within(&run.namespace().unwrap_or_default());
            let want = run.resource_version().unwrap_or_default();
            loop {
                let seen = match self.runs.get(&key) {
                    None => true, // deleted meanwhile
                    Some(cur) => at_least(&cur.resource_version().unwrap_or_default(), &want),
                };
                if seen {
                    break;
                }
                if std::time::Instant::now() > deadline {
                    tracing::warn!("runs cache lags the operator's own writes by more than 5 s");
                    return;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }

    async fn reconcile_runtime(
        &mut self,
        rt: &Runtime,
        pods: &[decide::PodInfo],
    ) -> anyhow::Result<()> {
        let ns = rt.namespace().unwrap_or_default();
        let key = format!("{ns}/{}", rt.name_any());
        let deployment = objects::deployment(rt, &self.cfg.pods);
        let service = objects::service(rt);
        let fingerprint = serde_json::to_string(&(&deployment, &service))?;
        if self.applied.get(&key) != Some(&fingerprint) {
            let pp = PatchParams::apply(FIELD_MANAGER).force();
            let name = deployment.metadata.name.clone().unwrap_or_default();
            let mut d = serde_json::to_value(&deployment)?;
            d["apiVersion"] = json!("apps/v1");
            d["kind"] = json!("Deployment");
            Api::<Deployment>::namespaced(self.client.clone(), &ns)
                .patch(&name, &pp, &Patch::Apply(d))
                .await?;
            let mut s = serde_json::to_value(&service)?;
            s["apiVersion"] = json!("v1");
            s["kind"] = json!("Service");
            Api::<Service>::namespaced(self.client.clone(), &ns)
                .patch(&name, &pp, &Patch::Apply(s))
                .await?;
            tracing::info!(runtime = %key, "runtime deployment and service applied");
            self.applied.insert(key, fingerprint);
        }
        let ready = pods
            .iter()
            .filter(|p| p.namespace == ns && p.runtime == rt.name_any() && p.ready)
            .count() as i32;
        let status = RuntimeStatus {
            desired_replicas: rt.spec.replicas,
            ready_replicas: ready,
            observed_generation: rt.meta().generation,
        };
        if rt.status.as_ref() != Some(&status) {
            Api::<Runtime>::namespaced(self.client.clone(), &ns)
                .patch_status(
                    &rt.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(json!({ "status": status })),
                )
                .await?;
        }
        Ok(())
    }
}

/// Admits watch clients whose certificate CN is in `allowed`: any other
/// holder of an internal certificate (a Runtime Pod's, say) may not read the
/// cluster-wide table.
fn peer_allowed(
    allowed: Vec<String>,
) -> impl FnMut(tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> + Clone {
    move |req: tonic::Request<()>| {
        let cn = req.peer_certs().and_then(|certs| {
            certs
                .first()
                .and_then(|c| kruntimes_certs::peer_common_name(c.as_ref()))
        });
        match cn {
            Some(cn) if allowed.contains(&cn) => Ok(req),
            Some(cn) => Err(tonic::Status::permission_denied(format!(
                "client {cn} may not watch the ownership table"
            ))),
            None => Err(tonic::Status::unauthenticated(
                "client certificate required",
            )),
        }
    }
}

/// Whether resourceVersion `have` is `want` or later. Versions are opaque
/// strings to clients; etcd-backed servers use increasing integers, which is
/// the only order assumed here (anything else compares by equality).
fn at_least(have: &str, want: &str) -> bool {
    match (have.parse::<u64>(), want.parse::<u64>()) {
        (Ok(h), Ok(w)) => h >= w,
        _ => have == want,
    }
}

fn jiff_now() -> k8s_openapi::jiff::Timestamp {
    k8s_openapi::jiff::Timestamp::now()
}

/// Adds or removes the cleanup finalizer, guarded by the Run's
/// `resourceVersion`; returns the updated Run.
pub async fn set_finalizer(client: &kube::Client, run: &Run, add: bool) -> anyhow::Result<Run> {
    let mut finalizers: Vec<String> = run.finalizers().to_vec();
    finalizers.retain(|f| f != FINALIZER);
    if add {
        finalizers.push(FINALIZER.into());
    }
    let patch = json!({
        "metadata": {
            "resourceVersion": run.resource_version(),
            "finalizers": finalizers,
        }
    });
    Api::<Run>::namespaced(client.clone(), &run.namespace().unwrap_or_default())
        .patch(
            &run.name_any(),
            &PatchParams::default(),
            &Patch::Merge(patch),
        )
        .await
        .map_err(Into::into)
}

async fn patch_status(
    client: &kube::Client,
    run: &Run,
    status: &crate::crd::RunStatus,
) -> anyhow::Result<Run> {
    let old = serde_json::to_value(run.status.clone().unwrap_or_default())?;
    let new = serde_json::to_value(status)?;
    let patch = json!({
        "metadata": { "resourceVersion": run.resource_version() },
        "status": merge_diff(&old, &new),
    });
    Api::<Run>::namespaced(client.clone(), &run.namespace().unwrap_or_default())
        .patch_status(
            &run.name_any(),
            &PatchParams::default(),
            &Patch::Merge(patch),
        )
        .await
        .map_err(Into::into)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_versions_compare_numerically_when_they_can() {
        assert!(at_least("12", "9"));
        assert!(at_least("9", "9"));
        assert!(!at_least("9", "12"));
        assert!(at_least("abc", "abc"));
        assert!(!at_least("abd", "abc"));
    }

    #[test]
    fn merge_diff_sets_changes_and_nulls_removed_keys() {
        let old = json!({"phase": "Ready", "assignedPod": "p", "attempt": 1, "endpoint": {"url": "u", "caBundle": "x"}});
        let new = json!({"phase": "Pending", "attempt": 1, "endpoint": {"url": "u"}});
        assert_eq!(
            merge_diff(&old, &new),
            json!({"phase": "Pending", "assignedPod": null, "endpoint": {"caBundle": null}})
        );
        assert_eq!(merge_diff(&old, &old), json!({}));
    }
}
