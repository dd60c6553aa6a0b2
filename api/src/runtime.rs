//! The `Runtime` resource: a pool of warm Runtime Pods that Runs are
//! scheduled onto.

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
    /// Built-in backend of runtimed (`python`, `bash`); when omitted,
    /// runtimed picks it from each Run's runtime name. `custom` is reserved
    /// for Runtime Servers, which runtimed does not yet hand Runs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend: Option<Backend>,
    /// Image of the runtime container (runtimed and the language runtime).
    #[schemars(length(min = 1, max = 512))]
    pub image: String,
    /// Pod template overrides (labels, annotations, resources, scheduling).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<k8s_openapi::api::core::v1::PodTemplateSpec>,
}

fn one() -> i32 {
    1
}

/// `spec.capacity`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Capacity {
    /// Runs one Pod may own at once (a session Run needs a whole Pod).
    #[schemars(range(min = 1, max = 1024))]
    pub runs: u32,
}

impl Default for Capacity {
    fn default() -> Self {
        Self { runs: 8 }
    }
}

/// `spec.backend`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// Persistent Python workers.
    Python,
    /// Bash functions.
    Bash,
    /// A Runtime Server implementing the gRPC contracts.
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
