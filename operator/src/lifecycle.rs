//! The Run lifecycle state machine. Pure.
//!
//! Pending → Scheduled → Running → Ready for function Runs; Ready is not
//! terminal. Owner loss sends a non-terminal Run back to Pending (attempt + 1)
//! while the retry policy allows; idle timeout ends it as Timeout.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Run phases (`status.phase`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum Phase {
    /// Waiting for a Pod.
    Pending,
    /// Assigned to a Pod, not yet registering.
    Scheduled,
    /// Registering on its Pod.
    Running,
    /// Registered and invocable.
    Ready,
    /// Draining before it ends.
    Finalizing,
    /// Ended normally.
    Succeeded,
    /// Ended with an error.
    Failed,
    /// Ended by a timeout.
    Timeout,
    /// Ended by cancellation.
    Cancelled,
}

impl Phase {
    /// Whether the Run has ended.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            Self::Succeeded | Self::Failed | Self::Timeout | Self::Cancelled
        )
    }

    /// Whether the Run holds capacity on its Pod.
    pub fn holds_capacity(self) -> bool {
        matches!(
            self,
            Self::Scheduled | Self::Running | Self::Ready | Self::Finalizing
        )
    }
}

/// What happened to a Run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// The scheduler picked a Pod.
    Assigned,
    /// Registration was sent.
    RegisterStarted,
    /// Registration succeeded.
    Registered,
    /// Registration failed; `retryable` for transport errors.
    RegisterFailed {
        /// Transient (retry) or permanent (fail).
        retryable: bool,
    },
    /// The owner Pod is gone; `retries_left` from the retry policy.
    OwnerLost {
        /// Whether another attempt is allowed.
        retries_left: bool,
    },
    /// The Runtime Server reported idle expiry.
    IdleTimeout,
    /// Explicit cancellation (termination Immediate).
    Cancel,
    /// Termination `Drain` was requested.
    Finalize,
    /// The owner finished draining.
    Finalized,
}

/// The next phase, or `None` when the event does not apply in this phase.
pub fn transition(phase: Phase, event: Event) -> Option<Phase> {
    use Event::*;
    use Phase::*;
    if phase.is_terminal() {
        return None;
    }
    match (phase, event) {
        (Pending, Assigned) => Some(Scheduled),
        (Scheduled, RegisterStarted) => Some(Running),
        (Running, Registered) => Some(Ready),
        (Running, RegisterFailed { retryable: true }) => Some(Pending),
        (Running, RegisterFailed { retryable: false }) => Some(Failed),
        (Scheduled | Running | Ready, OwnerLost { retries_left: true }) => Some(Pending),
        (
            Scheduled | Running | Ready,
            OwnerLost {
                retries_left: false,
            },
        ) => Some(Failed),
        (Ready, IdleTimeout) => Some(Timeout),
        (Ready, Finalize) => Some(Finalizing),
        (Finalizing, Finalized) => Some(Succeeded),
        (Finalizing, Cancel) => Some(Cancelled),
        (_, Cancel) => Some(Cancelled),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::Event::*;
    use super::Phase::*;
    use super::*;

    #[test]
    fn happy_path_reaches_ready() {
        let p = transition(Pending, Assigned).unwrap();
        let p = transition(p, RegisterStarted).unwrap();
        assert_eq!(transition(p, Registered), Some(Ready));
    }

    #[test]
    fn failures_retry_or_fail() {
        assert_eq!(
            transition(Running, RegisterFailed { retryable: true }),
            Some(Pending)
        );
        assert_eq!(
            transition(Running, RegisterFailed { retryable: false }),
            Some(Failed)
        );
        assert_eq!(
            transition(Ready, OwnerLost { retries_left: true }),
            Some(Pending)
        );
        assert_eq!(
            transition(
                Ready,
                OwnerLost {
                    retries_left: false
                }
            ),
            Some(Failed)
        );
        assert_eq!(transition(Pending, OwnerLost { retries_left: true }), None);
    }

    #[test]
    fn idle_timeout_ends_ready_runs_only() {
        assert_eq!(transition(Ready, IdleTimeout), Some(Timeout));
        assert_eq!(transition(Running, IdleTimeout), None);
    }

    #[test]
    fn terminal_phases_absorb_everything() {
        for t in [Succeeded, Failed, Timeout, Cancelled] {
            assert!(t.is_terminal());
            for e in [
                Assigned,
                RegisterStarted,
                Registered,
                IdleTimeout,
                Cancel,
                OwnerLost { retries_left: true },
            ] {
                assert_eq!(transition(t, e), None);
            }
        }
    }

    #[test]
    fn capacity_is_held_between_assignment_and_end() {
        assert!(!Pending.holds_capacity());
        assert!(Scheduled.holds_capacity() && Running.holds_capacity() && Ready.holds_capacity());
        assert!(!Timeout.holds_capacity());
    }

    #[test]
    fn drain_finalizes_then_succeeds_and_immediate_cancels() {
        assert_eq!(transition(Ready, Finalize), Some(Finalizing));
        assert_eq!(transition(Finalizing, Finalized), Some(Succeeded));
        assert_eq!(transition(Finalizing, Cancel), Some(Cancelled));
        assert_eq!(transition(Pending, Cancel), Some(Cancelled));
        assert_eq!(transition(Pending, Finalize), None);
    }

    #[test]
    fn out_of_order_events_are_ignored() {
        assert_eq!(transition(Pending, Registered), None);
        assert_eq!(transition(Ready, Assigned), None);
        assert_eq!(transition(Scheduled, Registered), None);
    }
}
