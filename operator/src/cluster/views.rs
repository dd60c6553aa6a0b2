//! What the operator sees of cluster objects, as pure functions: views of
//! Runs, Runtime Pods and Runtimes for [`super::decide`], and the
//! ownership table it serves to gateways.

use std::collections::BTreeMap;
use std::time::SystemTime;

use k8s_openapi::api::core::v1::Pod;
pub use kruntimes_api::RUNTIME_LABEL;
use kruntimes_api::{FINALIZER, ModeKind, Run, Runtime, quantity, table};
use kruntimes_core::scheduler::Capacity;
use kruntimes_proto::ownership::v1 as own;
use kube::{Resource, ResourceExt};

use super::decide::{PodInfo, RunView, RuntimeInfo};
use super::workloads::DATAPLANE_PORT_NAME;

/// The operator's view of a Run.
pub fn run_view(run: &Run) -> RunView {
    let spec = &run.spec;
    let mode = run.validate();
    RunView {
        namespace: run.namespace().unwrap_or_default(),
        name: run.name_any(),
        uid: run.uid().unwrap_or_default(),
        labels: run.labels().clone(),
        runtime: spec.runtime.clone(),
        requests: run.requests().unwrap_or_default(),
        priority: run.priority(),
        affinity: spec.affinity.clone().unwrap_or_default(),
        mode,
        created: run
            .meta()
            .creation_timestamp
            .as_ref()
            .map(|t| SystemTime::from(t.0))
            .unwrap_or(SystemTime::UNIX_EPOCH),
        timeout: spec.timeout,
        max_retries: spec.retry_policy.max_retries,
        termination: spec.termination.as_ref().map(|t| t.mode),
        ttl_after_finished: spec.ttl_seconds_after_finished,
        deleting: run.meta().deletion_timestamp.is_some(),
        has_finalizer: run.finalizers().iter().any(|f| f == FINALIZER),
        status: run.status.clone().unwrap_or_default(),
    }
}

/// The dataplane port of a Pod: its container port named `dataplane`.
pub fn dataplane_port(pod: &Pod) -> Option<i32> {
    pod.spec.as_ref()?.containers.iter().find_map(|c| {
        c.ports
            .as_ref()?
            .iter()
            .find(|p| p.name.as_deref() == Some(DATAPLANE_PORT_NAME))
            .map(|p| p.container_port)
    })
}

/// The operator's view of a Runtime Pod (`None` for Pods of no Runtime).
pub fn pod_info(pod: &Pod) -> Option<PodInfo> {
    let runtime = pod.labels().get(RUNTIME_LABEL)?.clone();
    let status = pod.status.as_ref();
    let terminating = pod.meta().deletion_timestamp.is_some();
    let ready = kruntimes_api::pod::is_ready(pod);
    let address = match (status.and_then(|s| s.pod_ip.as_ref()), dataplane_port(pod)) {
        (Some(ip), Some(port)) if !ip.is_empty() => Some(if ip.contains(':') {
            format!("[{ip}]:{port}")
        } else {
            format!("{ip}:{port}")
        }),
        _ => None,
    };
    Some(PodInfo {
        namespace: pod.namespace().unwrap_or_default(),
        name: pod.name_any(),
        uid: pod.uid().unwrap_or_default(),
        runtime,
        ready,
        terminating,
        address,
        delete_first: pod
            .annotations()
            .get(DELETION_COST)
            .is_some_and(|c| c == DELETE_FIRST),
    })
}

/// The annotation a ReplicaSet ranks Pods by when it scales down.
pub const DELETION_COST: &str = "controller.kubernetes.io/pod-deletion-cost";
/// The cost the operator gives idle Pods of a shrinking pool (busy ones
/// keep the default 0), so they are removed first.
pub const DELETE_FIRST: &str = "-100";

/// The operator's view of a Runtime. A capacity quantity the API server let through but that does not parse
/// offers nothing: Runs requesting it wait with `InsufficientResources`.
pub fn runtime_info(rt: &Runtime) -> RuntimeInfo {
    let resources = rt
        .spec
        .capacity
        .resources
        .iter()
        .map(|(name, q)| {
            let milli = quantity::milli(&q.0).unwrap_or_else(|e| {
                tracing::warn!(runtime = %rt.name_any(), resource = %name, error = %e, "invalid capacity quantity counts as 0");
                0
            });
            (name.clone(), milli)
        })
        .collect();
    RuntimeInfo {
        namespace: rt.namespace().unwrap_or_default(),
        name: rt.name_any(),
        capacity: Capacity {
            runs: rt.spec.capacity.runs,
            resources,
        },
    }
}

/// `views` with each of `written` (the objects a pass's writes returned)
/// in place of the view of the same Run (by UID); a written Run that is
/// no longer in `views` stays out.
pub fn with_written(
    mut views: Vec<RunView>,
    written: impl IntoIterator<Item = RunView>,
) -> Vec<RunView> {
    let mut by_uid: BTreeMap<String, RunView> =
        written.into_iter().map(|v| (v.uid.clone(), v)).collect();
    for v in &mut views {
        if let Some(w) = by_uid.remove(&v.uid) {
            *v = w;
        }
    }
    views
}

/// The control plane's ownership table: every Run that is not being
/// deleted, with its assignment (owner absent while pending). Ended Runs
/// stay, as `FAILED` with their phase and message, so their URL answers
/// `RunEnded`/`RunFailed` until they are deleted, and the gateway can read
/// their artifacts from a runtimed of their Runtime.
pub fn ownership_entries(runs: &[RunView], pods: &[PodInfo]) -> Vec<own::OwnershipEntry> {
    let by_uid: BTreeMap<&str, &PodInfo> = pods.iter().map(|p| (p.uid.as_str(), p)).collect();
    runs.iter()
        .filter(|r| r.mode.is_ok())
        .filter(|r| !r.deleting)
        .map(|r| {
            let life = r.status.life();
            let owner = r
                .status
                .assigned_pod_uid
                .as_deref()
                .and_then(|uid| by_uid.get(uid))
                .and_then(|p| {
                    Some(own::Owner {
                        pod_name: p.name.clone(),
                        pod_uid: p.uid.clone(),
                        dataplane_address: p.address.clone()?,
                    })
                });
            let mode = r.mode.clone().unwrap_or(ModeKind::Function);
            table::control_entry(
                &table::Published {
                    namespace: &r.namespace,
                    name: &r.name,
                    uid: &r.uid,
                    runtime: &r.runtime,
                    mode,
                    life: &life,
                    reason: r.status.reason.as_deref().unwrap_or_default(),
                    message: r.status.message.as_deref().unwrap_or_default(),
                },
                owner,
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(name: &str, uid: &str, status: serde_json::Value) -> RunView {
        run_view(
            &serde_json::from_value(serde_json::json!({
                "apiVersion": "kruntimes.io/v1alpha1",
                "kind": "Run",
                "metadata": {"name": name, "namespace": "ns", "uid": uid},
                "spec": {
                    "runtime": "python",
                    "source": {"inlinePath": "main.py", "inline": "def f(x): return x"},
                    "mode": {"function": {"handler": "main.f"}},
                },
                "status": status,
            }))
            .unwrap(),
        )
    }

    #[test]
    fn a_pass_publishes_its_own_writes_not_the_views_from_before_them() {
        let pod = PodInfo {
            name: "python-0".into(),
            uid: "pod-uid".into(),
            runtime: "python".into(),
            namespace: "ns".into(),
            address: Some("10.0.0.1:7443".into()),
            ready: true,
            terminating: false,
            delete_first: false,
        };
        let before = vec![
            run("a", "uid-a", serde_json::json!({})),
            run("b", "uid-b", serde_json::json!({})),
        ];
        let scheduled = serde_json::json!({
            "phase": "Scheduled", "assignedPod": "python-0",
            "assignedPodUID": "pod-uid", "attempt": 1,
        });
        let after = with_written(
            before,
            [
                run("a", "uid-a", scheduled),
                // Deleted meanwhile: not brought back.
                run("gone", "uid-gone", serde_json::json!({})),
            ],
        );
        let entries = ownership_entries(&after, std::slice::from_ref(&pod));
        let uids: Vec<&str> = entries.iter().map(|e| e.run_uid.as_str()).collect();
        assert_eq!(uids, ["uid-a", "uid-b"]);
        assert_eq!(entries[0].phase, own::Phase::Scheduled as i32);
        assert_eq!(entries[0].attempt, 1);
        let owner = entries[0].owner.as_ref().expect("the assignment's owner");
        assert_eq!(owner.pod_uid, "pod-uid");
        assert_eq!(owner.dataplane_address, "10.0.0.1:7443");
        assert_eq!(entries[1].phase, own::Phase::Pending as i32);
        assert!(entries[1].owner.is_none());
    }

    #[test]
    fn pod_info_needs_ready_ip_and_dataplane_port() {
        let mut pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u", "labels": {RUNTIME_LABEL: "python"}},
            "spec": {"containers": [{"name": "runtimed", "ports": [{"name": "dataplane", "containerPort": 9000}]}]},
            "status": {"podIP": "127.0.0.1", "conditions": [{"type": "Ready", "status": "True"}]}
        }))
        .unwrap();
        let info = pod_info(&pod).unwrap();
        assert!(info.ready);
        assert_eq!(info.address.as_deref(), Some("127.0.0.1:9000"));
        pod.status.as_mut().unwrap().conditions.as_mut().unwrap()[0].status = "False".into();
        assert!(!pod_info(&pod).unwrap().ready);
        pod.metadata.labels = None;
        assert!(pod_info(&pod).is_none());
    }
}
