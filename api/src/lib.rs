//! The kruntimes API (`kruntimes.io/v1alpha1`), shared by every component.
//!
//! It holds the `Run` and `Runtime` custom resources (spec, status, the
//! `#[kube]` derive and the CRD manifests the chart ships), the constants
//! that name them (group, version, finalizer, labels, bounds), validation
//! and the registration digest, resource quantities, the mapping of the
//! lifecycle's table phases to the wire ([`table`]), and the pure builder
//! from a Run to the `Assign` request its owner receives. The lifecycle
//! itself is `kruntimes-core`'s, re-exported here as [`lifecycle`].
//!
//! Nothing here performs I/O: the crate is types and pure functions.
#![forbid(unsafe_code)]

pub mod artifact;
pub mod crds;
pub mod pod;
pub mod quantity;
pub mod requests;
pub mod run;
pub mod runtime;
pub mod table;

pub use artifact::{
    ArtifactRef, ArtifactStoreSpec, CredentialsSecret, InputArtifact, Inputs, MAX_STATUS_ARTIFACTS,
};
pub use kruntimes_core::lifecycle;
pub use kruntimes_core::scheduler::affinity::{
    Affinity, LabelSelector, Operator, Requirement, RunAffinity, RunAffinityTerm,
    WeightedRunAffinityTerm,
};
pub use kruntimes_core::{
    MAX_MESSAGE_BYTES, ModeKind, Phase, Reason, TerminationMode, bounded_message,
};
pub use run::{
    Endpoint, EnvVar, FunctionMode, RetryPolicy, Run, RunMode, RunResources, RunSpec, RunStatus,
    SessionMode, SourceSpec, TaskMode, TaskStatus, Termination,
};
pub use runtime::{Backend, Capacity, Pool, Runtime, RuntimeSpec, RuntimeStatus};

/// API group of every kruntimes resource.
pub const GROUP: &str = "kruntimes.io";
/// API version of every kruntimes resource.
pub const VERSION: &str = "v1alpha1";
/// `apiVersion` of kruntimes objects (`GROUP/VERSION`).
pub const API_VERSION: &str = "kruntimes.io/v1alpha1";
/// `kind` of a Run.
pub const RUN_KIND: &str = "Run";
/// Plural resource name of Runs (RBAC, SubjectAccessReview).
pub const RUNS_RESOURCE: &str = "runs";

/// Finalizer that makes the owner release a Run before it is deleted.
pub const FINALIZER: &str = "kruntimes.io/function-cleanup";
/// Label naming the Runtime a Pod belongs to.
pub const RUNTIME_LABEL: &str = "kruntimes.io/runtime";

/// Longest `status.endpoint.caBundle` (base64).
pub const MAX_CA_BUNDLE_BYTES: usize = 16384;
/// Longest `status.endpoint.url`.
pub const MAX_ENDPOINT_URL_BYTES: usize = 2048;
/// Longest inline source accepted in a manifest of the embedded store
/// (the API server bounds it to 256 KiB through the CRD schema).
pub const MAX_INLINE_SOURCE_BYTES: usize = 1024 * 1024;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_version_is_group_slash_version() {
        assert_eq!(API_VERSION, format!("{GROUP}/{VERSION}"));
    }
}

/// What wrote a Run into `krt up`'s runs directory, which names its file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ManifestWriter {
    /// `krt apply` and `krt run`: `apply-NS-NAME.yaml`.
    Apply,
    /// `krt session create` and the SDKs' sandboxes: `session-NS-NAME.yaml`.
    Session,
}

impl ManifestWriter {
    /// Every writer, in the order a Run's file is looked for.
    pub const ALL: [Self; 2] = [Self::Apply, Self::Session];

    /// The file this writer keeps the Run `namespace/name` in.
    pub fn file_name(self, namespace: &str, name: &str) -> String {
        let prefix = match self {
            Self::Apply => "apply",
            Self::Session => "session",
        };
        format!("{prefix}-{namespace}-{name}.yaml")
    }
}
