//! Registration and fencing decisions. Pure: the [`super::Table`] and its
//! users apply them.
//!
//! A registration is keyed by Run UID and ordered by attempt. The rules come
//! from the lifecycle design: idempotent retries, rejected conflicting
//! re-registration, supersession by a higher attempt, and stale ids that can
//! never touch a newer registration.

/// What every registration records, whatever its mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Registration attempt.
    pub attempt: u64,
    /// Digest of the immutable registration inputs.
    pub digest: String,
    /// Opaque registration id handed out on registration.
    pub registration_id: String,
}

impl Record {
    /// The record of a new registration, with a fresh registration id.
    pub fn issue(attempt: u64, digest: impl Into<String>) -> Self {
        Self {
            attempt,
            digest: digest.into(),
            registration_id: format!("reg-{}", uuid::Uuid::new_v4().simple()),
        }
    }
}

/// Outcome of a Register call against the current record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegisterDecision {
    /// Nothing registered: create.
    Create,
    /// Same attempt, same digest: return the existing registration.
    Idempotent,
    /// Higher attempt: fence and remove the old registration, then create.
    Supersede,
    /// Same attempt, different digest: reject (ALREADY_EXISTS).
    Conflict,
    /// Lower attempt than the current one: reject (FAILED_PRECONDITION).
    Stale,
}

/// Decides a Register call.
pub fn decide_register(current: Option<&Record>, attempt: u64, digest: &str) -> RegisterDecision {
    match current {
        None => RegisterDecision::Create,
        Some(r) if attempt > r.attempt => RegisterDecision::Supersede,
        Some(r) if attempt < r.attempt => RegisterDecision::Stale,
        Some(r) if r.digest == digest => RegisterDecision::Idempotent,
        Some(_) => RegisterDecision::Conflict,
    }
}

/// Outcome of presenting a registration id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdCheck {
    /// The id names the current registration (or no id was given).
    Current,
    /// The id names an older, fenced registration.
    Stale,
    /// Nothing is registered for the Run UID.
    Absent,
}

/// Checks a caller-presented registration id; an empty id means "whatever is
/// current" and is only accepted where the caller is the control plane.
pub fn check_id(current: Option<&Record>, registration_id: &str) -> IdCheck {
    match current {
        None => IdCheck::Absent,
        Some(_) if registration_id.is_empty() => IdCheck::Current,
        Some(r) if r.registration_id == registration_id => IdCheck::Current,
        Some(_) => IdCheck::Stale,
    }
}

/// The gateway's view of the owner, sent as fencing headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fence<'a> {
    /// Run UID the gateway routes.
    pub run_uid: &'a str,
    /// Owner Pod UID in the gateway's table.
    pub owner_pod_uid: &'a str,
    /// Registration attempt in the gateway's table.
    pub attempt: u64,
}

/// Why a fenced request is refused; each says what did not match.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FenceError {
    /// The header's Run UID differs from the path's.
    #[error("the gateway routed run {routed} but the path names run {path}")]
    RunMismatch {
        /// The Run UID of the fencing header.
        routed: String,
        /// The Run UID of the path.
        path: String,
    },
    /// The request was meant for another Pod (or an earlier incarnation).
    #[error("this Pod (uid {this_pod}) is not the owner the gateway routed to ({routed_to})")]
    WrongPod {
        /// This Pod's UID.
        this_pod: String,
        /// The owner Pod UID in the gateway's table.
        routed_to: String,
    },
    /// Not registered here.
    #[error("run {run} is not registered on this Pod")]
    NotRegistered {
        /// The Run UID.
        run: String,
    },
    /// Registered here at a different attempt.
    #[error(
        "run {run} is registered here at attempt {registered}, the request carries attempt {requested}"
    )]
    WrongAttempt {
        /// The Run UID.
        run: String,
        /// The attempt registered on this Pod.
        registered: u64,
        /// The attempt in the gateway's table.
        requested: u64,
    },
}

/// Checks the gateway's fencing headers against this Pod and its record.
pub fn check_fence(
    fence: Fence<'_>,
    path_uid: &str,
    my_pod_uid: &str,
    current: Option<&Record>,
) -> Result<(), FenceError> {
    if fence.run_uid != path_uid {
        return Err(FenceError::RunMismatch {
            routed: fence.run_uid.to_owned(),
            path: path_uid.to_owned(),
        });
    }
    if fence.owner_pod_uid != my_pod_uid {
        return Err(FenceError::WrongPod {
            this_pod: my_pod_uid.to_owned(),
            routed_to: fence.owner_pod_uid.to_owned(),
        });
    }
    match current {
        None => Err(FenceError::NotRegistered {
            run: path_uid.to_owned(),
        }),
        Some(r) if r.attempt != fence.attempt => Err(FenceError::WrongAttempt {
            run: path_uid.to_owned(),
            registered: r.attempt,
            requested: fence.attempt,
        }),
        Some(_) => Ok(()),
    }
}
