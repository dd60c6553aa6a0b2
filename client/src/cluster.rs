//! A Kubernetes cluster as a target: Runs and Runtimes through the API
//! server (server-side apply with field manager `krt`), endpoints and CA
//! bundles from `Run.status.endpoint`, and the caller's own token from the
//! kubeconfig for the gateway.

use base64::Engine as _;
use kruntimes_api::{ModeKind, Phase, Run, Runtime, TerminationMode, quantity};
use kube::ResourceExt as _;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};

use crate::error::KubeContext as _;
use crate::{Error, Gateway, Result, RunInfo, RuntimeInfo, Selector, kubeauth};

/// Field manager of krt's writes.
pub const FIELD_MANAGER: &str = "krt";

/// A connected cluster.
pub struct Cluster {
    client: kube::Client,
    auth: kube::config::AuthInfo,
    default_namespace: String,
    token: Option<String>,
}

impl Cluster {
    /// Connects with `--kubeconfig` / `--context`, else `KUBECONFIG`,
    /// `~/.kube/config` or the in-cluster service account.
    pub async fn connect(sel: &Selector) -> Result<Self> {
        let opts = kube::config::KubeConfigOptions {
            context: sel.context.clone(),
            ..Default::default()
        };
        let config = match &sel.kubeconfig {
            Some(path) => {
                let kc =
                    kube::config::Kubeconfig::read_from(path).map_err(|e| Error::KubeConfig {
                        what: format!("read kubeconfig {}", path.display()),
                        reason: e.to_string(),
                    })?;
                kube::Config::from_custom_kubeconfig(kc, &opts)
                    .await
                    .map_err(|e| Error::KubeConfig {
                        what: format!("use kubeconfig {}", path.display()),
                        reason: e.to_string(),
                    })?
            }
            None if sel.context.is_some() => {
                kube::Config::from_kubeconfig(&opts)
                    .await
                    .map_err(|e| Error::KubeConfig {
                        what: "use the kubeconfig".into(),
                        reason: e.to_string(),
                    })?
            }
            None => kube::Config::infer().await.map_err(|e| Error::KubeConfig {
                what: "no kubeconfig and no in-cluster configuration".into(),
                reason: e.to_string(),
            })?,
        };
        Ok(Self {
            auth: config.auth_info.clone(),
            default_namespace: config.default_namespace.clone(),
            client: kube::Client::try_from(config)
                .doing(|| "build the Kubernetes client".into())?,
            token: sel.token.clone(),
        })
    }

    /// The context's namespace.
    pub fn default_namespace(&self) -> &str {
        &self.default_namespace
    }

    /// The client.
    pub fn client(&self) -> &kube::Client {
        &self.client
    }

    /// Every Run (of `namespace`, or all).
    pub async fn runs(&self, namespace: Option<&str>) -> Result<Vec<RunInfo>> {
        let api: Api<Run> = match namespace {
            Some(ns) => Api::namespaced(self.client.clone(), ns),
            None => Api::all(self.client.clone()),
        };
        let mut runs: Vec<RunInfo> = api
            .list(&ListParams::default())
            .await
            .doing(|| "list runs".into())?
            .items
            .iter()
            .map(info)
            .collect();
        runs.sort_by_key(RunInfo::key);
        Ok(runs)
    }

    /// One Run and its object.
    pub async fn run(&self, namespace: &str, name: &str) -> Result<(RunInfo, serde_json::Value)> {
        let run = self.get(namespace, name).await?;
        let raw = serde_json::to_value(&run).map_err(|e| Error::Invalid(e.to_string()))?;
        Ok((info(&run), raw))
    }

    async fn get(&self, namespace: &str, name: &str) -> Result<Run> {
        Api::<Run>::namespaced(self.client.clone(), namespace)
            .get_opt(name)
            .await
            .doing(|| format!("get run {namespace}/{name}"))?
            .ok_or_else(|| Error::NotFound {
                namespace: namespace.into(),
                name: name.into(),
            })
    }

    /// Server-side applies Runs and Runtimes.
    pub async fn apply(&self, docs: Vec<serde_json::Value>) -> Result<Vec<String>> {
        let pp = PatchParams::apply(FIELD_MANAGER);
        let mut out = Vec::new();
        for mut doc in docs {
            let kind = doc["kind"].as_str().unwrap_or_default().to_owned();
            let name = doc["metadata"]["name"]
                .as_str()
                .ok_or_else(|| Error::Invalid("an object needs metadata.name".into()))?
                .to_owned();
            let ns = doc["metadata"]["namespace"]
                .as_str()
                .unwrap_or(&self.default_namespace)
                .to_owned();
            doc["metadata"]["namespace"] = ns.clone().into();
            match kind.as_str() {
                "Run" => {
                    Api::<Run>::namespaced(self.client.clone(), &ns)
                        .patch(&name, &pp, &Patch::Apply(&doc))
                        .await
                        .doing(|| format!("apply run {ns}/{name}"))?;
                    out.push(format!("run.kruntimes.io/{name} applied"));
                }
                "Runtime" => {
                    Api::<Runtime>::namespaced(self.client.clone(), &ns)
                        .patch(&name, &pp, &Patch::Apply(&doc))
                        .await
                        .doing(|| format!("apply runtime {ns}/{name}"))?;
                    out.push(format!("runtime.kruntimes.io/{name} applied"));
                }
                other => {
                    return Err(Error::Unsupported(format!(
                        "krt applies Runs and Runtimes, not {other:?}"
                    )));
                }
            }
        }
        Ok(out)
    }

    /// Deletes a Run (its owner releases it through the finalizer).
    pub async fn delete(&self, namespace: &str, name: &str) -> Result<()> {
        Api::<Run>::namespaced(self.client.clone(), namespace)
            .delete(name, &DeleteParams::default())
            .await
            .doing(|| format!("delete run {namespace}/{name}"))?;
        Ok(())
    }

    /// Sets `spec.termination` (a merge patch: the API server's CEL rule
    /// keeps it monotonic).
    pub async fn terminate(
        &self,
        namespace: &str,
        name: &str,
        mode: TerminationMode,
    ) -> Result<()> {
        let patch = serde_json::json!({"spec": {"termination": {"mode": mode}}});
        Api::<Run>::namespaced(self.client.clone(), namespace)
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .doing(|| format!("terminate run {namespace}/{name}"))?;
        Ok(())
    }

    /// The gateway for `run`: its `status.endpoint.caBundle` and the
    /// caller's token (`--token`, or the kubeconfig's).
    pub async fn gateway(&self, run: &RunInfo) -> Result<Gateway> {
        let obj = self.get(&run.namespace, &run.name).await?;
        let ca = obj
            .status
            .as_ref()
            .and_then(|s| s.endpoint.as_ref())
            .and_then(|e| e.ca_bundle.as_deref())
            .map(|b| base64::engine::general_purpose::STANDARD.decode(b))
            .transpose()
            .map_err(|e| Error::Invalid(format!("status.endpoint.caBundle is not base64: {e}")))?;
        let token = match &self.token {
            Some(t) => t.clone(),
            None => kubeauth::bearer_token(&self.auth)?.ok_or_else(|| {
                Error::Credentials(
                    "the kubeconfig's user has no bearer token (the gateway authenticates tokens with TokenReview): pass --token".into(),
                )
            })?,
        };
        Gateway::new(ca.as_deref(), &token)
    }

    /// Every Runtime with its replicas and the capacity its Runs use.
    pub async fn runtimes(&self) -> Result<Vec<RuntimeInfo>> {
        let runtimes = Api::<Runtime>::all(self.client.clone())
            .list(&ListParams::default())
            .await
            .doing(|| "list runtimes".into())?
            .items;
        let runs = Api::<Run>::all(self.client.clone())
            .list(&ListParams::default())
            .await
            .doing(|| "list runs".into())?
            .items;
        let mut out: Vec<RuntimeInfo> = runtimes
            .iter()
            .map(|rt| runtime_info(rt, &runtimes, &runs))
            .collect();
        out.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        Ok(out)
    }
}

/// A Run as the verbs show it.
pub fn info(run: &Run) -> RunInfo {
    let status = run.status.clone().unwrap_or_default();
    RunInfo {
        name: run.name_any(),
        namespace: run.namespace().unwrap_or_default(),
        runtime: run.spec.runtime.clone(),
        uid: run.uid().unwrap_or_default(),
        mode: run
            .validate()
            .map_or("invalid", ModeKind::as_str)
            .to_owned(),
        phase: format!("{:?}", status.phase.unwrap_or(Phase::Pending)),
        reason: status.reason.unwrap_or_default(),
        message: status.message.unwrap_or_default(),
        assigned_pod: status.assigned_pod,
        attempt: status.attempt.unwrap_or(0).max(0) as u64,
        endpoint: status.endpoint.map(|e| e.url),
        task: status.task,
        artifacts: status.artifacts,
    }
}

/// The Runtime (namespace, name) a Run uses: the one of its own namespace,
/// else the only one of that name elsewhere (the operator's system
/// namespace, which krt does not know by name).
fn runtime_of<'a>(run: &Run, runtimes: &'a [Runtime]) -> Option<&'a Runtime> {
    let ns = run.namespace();
    let named: Vec<&Runtime> = runtimes
        .iter()
        .filter(|rt| rt.name_any() == run.spec.runtime)
        .collect();
    named
        .iter()
        .find(|rt| rt.namespace() == ns)
        .or_else(|| (named.len() == 1).then(|| &named[0]))
        .copied()
}

/// The sum of the requests of `runs`, in thousandths, by resource.
fn requested_by(runs: &[&Run]) -> std::collections::BTreeMap<String, u64> {
    let mut sum = std::collections::BTreeMap::new();
    for r in runs {
        for (name, milli) in r.requests().unwrap_or_default().iter() {
            let e: &mut u64 = sum.entry(name.to_owned()).or_default();
            *e = e.saturating_add(milli);
        }
    }
    sum
}

/// A Runtime with the capacity its Runs hold: a function Run takes one
/// slot, a session Run a whole Pod; and the declared resources its ready
/// Pods have left.
fn runtime_info(rt: &Runtime, runtimes: &[Runtime], runs: &[Run]) -> RuntimeInfo {
    let per_pod = u64::from(rt.spec.capacity.runs);
    let holding: Vec<&Run> = runs
        .iter()
        .filter(|r| {
            r.status
                .as_ref()
                .and_then(|s| s.phase)
                .is_some_and(Phase::holds_capacity)
        })
        .filter(|r| {
            runtime_of(r, runtimes).is_some_and(|x| {
                x.uid() == rt.uid()
                    && x.name_any() == rt.name_any()
                    && x.namespace() == rt.namespace()
            })
        })
        .collect();
    let used = holding
        .iter()
        .map(|r| {
            if r.spec.mode.session.is_some() {
                per_pod
            } else {
                1
            }
        })
        .sum();
    let status = rt.status.clone().unwrap_or_default();
    let pods = u64::try_from(status.ready_replicas).unwrap_or(0);
    let mut requested = requested_by(&holding);
    let free = rt
        .spec
        .capacity
        .resources
        .iter()
        .filter_map(|(name, q)| {
            let total = quantity::milli(&q.0).ok()?.saturating_mul(pods);
            let left = total.saturating_sub(requested.remove(name).unwrap_or(0));
            Some((name.clone(), quantity::display(name, left)))
        })
        .collect();
    RuntimeInfo {
        name: rt.name_any(),
        namespace: rt.namespace().unwrap_or_default(),
        desired_replicas: i64::from(status.desired_replicas),
        ready_replicas: i64::from(status.ready_replicas),
        capacity_per_pod: per_pod,
        runs_in_use: used,
        free,
        image: rt.spec.image.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> T {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn a_runtime_shows_the_slots_and_resources_its_runs_hold_and_what_is_left() {
        let rt: Runtime = object(serde_json::json!({
            "apiVersion": "kruntimes.io/v1alpha1", "kind": "Runtime",
            "metadata": {"name": "python", "namespace": "sys", "uid": "rt"},
            "spec": {"image": "img", "capacity": {"runs": 4, "resources": {"cpu": "2", "memory": "4Gi"}}},
            "status": {"desiredReplicas": 3, "readyReplicas": 2},
        }));
        let run = |name: &str, mode: serde_json::Value, cpu: &str, phase: &str| -> Run {
            object(serde_json::json!({
                "apiVersion": "kruntimes.io/v1alpha1", "kind": "Run",
                "metadata": {"name": name, "namespace": "sys"},
                "spec": {"runtime": "python", "mode": mode,
                         "resources": {"requests": {"cpu": cpu, "memory": "512Mi"}}},
                "status": {"phase": phase},
            }))
        };
        let f = serde_json::json!({"function": {"handler": "m.f"}});
        let runs = [
            run("a", f.clone(), "500m", "Ready"),
            run("b", serde_json::json!({"session": {}}), "1", "Running"),
            run("done", f.clone(), "1", "Succeeded"),
            run("waiting", f, "1", "Pending"),
        ];
        let info = runtime_info(&rt, std::slice::from_ref(&rt), &runs);
        assert_eq!((info.desired_replicas, info.ready_replicas), (3, 2));
        assert_eq!(info.runs_in_use, 1 + 4, "a slot, and a session's whole Pod");
        assert_eq!(info.free.get("cpu").map(String::as_str), Some("2500m"));
        assert_eq!(info.free.get("memory").map(String::as_str), Some("7Gi"));
    }
}
