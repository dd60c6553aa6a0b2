//! The kruntimes API (`kruntimes.io/v1alpha1`), shared by every component.
//!
//! It holds the `Run` and `Runtime` custom resources (spec, status, the
//! `#[kube]` derive and the CRD manifests the chart ships), the constants
//! that name them (group, version, finalizer, labels, bounds), validation
//! and the registration digest, the **one** Run lifecycle ([`lifecycle`]:
//! every rule about phases, attempts, retries, termination, timeouts and
//! owner loss, used alike by the embedded control plane, the Kubernetes
//! operator and runtimed), and the pure builder from a Run to the
//! `Assign` request its owner receives.
//!
//! Nothing here performs I/O: the crate is types and pure functions.
#![forbid(unsafe_code)]

pub mod crds;
pub mod lifecycle;
pub mod requests;
pub mod run;
pub mod runtime;

pub use lifecycle::{Phase, Reason};
pub use run::{
    Endpoint, EnvVar, FunctionMode, ModeKind, RetryPolicy, Run, RunMode, RunSpec, RunStatus,
    SessionMode, SourceSpec, TaskMode, Termination, TerminationMode,
};
pub use runtime::{Backend, Capacity, Runtime, RuntimeSpec, RuntimeStatus};

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

/// Longest `status.message` in bytes.
pub const MAX_MESSAGE_BYTES: usize = 1024;
/// Longest `status.endpoint.caBundle` (base64).
pub const MAX_CA_BUNDLE_BYTES: usize = 16384;
/// Longest `status.endpoint.url`.
pub const MAX_ENDPOINT_URL_BYTES: usize = 2048;
/// Longest inline source accepted in a manifest of the embedded store
/// (the API server bounds it to 256 KiB through the CRD schema).
pub const MAX_INLINE_SOURCE_BYTES: usize = 1024 * 1024;

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_version_is_group_slash_version() {
        assert_eq!(API_VERSION, format!("{GROUP}/{VERSION}"));
    }

    #[test]
    fn messages_are_bounded_on_char_boundaries() {
        assert_eq!(bounded_message(""), None);
        assert_eq!(bounded_message("ok").as_deref(), Some("ok"));
        let long = "é".repeat(MAX_MESSAGE_BYTES);
        let cut = bounded_message(&long).unwrap();
        assert!(cut.len() <= MAX_MESSAGE_BYTES);
        assert!(cut.chars().all(|c| c == 'é'));
    }
}
