//! Runtime pools: each Runtime's Deployment and headless Service kept
//! applied (server-side apply, field manager [`super::FIELD_MANAGER`]) at
//! the size the pool needs ([`Sizes`]: `spec.replicas`, or what
//! `spec.pool` asks for), and its status (desired and ready replicas) kept
//! current; a Runtime with an artifact store keeps the artifacts finalizer
//! until its Pods have swept the store ([`artifacts_finalizer`]).

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, Service};
use kruntimes_api::{ARTIFACTS_FINALIZER, Runtime, RuntimeStatus};
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

/// How long a deleted Runtime waits for its Pods to sweep its artifacts
/// before it is let go anyway (a store that keeps failing never holds a
/// deletion for ever).
pub(super) const ARTIFACTS_CLEANUP_BOUND: Duration = Duration::from_secs(300);
/// How long a deleted Runtime without a ready Pod waits for one.
pub(super) const NO_SWEEPER_GRACE: Duration = Duration::from_secs(30);

/// What the artifacts finalizer of a Runtime needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Finalizer {
    /// Add it.
    Add,
    /// Remove it, for this reason; `given_up` when the artifacts may be
    /// left behind.
    Remove {
        /// For the log.
        why: &'static str,
        /// The store was not swept.
        given_up: bool,
    },
    /// Nothing to do.
    Keep,
}

/// The artifacts finalizer of a Runtime with (`has_store`) or without an
/// artifact store, holding it or not (`has`), deleted `deleting_for` ago,
/// with `ready` Pods (one of which sweeps the store and removes the
/// finalizer itself).
pub(super) fn artifacts_finalizer(
    has_store: bool,
    has: bool,
    deleting_for: Option<Duration>,
    ready: usize,
) -> Finalizer {
    const NO_STORE: Finalizer = Finalizer::Remove {
        why: "the runtime has no artifact store",
        given_up: false,
    };
    match deleting_for {
        None if has_store && !has => Finalizer::Add,
        _ if !has => Finalizer::Keep,
        _ if !has_store => NO_STORE,
        None => Finalizer::Keep,
        Some(d) if d >= ARTIFACTS_CLEANUP_BOUND => Finalizer::Remove {
            why: "its pods did not sweep the artifact store in time",
            given_up: true,
        },
        Some(d) if ready == 0 && d >= NO_SWEEPER_GRACE => Finalizer::Remove {
            why: "no ready pod is left to sweep the artifact store",
            given_up: true,
        },
        Some(_) => Finalizer::Keep,
    }
}

/// Adds or removes `rt`'s artifacts finalizer as [`artifacts_finalizer`]
/// says.
pub(super) async fn finalize(
    client: &kube::Client,
    rt: &Runtime,
    pods: &[PodInfo],
) -> crate::Result<()> {
    let ns = rt.namespace().unwrap_or_default();
    let deleting_for = rt.meta().deletion_timestamp.as_ref().map(|t| {
        let ms = k8s_openapi::jiff::Timestamp::now()
            .duration_since(t.0)
            .as_millis();
        Duration::from_millis(u64::try_from(ms).unwrap_or(0))
    });
    let ready = pods
        .iter()
        .filter(|p| p.namespace == ns && p.runtime == rt.name_any() && p.ready)
        .count();
    let has = rt.finalizers().iter().any(|f| f == ARTIFACTS_FINALIZER);
    let add = match artifacts_finalizer(rt.spec.artifact_store.is_some(), has, deleting_for, ready)
    {
        Finalizer::Keep => return Ok(()),
        Finalizer::Add => true,
        Finalizer::Remove { why, given_up } => {
            if given_up {
                tracing::warn!(runtime = %rt.name_any(), %ns, why, "letting the deleted runtime go; its runs' artifacts may be left in the store");
                if let Some(m) = super::metrics::get() {
                    m.runtime_artifacts_given_up.inc();
                }
            }
            false
        }
    };
    kruntimes_support::kube::set_finalizer_of(client, rt, ARTIFACTS_FINALIZER, add)
        .await
        .doing(|| {
            format!(
                "set the artifacts finalizer of Runtime {ns}/{}",
                rt.name_any()
            )
        })?;
    Ok(())
}

#[cfg(test)]
mod finalizer_tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn a_runtime_with_a_store_holds_the_finalizer_until_it_is_deleted() {
        assert_eq!(artifacts_finalizer(true, false, None, 1), Finalizer::Add);
        assert_eq!(artifacts_finalizer(true, true, None, 1), Finalizer::Keep);
        assert_eq!(artifacts_finalizer(false, false, None, 1), Finalizer::Keep);
        // The store taken off the spec: nothing to sweep.
        assert_eq!(
            artifacts_finalizer(false, true, None, 1),
            Finalizer::Remove {
                why: "the runtime has no artifact store",
                given_up: false
            }
        );
        // Deleted before the finalizer was added: never added then.
        assert_eq!(
            artifacts_finalizer(true, false, Some(S), 1),
            Finalizer::Keep
        );
    }

    #[test]
    fn a_deleted_runtime_waits_for_its_pods_within_bounds() {
        // A ready Pod sweeps and removes the finalizer itself.
        assert_eq!(artifacts_finalizer(true, true, Some(S), 1), Finalizer::Keep);
        assert_eq!(
            artifacts_finalizer(true, true, Some(ARTIFACTS_CLEANUP_BOUND - S), 2),
            Finalizer::Keep
        );
        assert!(matches!(
            artifacts_finalizer(true, true, Some(ARTIFACTS_CLEANUP_BOUND), 1),
            Finalizer::Remove { given_up: true, .. }
        ));
        // No ready Pod: a moment for one to come, then let go.
        assert_eq!(
            artifacts_finalizer(true, true, Some(NO_SWEEPER_GRACE - S), 0),
            Finalizer::Keep
        );
        assert!(matches!(
            artifacts_finalizer(true, true, Some(NO_SWEEPER_GRACE), 0),
            Finalizer::Remove { given_up: true, .. }
        ));
        assert!(matches!(
            artifacts_finalizer(false, true, Some(S), 1),
            Finalizer::Remove {
                given_up: false,
                ..
            }
        ));
    }
}
