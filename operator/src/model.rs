//! The `Run` resource in its CRD shape (`kruntimes.io/v1alpha1`), as read from
//! manifests, with pure validation and the registration digest.

use std::collections::BTreeMap;

use kruntimes_proto::api::dns_label;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// API version of Run manifests.
pub const API_VERSION: &str = "kruntimes.io/v1alpha1";

/// A Run manifest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunManifest {
    /// Must be [`API_VERSION`].
    pub api_version: String,
    /// Must be `Run`.
    pub kind: String,
    /// Name and namespace.
    pub metadata: ObjectMeta,
    /// Desired state.
    pub spec: RunSpec,
}

/// Object metadata (the subset the control plane uses).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct ObjectMeta {
    /// Run name (DNS-1123 label).
    pub name: String,
    /// Namespace; `default` when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

/// `spec` of a Run. The CRD `Run` (`kruntimes.io/v1alpha1`) is generated
/// from it; execution inputs (runtime, source, mode, env) are immutable
/// after creation and `termination` is monotonic, enforced by the API server
/// with CEL transition rules.
#[derive(CustomResource, KubeSchema, Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[kube(
    group = "kruntimes.io",
    version = "v1alpha1",
    kind = "Run",
    namespaced,
    status = "crate::crd::RunStatus",
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
    /// Retry policy for registration failures and owner loss.
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

impl RunManifest {
    /// Namespace, defaulting to `default`.
    pub fn namespace(&self) -> &str {
        self.metadata.namespace.as_deref().unwrap_or("default")
    }

    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace(), self.metadata.name)
    }

    /// Validates the manifest as the CRD's schema and CEL rules would.
    pub fn validate(&self) -> Result<ModeKind, String> {
        if self.api_version != API_VERSION {
            return Err(format!("apiVersion must be {API_VERSION}"));
        }
        if self.kind != "Run" {
            return Err("kind must be Run".into());
        }
        if !dns_label(&self.metadata.name) {
            return Err(format!(
                "metadata.name {:?} is not a DNS-1123 label",
                self.metadata.name
            ));
        }
        if !dns_label(self.namespace()) {
            return Err(format!(
                "metadata.namespace {:?} is not a DNS-1123 label",
                self.namespace()
            ));
        }
        if !dns_label(&self.spec.runtime) {
            return Err(format!(
                "spec.runtime {:?} is not a DNS-1123 label",
                self.spec.runtime
            ));
        }
        let m = &self.spec.mode;
        let kind = match (m.task.is_some(), m.function.is_some(), m.session.is_some()) {
            (true, false, false) => ModeKind::Task,
            (false, true, false) => ModeKind::Function,
            (false, false, true) => ModeKind::Session,
            (false, false, false) => {
                return Err("spec.mode requires exactly one of task, function, session".into());
            }
            _ => return Err("spec.mode must set exactly one of task, function, session".into()),
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
            .is_some_and(|s| s.len() > 1024 * 1024)
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

    /// Whether `other` differs from this manifest only in `spec.termination`
    /// (the one field that may change after creation).
    pub fn same_inputs(&self, other: &RunManifest) -> bool {
        let mut a = self.clone();
        let mut b = other.clone();
        a.spec.termination = None;
        b.spec.termination = None;
        a == b
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
        // Serializing plain structs with string keys cannot fail.
        let bytes = serde_json::to_vec(&inputs).unwrap_or_default();
        let d = Sha256::digest(&bytes);
        d.iter().map(|b| format!("{b:02x}")).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(y: &str) -> RunManifest {
        serde_yaml::from_str(y).unwrap()
    }

    const HELLO: &str = r#"
apiVersion: kruntimes.io/v1alpha1
kind: Run
metadata:
  name: hello-python
spec:
  runtime: python
  source:
    inlinePath: main.py
    inline: |
      def invoke(request):
          return {"message": "hello " + request["name"]}
  mode:
    function:
      handler: main.invoke
      idleTimeoutSeconds: 600
"#;

    #[test]
    fn function_manifest_validates_with_defaults() {
        let m = parse(HELLO);
        assert_eq!(m.validate(), Ok(ModeKind::Function));
        assert_eq!(m.key(), "default/hello-python");
        assert_eq!(m.spec.retry_policy.max_retries, 3);
        assert_eq!(m.termination(), None);
    }

    #[test]
    fn modes_are_mutually_exclusive_and_required() {
        let mut m = parse(HELLO);
        m.spec.mode.session = Some(SessionMode::default());
        assert!(m.validate().unwrap_err().contains("exactly one"));
        m.spec.mode = RunMode::default();
        assert!(m.validate().unwrap_err().contains("exactly one"));
    }

    #[test]
    fn bad_names_versions_and_env_are_rejected() {
        let mut m = parse(HELLO);
        m.metadata.name = "Hello".into();
        assert!(m.validate().is_err());
        let mut m = parse(HELLO);
        m.api_version = "v1".into();
        assert!(m.validate().is_err());
        let mut m = parse(HELLO);
        m.spec.env = vec![
            EnvVar {
                name: "A".into(),
                value: "1".into(),
            },
            EnvVar {
                name: "A".into(),
                value: "2".into(),
            },
        ];
        assert!(m.validate().is_err());
        let mut m = parse(HELLO);
        m.spec.mode.function.as_mut().unwrap().handler.clear();
        assert!(m.validate().is_err());
    }

    #[test]
    fn digest_covers_execution_inputs_only() {
        let a = parse(HELLO);
        let mut b = a.clone();
        b.spec.retry_policy.max_retries = 9;
        assert_eq!(a.digest(), b.digest());
        b.spec.source.inline = Some("def invoke(r): return 1".into());
        assert_ne!(a.digest(), b.digest());
        let mut c = a.clone();
        c.spec.env.push(EnvVar {
            name: "X".into(),
            value: "y".into(),
        });
        assert_ne!(a.digest(), c.digest());
    }
}
