//! The Kubernetes API of kruntimes (`kruntimes.io/v1alpha1`): the `Run`
//! resource (its spec is [`RunSpec`](crate::model::RunSpec), shared with the
//! embedded store) and the `Runtime` resource, with their status types and
//! the CRD manifests the chart ships (`crdgen`).

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, CustomResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use crate::model::Run;

/// Finalizer that makes the owner unregister a Run before it is deleted.
pub const FINALIZER: &str = "kruntimes.io/function-cleanup";

/// Longest `status.endpoint.caBundle` (base64).
pub const MAX_CA_BUNDLE_BYTES: usize = 16384;

/// Longest `status.message` in bytes.
pub const MAX_MESSAGE_BYTES: usize = 1024;

impl Run {
    /// The Run as a manifest (the embedded store's shape): validation,
    /// digest and registration requests are defined on it.
    pub fn manifest(&self) -> crate::model::RunManifest {
        crate::model::RunManifest {
            api_version: crate::model::API_VERSION.into(),
            kind: "Run".into(),
            metadata: crate::model::ObjectMeta {
                name: self.metadata.name.clone().unwrap_or_default(),
                namespace: self.metadata.namespace.clone(),
            },
            spec: self.spec.clone(),
        }
    }
}

/// `status` of a Run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunStatus {
    /// Lifecycle phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<RunPhase>,
    /// Machine-readable reason of the phase (for example `IdleTimeout`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 128))]
    pub reason: Option<String>,
    /// Human-readable, bounded message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub message: Option<String>,
    /// Name of the Pod that owns the Run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub assigned_pod: Option<String>,
    /// UID of that Pod at assignment: a new Pod of the same name is not the owner.
    #[serde(
        default,
        rename = "assignedPodUID",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(length(max = 64))]
    pub assigned_pod_uid: Option<String>,
    /// Registration attempt; increases when the Run moves to another Pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<i64>,
    /// Where to invoke the Run (function Runs) or reach it (session Runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<Endpoint>,
    /// Conditions (`Ready`, written by the owner).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8))]
    pub conditions: Vec<Condition>,
    /// When the Run started on its Pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    /// When the Run reached a terminal phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// `status.phase`: the lifecycle's phases, as the API shows them.
pub use crate::lifecycle::Phase as RunPhase;

/// `message` cut to [`MAX_MESSAGE_BYTES`] on a character boundary; `None`
/// when empty.
pub fn bounded_message(message: &str) -> Option<String> {
    if message.is_empty() {
        return None;
    }
    let mut cut = message.len().min(MAX_MESSAGE_BYTES);
    while !message.is_char_boundary(cut) {
        cut -= 1;
    }
    Some(message[..cut].to_owned())
}

/// `status.endpoint`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Endpoint {
    /// `HTTPS` or `HTTP`.
    pub protocol: String,
    /// The public URL of the Run on the gateway.
    #[schemars(length(max = 2048))]
    pub url: String,
    /// Base64 PEM bundle of the CA that signs the gateway's certificate
    /// (public; read from a ConfigMap, never from a Secret).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 16384))]
    pub ca_bundle: Option<String>,
}

/// `spec` of a Runtime: a pool of warm Pods.
#[derive(CustomResource, Debug, Clone, PartialEq, Serialize, Deserialize, Default, JsonSchema)]
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

/// Every CRD of the project, in file order.
pub fn crds() -> Vec<(&'static str, CustomResourceDefinition)> {
    vec![
        ("kruntimes.io_runs.yaml", Run::crd()),
        ("kruntimes.io_runtimes.yaml", Runtime::crd()),
    ]
}

/// A CRD as the YAML committed under `charts/kruntimes/crds/`.
pub fn crd_yaml(crd: &CustomResourceDefinition) -> String {
    let body = serde_yaml::to_string(crd).expect("a CRD serializes to YAML");
    format!("# Generated by `cargo run -p kruntimes-operator --bin crdgen`; do not edit.\n{body}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crds_carry_the_cel_rules_and_bounds() {
        let run = serde_json::to_string(&Run::crd()).unwrap();
        for needle in [
            "exactly one of task, function, session",
            "spec.runtime is immutable",
            "spec.mode is immutable",
            "spec.termination can only be set once",
            "\"maxLength\":2048",
            "\"maxLength\":16384",
            "assignedPodUID",
        ] {
            assert!(run.contains(needle), "Run CRD lacks {needle}");
        }
        let runtime = serde_json::to_string(&Runtime::crd()).unwrap();
        assert!(runtime.contains("\"replicas\""));
    }

    /// The committed YAML must be what `crdgen` writes today.
    #[test]
    fn committed_crds_are_current() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../charts/kruntimes/crds");
        for (file, crd) in crds() {
            let committed = std::fs::read_to_string(dir.join(file)).unwrap_or_default();
            assert!(
                committed == crd_yaml(&crd),
                "charts/kruntimes/crds/{file} is stale: run `cargo run -p kruntimes-operator --bin crdgen`"
            );
        }
    }
}
