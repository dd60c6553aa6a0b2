//! The `Run` resource: a reservation of warm capacity on one Runtime Pod,
//! in one of three modes (task, function, session). The embedded store
//! reads manifests straight into [`Run`]; the Kubernetes operator and
//! runtimed watch the same type. This module holds what is derived from a
//! Run: validation, the registration digest, its key and public path.

mod spec;
mod status;
pub mod task;

use std::collections::BTreeMap;

use kruntimes_core::lifecycle::{Life, Rules};
use kruntimes_core::{ModeKind, Resources, TerminationMode};
use kruntimes_proto::api::dns_label;
use serde::Serialize;
use sha2::{Digest, Sha256};

pub use spec::{
    EnvVar, FunctionMode, RetryPolicy, Run, RunMode, RunResources, RunSpec, SessionMode,
    SourceSpec, TaskMode, Termination,
};
pub use status::{Endpoint, RunStatus, TaskStatus};

use kruntimes_core::scheduler::queue::{MAX_PRIORITY, MIN_PRIORITY};

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
        if let Some(t) = &m.task {
            task::task_input(&self.spec.source, t)?;
        }
        if let Some(why) = self
            .spec
            .inputs
            .as_ref()
            .and_then(|i| crate::artifact::inputs_error(i, kind))
        {
            return Err(why);
        }
        task::retry_policy(&self.spec.retry_policy, kind)?;
        task::ttl(self.spec.ttl_seconds_after_finished, kind)?;
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
        self.requests()?;
        if let Some(p) = self.spec.priority
            && !(MIN_PRIORITY..=MAX_PRIORITY).contains(&p)
        {
            return Err(format!(
                "spec.priority {p} is outside {MIN_PRIORITY} to {MAX_PRIORITY}"
            ));
        }
        if self.spec.priority.is_some() && self.spec.priority_class_name.is_some() {
            return Err("set spec.priority or spec.priorityClassName, not both".into());
        }
        if let Some(a) = &self.spec.affinity {
            a.validate()?;
        }
        Ok(kind)
    }

    /// What the spec sets that has no effect, for the person who wrote it
    /// (`krt apply` prints it; a valid Run may have some).
    pub fn warnings(&self) -> Vec<String> {
        self.spec
            .mode
            .task
            .as_ref()
            .and_then(|t| task::task_input(&self.spec.source, t).ok())
            .and_then(|(_, warning)| warning)
            .into_iter()
            .collect()
    }

    /// `spec.resources.requests` in thousandths, or the first invalid one.
    pub fn requests(&self) -> Result<Resources, String> {
        match &self.spec.resources {
            Some(r) => crate::quantity::resources(&r.requests, "spec.resources.requests"),
            None => Ok(Resources::new()),
        }
    }

    /// `spec.priority`, or what `spec.priorityClassName` stands for (0
    /// when neither is set).
    pub fn priority(&self) -> i32 {
        self.spec
            .priority
            .or(self.spec.priority_class_name.map(|c| c.value()))
            .unwrap_or(0)
    }

    /// The life its status records (a new Run: `Pending`, attempt 0).
    pub fn life(&self) -> Life {
        self.status
            .as_ref()
            .map(RunStatus::life)
            .unwrap_or_default()
    }

    /// The lifecycle rules of the Run, whose (validated) mode is `mode`.
    pub fn rules(&self, mode: ModeKind) -> Rules {
        Rules {
            mode,
            max_retries: self.spec.retry_policy.max_retries,
            termination: self.termination(),
            // Validated: a code out of range never reaches here.
            retry_exit_codes: kruntimes_core::lifecycle::ExitCodes::of(
                &self.spec.retry_policy.on_exit_codes,
            )
            .unwrap_or(kruntimes_core::lifecycle::ExitCodes::NONE),
        }
    }

    /// Requested termination, if any.
    pub fn termination(&self) -> Option<TerminationMode> {
        self.spec.termination.as_ref().map(|t| t.mode)
    }

    /// Whether `other` has the same execution inputs (runtime, source, mode,
    /// env, resources, affinity: the fields the API server keeps
    /// immutable). `termination`, `timeout`, `retryPolicy` and `priority`
    /// may change in place.
    pub fn same_inputs(&self, other: &Run) -> bool {
        let (a, b) = (&self.spec, &other.spec);
        a.runtime == b.runtime
            && a.source == b.source
            && a.mode == b.mode
            && a.env == b.env
            && a.resources == b.resources
            && a.affinity == b.affinity
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
            // Absent from the digest of a Run without inputs: unchanged.
            #[serde(skip_serializing_if = "Option::is_none")]
            inputs: Option<&'a crate::Inputs>,
        }
        let inputs = Inputs {
            runtime: &self.spec.runtime,
            source: &self.spec.source,
            mode: &self.spec.mode,
            env: self.env(),
            inputs: self
                .spec
                .inputs
                .as_ref()
                .filter(|i| !i.artifacts.is_empty()),
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
        public_path(
            self.namespace_or_default(),
            &self.spec.runtime,
            self.uid_str(),
            self.mode_kind().unwrap_or(ModeKind::Function),
        )
    }
}

/// The gateway path of a Run of `mode`: a function's invoke route, a
/// session's, or — a task is never called — its artifacts.
pub fn public_path(namespace: &str, runtime: &str, uid: &str, mode: ModeKind) -> String {
    let base = format!("/v1/namespaces/{namespace}/runtimes/{runtime}");
    match mode {
        ModeKind::Function => format!("{base}/runs/{uid}:invoke"),
        ModeKind::Session => format!("{base}/sessions/{uid}"),
        ModeKind::Task => format!("{base}/runs/{uid}/artifacts"),
    }
}

/// The gateway path of a Run's artifacts (any mode).
pub fn artifacts_path(namespace: &str, runtime: &str, uid: &str) -> String {
    public_path(namespace, runtime, uid, ModeKind::Task)
}

#[cfg(test)]
mod tests;
