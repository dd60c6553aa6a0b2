//! Authentication and authorization behind traits, with a bounded decision
//! cache in front of them.
//!
//! The embedded implementations verify the control plane's ES256 JWTs
//! locally ([`jwt::JwtAuthenticator`]) and apply a static policy
//! ([`policy::PolicyAuthorizer`]); the Kubernetes TokenReview /
//! SubjectAccessReview implementations plug into the same traits.

pub mod cache;
pub mod jwt;
pub mod kube;
pub mod policy;
pub mod setup;
#[cfg(test)]
pub(crate) mod testing;

use std::collections::BTreeMap;
use std::time::SystemTime;

use async_trait::async_trait;

/// Who the caller is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// Subject (user name).
    pub subject: String,
    /// Groups.
    pub groups: Vec<String>,
    /// Stable user id, when the authenticator reports one.
    pub uid: Option<String>,
    /// Extra attributes (Kubernetes `user.extra`), passed on to authorization.
    pub extra: BTreeMap<String, Vec<String>>,
    /// When the credential expires; cached decisions never outlive it.
    pub expires_at: Option<SystemTime>,
}

impl Identity {
    /// An identity with a subject and groups only.
    pub fn new(subject: impl Into<String>, groups: Vec<String>) -> Self {
        Self {
            subject: subject.into(),
            groups,
            uid: None,
            extra: BTreeMap::new(),
            expires_at: None,
        }
    }
}

/// The authz subresource of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verb {
    /// `runs/invoke` (function Runs).
    Invoke,
    /// `runs/session` (session Runs).
    Session,
    /// `runs/artifacts` (reading a Run's artifacts, any mode).
    Artifacts,
}

impl Verb {
    /// Subresource name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Invoke => "invoke",
            Self::Session => "session",
            Self::Artifacts => "artifacts",
        }
    }

    /// The verb a SubjectAccessReview asks about on the subresource:
    /// `create` for what runs something, `get` for what only reads.
    pub fn review_verb(self) -> &'static str {
        match self {
            Self::Invoke | Self::Session => "create",
            Self::Artifacts => "get",
        }
    }
}

/// What is being accessed. Borrowed from the request and the table: a
/// decision-cache hit copies none of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Target<'a> {
    /// Namespace.
    pub namespace: &'a str,
    /// Run name.
    pub name: &'a str,
    /// Run UID.
    pub uid: &'a str,
    /// Subresource.
    pub verb: Verb,
}

/// Why authentication or authorization did not produce a decision.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// The credential is missing, malformed, expired or unknown (401).
    #[error("unauthenticated: {0}")]
    Unauthenticated(String),
    /// The backend could not decide (503, not cached).
    #[error("authentication backend unavailable: {0}")]
    Unavailable(String),
}

/// Turns a bearer token into an identity.
#[async_trait]
pub trait Authenticator: Send + Sync {
    /// Verifies `token`.
    async fn authenticate(&self, token: &str) -> Result<Identity, AuthError>;
}

/// Decides whether an identity may use a target.
#[async_trait]
pub trait Authorizer: Send + Sync {
    /// `Ok(true)` when allowed.
    async fn authorize(&self, identity: &Identity, target: &Target<'_>) -> Result<bool, AuthError>;
}
