//! Registration and fencing decisions. Pure: the engine applies them.
//!
//! A registration is keyed by Run UID and ordered by attempt. The rules come
//! from the function-mode lifecycle design: idempotent retries, rejected
//! conflicting re-registration, supersession by a higher attempt, and stale
//! ids that can never touch a newer registration.

/// What the engine knows about the current registration of a Run UID.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Registration attempt.
    pub attempt: u64,
    /// Digest of the immutable registration inputs.
    pub digest: String,
    /// Opaque registration id handed out on registration.
    pub registration_id: String,
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

/// Why a fenced request is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FenceError {
    /// The header's Run UID differs from the path's.
    RunMismatch,
    /// The request was meant for another Pod (or an earlier incarnation).
    WrongPod,
    /// Not registered here.
    NotRegistered,
    /// Registered here at a different attempt.
    WrongAttempt,
}

/// Checks the gateway's fencing headers against this Pod and its record.
pub fn check_fence(
    fence: Fence<'_>,
    path_uid: &str,
    my_pod_uid: &str,
    current: Option<&Record>,
) -> Result<(), FenceError> {
    if fence.run_uid != path_uid {
        return Err(FenceError::RunMismatch);
    }
    if fence.owner_pod_uid != my_pod_uid {
        return Err(FenceError::WrongPod);
    }
    match current {
        None => Err(FenceError::NotRegistered),
        Some(r) if r.attempt != fence.attempt => Err(FenceError::WrongAttempt),
        Some(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(attempt: u64, digest: &str, id: &str) -> Record {
        Record {
            attempt,
            digest: digest.into(),
            registration_id: id.into(),
        }
    }

    #[test]
    fn register_decisions_follow_attempt_then_digest() {
        let r = rec(2, "d1", "id-2");
        assert_eq!(decide_register(None, 1, "d1"), RegisterDecision::Create);
        assert_eq!(
            decide_register(Some(&r), 2, "d1"),
            RegisterDecision::Idempotent
        );
        assert_eq!(
            decide_register(Some(&r), 2, "d2"),
            RegisterDecision::Conflict
        );
        assert_eq!(
            decide_register(Some(&r), 3, "d1"),
            RegisterDecision::Supersede
        );
        assert_eq!(
            decide_register(Some(&r), 3, "d9"),
            RegisterDecision::Supersede
        );
        assert_eq!(decide_register(Some(&r), 1, "d1"), RegisterDecision::Stale);
        assert_eq!(decide_register(Some(&r), 0, "d2"), RegisterDecision::Stale);
    }

    #[test]
    fn stale_ids_never_match_a_newer_registration() {
        let r = rec(3, "d", "id-3");
        assert_eq!(check_id(Some(&r), "id-3"), IdCheck::Current);
        assert_eq!(check_id(Some(&r), "id-2"), IdCheck::Stale);
        assert_eq!(check_id(Some(&r), ""), IdCheck::Current);
        assert_eq!(check_id(None, "id-2"), IdCheck::Absent);
    }

    #[test]
    fn fencing_checks_run_pod_and_attempt() {
        let r = rec(2, "d", "id");
        let ok = Fence {
            run_uid: "u",
            owner_pod_uid: "pod-a",
            attempt: 2,
        };
        assert_eq!(check_fence(ok, "u", "pod-a", Some(&r)), Ok(()));
        assert_eq!(
            check_fence(ok, "other", "pod-a", Some(&r)),
            Err(FenceError::RunMismatch)
        );
        assert_eq!(
            check_fence(ok, "u", "pod-b", Some(&r)),
            Err(FenceError::WrongPod)
        );
        assert_eq!(
            check_fence(ok, "u", "pod-a", None),
            Err(FenceError::NotRegistered)
        );
        let stale = Fence { attempt: 1, ..ok };
        assert_eq!(
            check_fence(stale, "u", "pod-a", Some(&r)),
            Err(FenceError::WrongAttempt)
        );
        let newer = Fence { attempt: 3, ..ok };
        assert_eq!(
            check_fence(newer, "u", "pod-a", Some(&r)),
            Err(FenceError::WrongAttempt)
        );
    }
}
