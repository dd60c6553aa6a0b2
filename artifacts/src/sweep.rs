//! Carrying out a sweep's plan ([`crate::retention::Sweep::plan`]), the
//! same on both control planes: each Run's artifacts deleted in turn, each
//! deletion bounded, every outcome logged and returned so the caller can
//! count it. A failure is left for the next sweep, which plans it again.

use std::time::Duration;

use crate::Store;
use crate::retention::Why;

/// How one planned deletion went.
#[derive(Debug)]
pub struct Outcome {
    /// The Run's namespace.
    pub namespace: String,
    /// The Run's UID.
    pub uid: String,
    /// Why it was planned.
    pub why: Why,
    /// Objects deleted, or why not.
    pub result: Result<usize, String>,
}

/// Deletes the artifacts of every Run in `plan`, each within `each`.
pub async fn carry_out(
    store: &Store,
    plan: Vec<(String, String, Why)>,
    each: Duration,
) -> Vec<Outcome> {
    let mut out = Vec::with_capacity(plan.len());
    for (namespace, uid, why) in plan {
        let result = match tokio::time::timeout(each, store.delete_run(&namespace, &uid)).await {
            Ok(Ok(objects)) => {
                tracing::info!(%namespace, run_uid = %uid, reason = why.as_str(), objects, "artifacts deleted");
                Ok(objects)
            }
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("no answer in {} s", each.as_secs())),
        };
        if let Err(e) = &result {
            tracing::warn!(%namespace, run_uid = %uid, reason = why.as_str(), error = %e, "artifacts not deleted; trying again at the next sweep");
        }
        out.push(Outcome {
            namespace,
            uid,
            why,
            result,
        });
    }
    out
}
