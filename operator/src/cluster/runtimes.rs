//! Runtime pools: each Runtime's Deployment and headless Service kept
//! applied (server-side apply, field manager [`super::FIELD_MANAGER`]) and
//! its status (desired and ready replicas) kept current.

use std::collections::HashMap;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Service;
use kruntimes_api::{Runtime, RuntimeStatus};
use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde_json::json;

use super::decide::PodInfo;
use super::workloads::{self, PodSettings};
use crate::error::Doing as _;

/// Applies `rt`'s Deployment and Service when their rendered content changed
/// since the last apply recorded in `applied`, then writes its status.
pub(super) async fn reconcile(
    client: &kube::Client,
    applied: &mut HashMap<String, String>,
    settings: &PodSettings,
    rt: &Runtime,
    pods: &[PodInfo],
) -> crate::Result<()> {
    let ns = rt.namespace().unwrap_or_default();
    let key = format!("{ns}/{}", rt.name_any());
    let deployment = workloads::deployment(rt, settings);
    let service = workloads::service(rt);
    let fingerprint = serde_json::to_string(&(&deployment, &service))?;
    if applied.get(&key) != Some(&fingerprint) {
        let pp = PatchParams::apply(super::FIELD_MANAGER).force();
        let name = deployment.metadata.name.clone().unwrap_or_default();
        let mut d = serde_json::to_value(&deployment)?;
        d["apiVersion"] = json!("apps/v1");
        d["kind"] = json!("Deployment");
        Api::<Deployment>::namespaced(client.clone(), &ns)
            .patch(&name, &pp, &Patch::Apply(d))
            .await
            .doing(|| format!("apply Deployment {ns}/{name}"))?;
        let mut s = serde_json::to_value(&service)?;
        s["apiVersion"] = json!("v1");
        s["kind"] = json!("Service");
        Api::<Service>::namespaced(client.clone(), &ns)
            .patch(&name, &pp, &Patch::Apply(s))
            .await
            .doing(|| format!("apply Service {ns}/{name}"))?;
        tracing::info!(runtime = %key, "runtime deployment and service applied");
        applied.insert(key, fingerprint);
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
        Api::<Runtime>::namespaced(client.clone(), &ns)
            .patch_status(
                &rt.name_any(),
                &PatchParams::default(),
                &Patch::Merge(json!({ "status": status })),
            )
            .await
            .doing(|| format!("patch the status of Runtime {ns}/{}", rt.name_any()))?;
    }
    Ok(())
}
