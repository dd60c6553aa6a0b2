//! What the embedded control plane shows of its state: each Run's status
//! (`runs.json`, `krt runs`) and the ownership table it serves to gateways.

use kruntimes_api::{Endpoint, ModeKind, Phase, table};
use kruntimes_proto::ownership::v1 as own;
use serde::Serialize;

use super::Controller;

/// `status` of a Run as shown by `krt runs` and written to `runs.json`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunStatus {
    /// Name.
    pub name: String,
    /// Namespace.
    pub namespace: String,
    /// Runtime.
    pub runtime: String,
    /// UID.
    pub uid: String,
    /// Mode (`function`, `session`, `task`, or `invalid`).
    pub mode: String,
    /// Phase.
    pub phase: Phase,
    /// Reason.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// Message.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// Owner Pod name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub assigned_pod: Option<String>,
    /// Owner Pod UID.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub assigned_pod_uid: Option<String>,
    /// How many times the Run was assigned to a Pod.
    pub attempt: u64,
    /// Invoke URL (function Runs) or session URL (session Runs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// How its task ended (task Runs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task: Option<kruntimes_api::TaskStatus>,
    /// What it left in its artifacts directory.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub artifacts: Vec<kruntimes_api::ArtifactRef>,
}

/// A runtimed instance as `runs.json` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodStatus {
    /// Instance name.
    pub name: String,
    /// Its dataplane address.
    pub address: String,
    /// Runs it may own.
    pub capacity: u32,
    /// Runs holding capacity on it.
    pub used: u32,
    /// Its ownership watch is connected.
    pub connected: bool,
    /// Chosen to go (idle, beyond the pool's size): takes no new Run.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub retiring: bool,
    /// What its resources (`krt up --resources`) still offer beside the
    /// requests of the Runs it holds, in thousandths (none when it declares
    /// none).
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub free_milli: std::collections::BTreeMap<String, u64>,
}

/// The pool of runtimed instances, when it follows demand.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolStatus {
    /// Instances it should have now (starting ones included).
    pub desired: u32,
    /// Never fewer.
    pub min_instances: u32,
    /// Free instances kept for new Runs.
    pub min_idle: u32,
    /// Never more.
    pub max_instances: u32,
}

impl Controller {
    /// Every runtimed instance with the capacity its Runs hold.
    pub fn pod_status(&self) -> Vec<PodStatus> {
        self.pods
            .values()
            .map(|p| {
                let used = self.used(p);
                PodStatus {
                    name: p.cfg.name.clone(),
                    address: p.cfg.address.clone(),
                    capacity: p.cfg.capacity,
                    used,
                    connected: p.connected,
                    retiring: p.retiring,
                    free_milli: self.free(p),
                }
            })
            .collect()
    }

    /// The pool's size and rules, when it follows demand.
    pub fn pool_status(&self) -> Option<PoolStatus> {
        self.pool_size().map(|(desired, pool)| PoolStatus {
            desired,
            min_instances: pool.spec.min_replicas,
            min_idle: pool.spec.min_idle,
            max_instances: pool.spec.max_replicas,
        })
    }

    /// Status of every Run; `gateway_url` forms the endpoint.
    pub fn status(&self, gateway_url: &str) -> Vec<RunStatus> {
        let mut runs: Vec<_> = self.runs().collect();
        runs.sort_by_key(|r| r.run.key());
        runs.into_iter()
            .map(|r| RunStatus {
                name: r.run.name_str().to_owned(),
                namespace: r.run.namespace_or_default().to_owned(),
                runtime: r.run.spec.runtime.clone(),
                uid: r.uid().to_owned(),
                mode: r.mode.as_ref().map_or("invalid", |m| m.as_str()).to_owned(),
                phase: r.life.phase,
                reason: r.life.reason.map(|r| r.as_str()).unwrap_or("").to_owned(),
                message: r.message.clone(),
                assigned_pod: r.owner.as_ref().map(|o| o.pod.clone()),
                assigned_pod_uid: r.owner.as_ref().map(|o| o.pod_uid.clone()),
                attempt: r.life.attempt,
                endpoint: r
                    .mode
                    .is_ok()
                    .then(|| Endpoint::new(gateway_url, &r.run, None).url),
                task: r.task.clone(),
                artifacts: r.artifacts.clone(),
            })
            .collect()
    }

    /// What artifact maintenance needs of every Run that exists, by UID:
    /// its namespace and when it ended.
    pub fn artifact_view(&self) -> super::super::artifacts::RunsView {
        self.runs()
            .map(|r| {
                (
                    r.uid().to_owned(),
                    (r.run.namespace_or_default().to_owned(), r.finished_at),
                )
            })
            .collect()
    }

    /// The control plane's ownership table: every Run that is not being
    /// deleted, with its assignment (no owner while pending). Ended Runs
    /// stay, as `FAILED` with their phase and message, so their URL answers
    /// `RunEnded`/`RunFailed` until they are deleted, and the gateway can
    /// read their artifacts from a runtimed of their Runtime.
    pub fn ownership_entries(&self) -> Vec<own::OwnershipEntry> {
        self.runs()
            .filter(|r| r.mode.is_ok())
            .map(|r| {
                let owner = r.owner.as_ref().and_then(|o| {
                    self.pods.get(&o.pod).map(|p| own::Owner {
                        pod_name: o.pod.clone(),
                        pod_uid: o.pod_uid.clone(),
                        dataplane_address: p.cfg.address.clone(),
                    })
                });
                let mode = r.mode.clone().unwrap_or(ModeKind::Function);
                table::control_entry(
                    &table::Published {
                        namespace: r.run.namespace_or_default(),
                        name: r.run.name_str(),
                        uid: r.uid(),
                        runtime: &r.run.spec.runtime,
                        mode,
                        life: &r.life,
                        reason: r.life.reason.map(|r| r.as_str()).unwrap_or(""),
                        message: &r.message,
                    },
                    owner,
                )
            })
            .collect()
    }
}
