//! The `Run` resource: a reservation of warm capacity on one Runtime Pod,
//! in one of three modes (task, function, session). The embedded store
//! reads manifests straight into [`Run`]; the Kubernetes operator and
//! runtimed watch the same type.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kruntimes_proto::api::dns_label;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::lifecycle::Phase;

/// `spec` of a Run. Execution inputs (runtime, source, mode, env) are
/// immutable after creation and `termination` is monotonic, enforced by the
/// API server with CEL transition rules (and by the embedded store, which
/// replaces a Run whose inputs change).
#[derive(CustomResource, KubeSchema, Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[kube(
    group = "kruntimes.io",
    version = "v1alpha1",
    kind = "Run",
    namespaced,
    derive = "PartialEq",
    status = "RunStatus",
    shortname = "krun",
    category = "kruntimes",
    printcolumn = r#"{"name":"Runtime","type":"string","jsonPath":".spec.runtime"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Pod","type":"string","jsonPath":".status.assignedPod"}"#,
    printcolumn = r#"{"name":"Attempt","type":"integer","jsonPath":".status.attempt"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("self.runtime == oldSelf.runtime").message("spec.runtime is immutable"),
    validation = Rule::new("has(self.source) == has(oldSelf.source) && (!has(self.source) || self.source == oldSelf.source)").message("spec.source is immutable"),
    validation = Rule::new("self.mode == oldSelf.mode").message("spec.mode is immutable"),
    validation = Rule::new("has(self.env) == has(oldSelf.env) && (!has(self.env) || self.env == oldSelf.env)").message("spec.env is immutable"),
    validation = Rule::new("!has(oldSelf.termination) || (has(self.termination) && (self.termination.mode == oldSelf.termination.mode || self.termination.mode == 'Immediate'))").message("spec.termination can only be set once, or moved from Drain to Immediate"),
)]
pub struct RunSpec {
    /// Runtime name (`python`, `bash`, or a custom Runtime).
    #[schemars(length(min = 1, max = 63))]
    pub runtime: String,
    /// Code source, shared by all modes.
    #[serde(default)]
    pub source: SourceSpec,
    /// Exactly one mode.
    pub mode: RunMode,
    /// Environment of the handler.
    #[serde(default)]
    #[schemars(length(max = 256))]
    pub env: Vec<EnvVar>,
    /// Retry policy for owner loss.
    #[serde(default)]
    pub retry_policy: RetryPolicy,
    /// Total lifetime from creation, in seconds; the Run then ends as
    /// `Timeout` (reason `RunTimeout`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<u32>,
    /// Ends the Run: `Drain` finishes accepted work, `Immediate` cancels it.
    /// Monotonic: once set it can only move from `Drain` to `Immediate`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination: Option<Termination>,
}

/// `spec.source`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SourceSpec {
    /// Inline source text (at most 256 KiB; etcd objects are small).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 262144))]
    pub inline: Option<String>,
    /// Where the inline source is written, relative to the working directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 255))]
    pub inline_path: Option<String>,
}

/// `spec.mode.task`: a one-shot process.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default, JsonSchema)]
pub struct TaskMode {
    /// File to run, relative to the working directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entrypoint: Option<String>,
    /// Arguments.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
}

/// `spec.mode`: exactly one of the fields.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default, KubeSchema)]
#[x_kube(validation = Rule::new("(has(self.task) ? 1 : 0) + (has(self.function) ? 1 : 0) + (has(self.session) ? 1 : 0) == 1").message("spec.mode must set exactly one of task, function, session"))]
pub struct RunMode {
    /// One-shot task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<TaskMode>,
    /// Function mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function: Option<FunctionMode>,
    /// Session (sandbox) mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<SessionMode>,
}

/// `spec.mode.session`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SessionMode {
    /// End the session after this long without operations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_timeout_seconds: Option<u32>,
    /// Operations that may wait behind the running one (default 16, max 1024).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_size: Option<u32>,
    /// Default command timeout in seconds (default 300, max 3600).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation_timeout: Option<u32>,
}

/// `spec.mode.function`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FunctionMode {
    /// `module.function` (Python) or `file.function` (Bash).
    pub handler: String,
    /// Idle timeout that ends the reservation; none when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_timeout_seconds: Option<u32>,
    /// Per-invocation timeout; the runtime default when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invocation_timeout_seconds: Option<u32>,
}

/// One environment variable.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EnvVar {
    /// Name.
    pub name: String,
    /// Value.
    #[serde(default)]
    pub value: String,
}

/// `spec.retryPolicy`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RetryPolicy {
    /// Moves to another Pod allowed after owner loss (a failed
    /// registration is terminal).
    #[serde(default = "default_retries")]
    pub max_retries: u32,
}

fn default_retries() -> u32 {
    3
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_retries: default_retries(),
        }
    }
}

/// `spec.termination`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default, JsonSchema)]
pub struct Termination {
    /// `Drain` finishes accepted work; `Immediate` cancels it.
    #[serde(default)]
    pub mode: TerminationMode,
}

/// How a Run ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, JsonSchema)]
pub enum TerminationMode {
    /// Let in-flight work finish.
    #[default]
    Drain,
    /// Cancel in-flight work.
    Immediate,
}

/// Which mode a valid Run has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum ModeKind {
    /// Task.
    Task,
    /// Function.
    Function,
    /// Session.
    Session,
}

impl ModeKind {
    /// Lowercase name as shown by `krt runs`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Task => "task",
            Self::Function => "function",
            Self::Session => "session",
        }
    }
}

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

impl Run {
    /// Namespace, `default` when the manifest names none.
    pub fn namespace_or_default(&self) -> &str {
        self.metadata.namespace.as_deref().unwrap_or("default")
    }

    /// Name (empty when unset).
    pub fn name_str(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or_default()
    }

    /// UID (empty when unset).
    pub fn uid_str(&self) -> &str {
        self.metadata.uid.as_deref().unwrap_or_default()
    }

    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace_or_default(), self.name_str())
    }

    /// The Run's mode by its spec alone (`None` when not exactly one is set).
    pub fn mode_kind(&self) -> Option<ModeKind> {
        let m = &self.spec.mode;
        match (m.task.is_some(), m.function.is_some(), m.session.is_some()) {
            (true, false, false) => Some(ModeKind::Task),
            (false, true, false) => Some(ModeKind::Function),
            (false, false, true) => Some(ModeKind::Session),
            _ => None,
        }
    }

    /// Validates the Run as the CRD's schema and CEL rules would, and
    /// returns its mode.
    pub fn validate(&self) -> Result<ModeKind, String> {
        if !dns_label(self.name_str()) {
            return Err(format!(
                "metadata.name {:?} is not a DNS-1123 label",
                self.name_str()
            ));
        }
        if !dns_label(self.namespace_or_default()) {
            return Err(format!(
                "metadata.namespace {:?} is not a DNS-1123 label",
                self.namespace_or_default()
            ));
        }
        if !dns_label(&self.spec.runtime) {
            return Err(format!(
                "spec.runtime {:?} is not a DNS-1123 label",
                self.spec.runtime
            ));
        }
        let m = &self.spec.mode;
        let kind = match self.mode_kind() {
            Some(kind) => kind,
            None if m.task.is_none() && m.function.is_none() && m.session.is_none() => {
                return Err("spec.mode requires exactly one of task, function, session".into());
            }
            None => return Err("spec.mode must set exactly one of task, function, session".into()),
        };
        if let Some(f) = &m.function
            && f.handler.is_empty()
        {
            return Err("spec.mode.function.handler is required".into());
        }
        if self
            .spec
            .source
            .inline
            .as_ref()
            .is_some_and(|s| s.len() > crate::MAX_INLINE_SOURCE_BYTES)
        {
            return Err("spec.source.inline is larger than 1 MiB".into());
        }
        let mut seen = std::collections::BTreeSet::new();
        for e in &self.spec.env {
            if e.name.is_empty() || e.name.contains('=') || !seen.insert(&e.name) {
                return Err(format!(
                    "spec.env name {:?} is empty, contains '=' or repeats",
                    e.name
                ));
            }
        }
        Ok(kind)
    }

    /// Requested termination, if any.
    pub fn termination(&self) -> Option<TerminationMode> {
        self.spec.termination.as_ref().map(|t| t.mode)
    }

    /// Whether `other` has the same execution inputs (runtime, source, mode,
    /// env: the fields the API server keeps immutable). `termination`,
    /// `timeout` and `retryPolicy` may change in place.
    pub fn same_inputs(&self, other: &Run) -> bool {
        let (a, b) = (&self.spec, &other.spec);
        a.runtime == b.runtime && a.source == b.source && a.mode == b.mode && a.env == b.env
    }

    /// The environment as a map.
    pub fn env(&self) -> BTreeMap<String, String> {
        self.spec
            .env
            .iter()
            .map(|e| (e.name.clone(), e.value.clone()))
            .collect()
    }

    /// Digest of the immutable registration inputs (runtime, source, mode,
    /// env): equal digests mean an idempotent re-registration.
    pub fn digest(&self) -> String {
        #[derive(Serialize)]
        struct Inputs<'a> {
            runtime: &'a str,
            source: &'a SourceSpec,
            mode: &'a RunMode,
            env: BTreeMap<String, String>,
        }
        let inputs = Inputs {
            runtime: &self.spec.runtime,
            source: &self.spec.source,
            mode: &self.spec.mode,
            env: self.env(),
        };
        // Plain structs with string keys always serialize.
        let bytes = serde_json::to_vec(&inputs).unwrap_or_default();
        Sha256::digest(&bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    /// The gateway path of the Run: the invoke route of a function Run, the
    /// session route of a session Run.
    pub fn public_path(&self) -> String {
        let (collection, suffix) = match self.mode_kind() {
            Some(ModeKind::Session) => ("sessions", ""),
            _ => ("runs", ":invoke"),
        };
        format!(
            "/v1/namespaces/{}/runtimes/{}/{collection}/{}{suffix}",
            self.namespace_or_default(),
            self.spec.runtime,
            self.uid_str()
        )
    }
}

#[cfg(test)]
mod tests;
