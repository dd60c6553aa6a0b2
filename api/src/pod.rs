//! What every component reads of a Runtime Pod the same way.

use k8s_openapi::api::core::v1::Pod;
use kube::Resource as _;

/// Whether a Pod serves: its condition `Ready` is `True` and it is not
/// being deleted.
pub fn is_ready(pod: &Pod) -> bool {
    pod.meta().deletion_timestamp.is_none()
        && pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(ready: Option<&str>, deleting: bool) -> Pod {
        let mut v = serde_json::json!({"metadata": {"name": "p"}});
        if deleting {
            v["metadata"]["deletionTimestamp"] = "2026-12-07T00:00:00Z".into();
        }
        if let Some(status) = ready {
            v["status"] = serde_json::json!({"conditions": [
                {"type": "ContainersReady", "status": "True"},
                {"type": "Ready", "status": status},
            ]});
        }
        serde_json::from_value(v).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn ready_is_the_ready_condition_of_a_pod_not_being_deleted() {
        assert!(is_ready(&pod(Some("True"), false)));
        assert!(!is_ready(&pod(Some("False"), false)));
        assert!(!is_ready(&pod(Some("Unknown"), false)));
        assert!(!is_ready(&pod(None, false)), "no status yet");
        assert!(!is_ready(&pod(Some("True"), true)), "terminating");
    }
}
