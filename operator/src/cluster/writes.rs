//! The operator's writes of Run status, each carrying the `resourceVersion`
//! its decision was made on, and the wait until its own cache reflects them.

use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kruntimes_api::{Run, RunStatus};
use kruntimes_support::kube::merge_diff;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::reflector::{self, Store};
use kube::{Resource, ResourceExt};
use serde_json::json;

use crate::error::{Doing as _, Result};

/// Writes `status` as a JSON merge patch of `runs/status`, guarded by the
/// Run's `resourceVersion`: a decision made on a stale object conflicts.
/// A terminal phase gets its `completionTime`.
pub(super) async fn patch_status(
    client: &kube::Client,
    run: &Run,
    status: &RunStatus,
) -> Result<Run> {
    let mut status = status.clone();
    if status.phase.is_some_and(|p| p.is_terminal()) && status.completion_time.is_none() {
        status.completion_time = Some(Time(k8s_openapi::jiff::Timestamp::now()));
    }
    status.observed_generation = run.meta().generation;
    let old = serde_json::to_value(run.status.clone().unwrap_or_default())?;
    let new = serde_json::to_value(&status)?;
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
        .doing(|| format!("patch the status of {}", run.name_any()))
}

/// Deletes the Run of UID `uid` (a precondition: a new Run of the same
/// name is never deleted in its place). Its owner then releases it (result,
/// log) and takes its finalizer off. Returns the Run as the deletion left
/// it, or `None` when it is gone already.
pub(super) async fn delete_expired(
    client: &kube::Client,
    run: &Run,
    uid: &str,
) -> Result<Option<Run>> {
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some(uid.to_owned()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    let deleted = Api::<Run>::namespaced(client.clone(), &run.namespace().unwrap_or_default())
        .delete(&run.name_any(), &params)
        .await;
    match deleted {
        Ok(either) => Ok(either.left()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
        Err(e) => Err(e).doing(|| format!("delete {} (ttlSecondsAfterFinished)", run.name_any())),
    }
}

/// Waits (bounded by 5 s) until `runs` holds every object in `written` at
/// its written version or a newer one: the next pass must see this pass's
/// own writes, or it would decide capacity on a cache that lags an
/// assignment and overcommit a Pod.
pub(super) async fn catch_up(runs: &Store<Run>, written: &[Run]) {
    let deadline = Instant::now() + Duration::from_secs(5);
    for run in written {
        let key = reflector::ObjectRef::<Run>::new(&run.name_any())
            .within(&run.namespace().unwrap_or_default());
        let want = run.resource_version().unwrap_or_default();
        loop {
            let seen = match runs.get(&key) {
                None => true, // deleted meanwhile
                Some(cur) => at_least(&cur.resource_version().unwrap_or_default(), &want),
            };
            if seen {
                break;
            }
            if Instant::now() > deadline {
                tracing::warn!("runs cache lags the operator's own writes by more than 5 s");
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
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
}
