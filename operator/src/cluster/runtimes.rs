//! Runtime pools: each Runtime's Deployment and headless Service kept
//! applied (server-side apply, field manager [`super::FIELD_MANAGER`]) at
//! the size the pool needs ([`Sizes`]: `spec.replicas`, or what
//! `spec.pool` asks for), and its status (desired and ready replicas) kept
//! current.

use std::collections::{BTreeSet, HashMap};
use std::time::Instant;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, Service};
use kruntimes_api::{Runtime, RuntimeStatus};
use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde_json::json;

use kruntimes_core::pool::{self, Demand};

use super::decide::PodInfo;
use super::views::{DELETE_FIRST, DELETION_COST};
use super::workloads::{self, PodSettings};
use crate::error::Doing as _;

/// Each pool's [`pool::Sizer`]. In memory: a new operator starts from the
/// size last recorded in the Runtime's status and refills within one pass.
#[derive(Debug, Default)]
pub(super) struct Sizes {
    pools: HashMap<String, pool::Sizer>,
}

impl Sizes {
    /// The replicas `rt` should have now, given its pool's `demand`.
    pub(super) fn desired(&mut self, rt: &Runtime, demand: Option<&Demand>, now: Instant) -> u32 {
        let key = format!("{}/{}", rt.namespace().unwrap_or_default(), rt.name_any());
        let spec = rt.spec.pool_spec();
        let demand = demand.copied().unwrap_or_default();
        // A new leader (or a restarted operator) goes on from what was last
        // asked for, so a surplus still waits for its delay.
        let asked = rt
            .status
            .as_ref()
            .and_then(|st| u32::try_from(st.desired_replicas).ok())
            .unwrap_or(spec.min_replicas);
        let sizer = self
            .pools
            .entry(key)
            .or_insert_with(|| pool::Sizer::new(asked));
        if let Some(r) = sizer.step(&spec, &demand, rt.spec.capacity.runs, now) {
            tracing::info!(runtime = %rt.name_any(), from = r.from, to = r.to, busy = demand.busy, idle = demand.idle, "resizing the runtime pool");
        }
        sizer.asked()
    }

    /// Forgets the Runtimes not in `keep`.
    pub(super) fn retain(&mut self, keep: &[String]) {
        self.pools.retain(|k, _| keep.contains(k));
    }
}

/// Applies `rt`'s Deployment (at `replicas`) and Service when their
/// rendered content changed since the last apply recorded in `applied`,
/// then writes its status.
pub(super) async fn reconcile(
    client: &kube::Client,
    applied: &mut HashMap<String, String>,
    settings: &PodSettings,
    rt: &Runtime,
    replicas: u32,
    pods: &[PodInfo],
    busy: &BTreeSet<String>,
) -> crate::Result<()> {
    let ns = rt.namespace().unwrap_or_default();
    let key = format!("{ns}/{}", rt.name_any());
    let mine: Vec<&PodInfo> = pods
        .iter()
        .filter(|p| p.namespace == ns && p.runtime == rt.name_any() && !p.terminating)
        .collect();
    if (replicas as usize) < mine.len() {
        // Shrinking: idle Pods go first, never one that holds Runs.
        for p in mine
            .iter()
            .filter(|p| !p.delete_first && !busy.contains(&p.uid))
        {
            let patch = json!({"metadata": {"annotations": {DELETION_COST: DELETE_FIRST}}});
            Api::<Pod>::namespaced(client.clone(), &ns)
                .patch(&p.name, &PatchParams::default(), &Patch::Merge(patch))
                .await
                .doing(|| format!("mark Pod {ns}/{} to go first", p.name))?;
        }
    }
    let mut deployment = workloads::deployment(rt, settings);
    if let Some(spec) = deployment.spec.as_mut() {
        spec.replicas = Some(i32::try_from(replicas).unwrap_or(i32::MAX));
    }
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
        desired_replicas: i32::try_from(replicas).unwrap_or(i32::MAX),
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
