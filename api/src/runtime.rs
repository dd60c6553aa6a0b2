//! The `Runtime` resource: a pool of warm Runtime Pods that Runs are
//! scheduled onto.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `spec` of a Runtime: a pool of warm Pods.
#[derive(
    kube::CustomResource, Debug, Clone, PartialEq, Serialize, Deserialize, Default, JsonSchema,
)]
#[kube(
    group = "kruntimes.io",
    version = "v1alpha1",
    kind = "Runtime",
    namespaced,
    status = "RuntimeStatus",
    shortname = "krt",
    category = "kruntimes",
    printcolumn = r#"{"name":"Desired","type":"integer","jsonPath":".status.desiredReplicas"}"#,
    printcolumn = r#"{"name":"Ready","type":"integer","jsonPath":".status.readyReplicas"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeSpec {
    /// Runtime Pods kept warm.
    #[serde(default = "one")]
    #[schemars(range(min = 0, max = 1000))]
    pub replicas: i32,
    /// Capacity of each Pod.
    #[serde(default)]
    pub capacity: Capacity,
    /// A pool that refills: the operator scales the Pods between
    /// `replicas` and `pool.maxReplicas` so that `pool.minIdle` stay free
    /// for new Runs. Without it the pool is `replicas` Pods, fixed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<Pool>,
    /// What serves the Runs of these Pods in the `runtime` container.
    /// `python` or `bash`: the built-in `runtime-server`, with that backend
    /// for every function Run; omitted: the built-in server, choosing by each
    /// Run's runtime name (`python`, `bash`); `custom`: the image's own
    /// entrypoint, serving the Runtime Server contract
    /// (`kruntimes.runtime.v1.RuntimeServer`) on the Unix socket named by
    /// `KRUNTIMES_RUNTIME_SOCKET`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend: Option<Backend>,
    /// Image of the Runtime Server (the `runtime` container, which runs user
    /// code): with `runtime-server` and the language runtime on `PATH` for
    /// the built-in backends, or a custom Runtime Server as its entrypoint.
    /// runtimed's own image is the operator's `--runtimed-image`.
    #[schemars(length(min = 1, max = 512))]
    pub image: String,
    /// Pod template overrides (labels, annotations, scheduling, volumes,
    /// further containers). A container named `runtime` is the base of the
    /// Runtime Server's (its resources, env, probes are kept); one named
    /// `runtimed` is replaced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<k8s_openapi::api::core::v1::PodTemplateSpec>,
    /// Where task Runs' artifacts go: what a task leaves in
    /// `$KRUNTIME_ARTIFACTS_DIR` is uploaded here when it ends (see
    /// docs/artifacts.md). Without it, Runs get no artifacts directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact_store: Option<crate::ArtifactStoreSpec>,
}

fn one() -> i32 {
    1
}

/// `spec.capacity`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Capacity {
    /// Runs one Pod may own at once (a session Run needs a whole Pod).
    #[schemars(range(min = 1, max = 1024))]
    pub runs: u32,
    /// What one Pod offers its Runs' `spec.resources.requests` (`cpu`,
    /// `memory`, `ephemeral-storage`, extended names). A standard name left
    /// out is not accounted; an extended name left out cannot be requested.
    /// The `runtime` container's limits are derived from it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(length(max = 16))]
    pub resources: BTreeMap<String, Quantity>,
}

impl Default for Capacity {
    fn default() -> Self {
        Self {
            runs: 8,
            resources: BTreeMap::new(),
        }
    }
}

impl Capacity {
    /// What the scheduler accounts: run slots and the resources, or the
    /// first invalid quantity.
    pub fn scheduler(&self) -> Result<kruntimes_core::scheduler::Capacity, String> {
        Ok(kruntimes_core::scheduler::Capacity {
            runs: self.runs,
            resources: crate::quantity::resources(&self.resources, "spec.capacity.resources")?,
        })
    }
}

/// `spec.pool`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Pool {
    /// Pods kept free of Runs for new ones (a session needs a whole Pod).
    #[serde(default)]
    #[schemars(range(min = 0, max = 100))]
    pub min_idle: u32,
    /// Never more Pods than this (`replicas` when lower).
    #[schemars(range(min = 0, max = 1000))]
    pub max_replicas: u32,
    /// How long the pool must have had more Pods than it needs before it
    /// shrinks, in seconds (default 300).
    #[serde(default = "five_minutes")]
    #[schemars(range(min = 0, max = 86400))]
    pub scale_down_delay_seconds: u32,
}

fn five_minutes() -> u32 {
    300
}

impl RuntimeSpec {
    /// The pool's sizing rules: `replicas` fixed without `spec.pool`.
    pub fn pool_spec(&self) -> kruntimes_core::pool::PoolSpec {
        let floor = u32::try_from(self.replicas).unwrap_or(0);
        match &self.pool {
            Some(p) => kruntimes_core::pool::PoolSpec {
                min_replicas: floor,
                min_idle: p.min_idle,
                max_replicas: p.max_replicas.max(floor),
                scale_down_delay: std::time::Duration::from_secs(p.scale_down_delay_seconds.into()),
            },
            None => kruntimes_core::pool::PoolSpec {
                min_replicas: floor,
                min_idle: 0,
                max_replicas: floor,
                scale_down_delay: std::time::Duration::ZERO,
            },
        }
    }
}

/// `spec.backend`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// The built-in Runtime Server's persistent Python workers.
    Python,
    /// The built-in Runtime Server's Bash functions.
    Bash,
    /// The image's own Runtime Server, implementing
    /// `kruntimes.runtime.v1.RuntimeServer`.
    Custom,
}

/// `status` of a Runtime.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeStatus {
    /// Pods asked for.
    #[serde(default)]
    pub desired_replicas: i32,
    /// Pods ready to take Runs.
    #[serde(default)]
    pub ready_replicas: i32,
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}
