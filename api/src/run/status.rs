//! `status` of a Run, written by the control plane and the Run's owner.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use kruntimes_core::lifecycle::{Life, Phase, Reason};

use super::Run;

/// `status` of a Run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunStatus {
    /// Lifecycle phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
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
    /// Registration attempt: how many times the Run was assigned to a Pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<i64>,
    /// Where to invoke the Run (function Runs) or reach it (session Runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<Endpoint>,
    /// Conditions (`Ready`, written by the owner).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8))]
    pub conditions: Vec<Condition>,
    /// When the Run was assigned to its current Pod (written with the
    /// assignment): its registration deadline counts from here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduled_time: Option<Time>,
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

impl RunStatus {
    /// The life it records: phase, a reason this version knows, attempt.
    pub fn life(&self) -> Life {
        Life {
            phase: self.phase.unwrap_or(Phase::Pending),
            reason: self.reason.as_deref().and_then(Reason::parse),
            attempt: self.attempt.unwrap_or(0).max(0) as u64,
        }
    }
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

impl Endpoint {
    /// The endpoint of a Run on the gateway at `gateway_url`
    /// (`https://host[:port]`): the invoke URL of a function Run, the
    /// session URL of a session Run.
    pub fn new(gateway_url: &str, run: &Run, ca_bundle: Option<String>) -> Self {
        Self::at(gateway_url, &run.public_path(), ca_bundle)
    }

    /// The endpoint at `path` (a Run's [`Run::public_path`]) of the gateway
    /// at `gateway_url`.
    pub fn at(gateway_url: &str, path: &str, ca_bundle: Option<String>) -> Self {
        let base = gateway_url.trim_end_matches('/');
        Self {
            protocol: if base.starts_with("http://") {
                "HTTP".into()
            } else {
                "HTTPS".into()
            },
            url: format!("{base}{path}"),
            ca_bundle,
        }
    }
}
