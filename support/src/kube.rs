//! The Kubernetes client plumbing of the operator and runtimed: client
//! construction, reflector caches that wake a reconcile loop, the cleanup
//! finalizer patch and the JSON merge-patch diff of a status.

use std::sync::Arc;

use futures::StreamExt;
use kruntimes_api::{FINALIZER, Run};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};

/// Why no Kubernetes client could be made.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The kubeconfig named could not be read or used.
    #[error("kubeconfig {}: {source}", path.display())]
    Kubeconfig {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        source: kube::config::KubeconfigError,
    },
    /// No kubeconfig named, and none found (nor an in-cluster
    /// configuration).
    #[error("no kubeconfig and no in-cluster configuration: {0}")]
    Infer(#[from] kube::config::InferConfigError),
    /// The configuration does not make a client.
    #[error("kubernetes client: {0}")]
    Client(#[from] kube::Error),
}

/// A client from `kubeconfig`, or else `KUBECONFIG` / `~/.kube/config`, or
/// else the in-cluster configuration.
pub async fn client(kubeconfig: Option<&std::path::Path>) -> Result<kube::Client, ClientError> {
    let config = match kubeconfig {
        Some(path) => {
            let bad = |source| ClientError::Kubeconfig {
                path: path.to_owned(),
                source,
            };
            let kc = kube::config::Kubeconfig::read_from(path).map_err(bad)?;
            kube::Config::from_custom_kubeconfig(kc, &Default::default())
                .await
                .map_err(bad)?
        }
        None => kube::Config::infer().await?,
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
    K: Resource<DynamicType = ()>
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

/// Adds or removes the cleanup finalizer, guarded by the Run's
/// `resourceVersion`; returns the updated Run.
pub async fn set_finalizer(client: &kube::Client, run: &Run, add: bool) -> kube::Result<Run> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
