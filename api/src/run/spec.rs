//! `spec` of a Run: what it runs (runtime, source, mode, env) and how it
//! may end (retry policy, timeout, termination).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kruntimes_core::TerminationMode;
use kruntimes_core::scheduler::affinity::Affinity;
use kruntimes_core::scheduler::queue::PriorityClass;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::RunStatus;

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
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    // runtimed watches only the Runs assigned to its own Pod.
    selectable = ".status.assignedPodUID"
)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("self.runtime == oldSelf.runtime").message("spec.runtime is immutable"),
    validation = Rule::new("has(self.source) == has(oldSelf.source) && (!has(self.source) || self.source == oldSelf.source)").message("spec.source is immutable"),
    validation = Rule::new("self.mode == oldSelf.mode").message("spec.mode is immutable"),
    validation = Rule::new("has(self.env) == has(oldSelf.env) && (!has(self.env) || self.env == oldSelf.env)").message("spec.env is immutable"),
    validation = Rule::new("has(self.resources) == has(oldSelf.resources) && (!has(self.resources) || self.resources == oldSelf.resources)").message("spec.resources is immutable"),
    validation = Rule::new("has(self.affinity) == has(oldSelf.affinity) && (!has(self.affinity) || self.affinity == oldSelf.affinity)").message("spec.affinity is immutable"),
    validation = Rule::new("!has(oldSelf.termination) || (has(self.termination) && (self.termination.mode == oldSelf.termination.mode || self.termination.mode == 'Immediate'))").message("spec.termination can only be set once, or moved from Drain to Immediate"),
    validation = Rule::new("!(has(self.priority) && has(self.priorityClassName))").message("set spec.priority or spec.priorityClassName, not both"),
    // Task Runs (api::run::task decides the same for the embedded store).
    validation = Rule::new("!has(self.mode.task) || (has(self.source) && has(self.source.inline)) || has(self.mode.task.entrypoint) || (has(self.mode.task.args) && size(self.mode.task.args) > 0)").message("a task needs something to run: spec.source.inline, spec.mode.task.entrypoint, or spec.mode.task.args (shell commands)"),
    validation = Rule::new("!has(self.mode.task) || !has(self.mode.task.entrypoint) || !(self.mode.task.entrypoint.startsWith('/') || self.mode.task.entrypoint.matches('(^|/)[.][.](/|$)') || self.mode.task.entrypoint.matches('^([.]/*)+$'))").message("spec.mode.task.entrypoint must name a file inside the working directory (relative, no '..')"),
    validation = Rule::new("has(self.mode.task) || !has(self.retryPolicy) || !has(self.retryPolicy.onExitCodes) || size(self.retryPolicy.onExitCodes) == 0").message("spec.retryPolicy.onExitCodes applies to task Runs only"),
    validation = Rule::new("has(self.mode.task) || !has(self.ttlSecondsAfterFinished)").message("spec.ttlSecondsAfterFinished applies to task Runs only"),
    // Artifacts (api::artifact::inputs_error decides the same for the embedded store).
    validation = Rule::new("has(self.inputs) == has(oldSelf.inputs) && (!has(self.inputs) || self.inputs == oldSelf.inputs)").message("spec.inputs is immutable"),
    validation = Rule::new("!has(self.mode.function) || !has(self.inputs) || !has(self.inputs.artifacts) || size(self.inputs.artifacts) == 0").message("spec.inputs applies to task and session Runs only"),
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
    /// Task Runs: seconds after the task ends (any terminal phase) that the
    /// Run — its status, result and log — is deleted; 0 deletes it at once,
    /// unset keeps it until deleted (at most 30 days).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 2592000))]
    pub ttl_seconds_after_finished: Option<u32>,
    /// Ends the Run: `Drain` finishes accepted work, `Immediate` cancels it.
    /// Monotonic: once set it can only move from `Drain` to `Immediate`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination: Option<Termination>,
    /// What the Run reserves on its Pod (immutable). A Pod admits a Run
    /// only while the requests of all its Runs fit its Runtime's
    /// `spec.capacity.resources`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<RunResources>,
    /// Queue priority, -1000 to 1000 (default 0): higher is placed first,
    /// a waiting Run gains one every 10 s; nothing running is ever evicted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = -1000, max = 1000))]
    pub priority: Option<i32>,
    /// A named priority instead of a number: `low` (−500), `normal` (0),
    /// `high` (500), `critical` (1000). Not with `priority`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<PriorityClass>,
    /// Which Runs this Run shares a Pod with, or must not (immutable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,
    /// What the Run is given before it starts: artifacts of the Runtime's
    /// store (another Run's, of this namespace) staged into its working
    /// directory. Immutable; task and session Runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inputs: Option<crate::Inputs>,
}

/// `spec.resources`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunResources {
    /// Amounts reserved on the Pod (`cpu`, `memory`, `ephemeral-storage`,
    /// or an extended name the Runtime declares).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(length(max = 16))]
    pub requests: BTreeMap<String, Quantity>,
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

/// `spec.mode.task`: a one-shot process. With `spec.source.inline` the
/// inline script runs and these have no effect; otherwise `entrypoint` (a
/// file of the source) runs with `args`, and without it a shell-style
/// Runtime runs `args` as shell commands ([`super::task`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TaskMode {
    /// File to run, relative to the working directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 255))]
    pub entrypoint: Option<String>,
    /// Arguments of `entrypoint`; without it, shell commands.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256), inner(length(max = 4096)))]
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
    /// Moves to another Pod allowed after owner loss or a task's failed
    /// start (a failed registration is terminal); at most 100.
    #[serde(default = "default_retries")]
    #[schemars(range(max = 100))]
    pub max_retries: u32,
    /// Task Runs: the non-zero exit codes that are retried too (1–255, at
    /// most 32); a task exiting with another code fails.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32), inner(range(min = 1, max = 255)))]
    pub on_exit_codes: Vec<i32>,
}

fn default_retries() -> u32 {
    3
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_retries: default_retries(),
            on_exit_codes: Vec::new(),
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
