//! The Run lifecycle, written once. Pure.
//!
//! Every rule about phases, reasons, attempts, retries, termination, idle
//! and total timeouts, owner loss and capacity lives here. Both control
//! planes — the embedded one of `krt up` and the Kubernetes operator — and
//! the owner side (runtimed's cluster adapter, or the embedded control
//! plane acting for its runtimed instances) turn what they observe into an
//! [`Event`] and take the [`Transition`] that [`apply`] returns, so the same
//! Run goes through the same phases with the same reasons and attempts in
//! both modes. [`control::decide`] says what the control plane does about
//! one Run; [`owner::decide`] what its owner does.
//!
//! ```text
//!  Pending ──Assigned (attempt + 1)──▶ Scheduled ──RegisterStarted──▶ Running ──Registered──▶ Ready
//!     ▲                                    │                             │                      │
//!     └──────── OwnerLost (function, retries left: attempt ≤ maxRetries) ┴──────────────────────┤
//!                                                                                               │
//!  Ready ──Terminate(Drain)──▶ Finalizing ──Drained──▶ Succeeded                                 │
//!  any ──Terminate(Immediate)──▶ Cancelled · TimedOut/IdleExpired──▶ Timeout · failures──▶ Failed ┘
//!  Scheduled/Running ──RegistrationExpired──▶ Pending (retries left) or Failed
//! ```

pub mod control;
pub mod owner;
mod phase;

pub use phase::{Phase, Reason, TablePhase};

use crate::{ModeKind, TerminationMode};

/// The lifecycle part of a Run's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Life {
    /// `status.phase`.
    pub phase: Phase,
    /// `status.reason`, when it is one of ours.
    pub reason: Option<Reason>,
    /// `status.attempt`: how many times the Run has been assigned to a Pod
    /// (0 before the first assignment). The owner registers at this
    /// attempt; a higher one fences every older registration.
    pub attempt: u64,
}

impl Default for Life {
    fn default() -> Self {
        Self {
            phase: Phase::Pending,
            reason: None,
            attempt: 0,
        }
    }
}

/// What the rules need to know about a Run besides its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rules {
    /// The Run's mode.
    pub mode: ModeKind,
    /// `spec.retryPolicy.maxRetries`.
    pub max_retries: u32,
    /// `spec.termination.mode`.
    pub termination: Option<TerminationMode>,
    /// `spec.retryPolicy.onExitCodes`: the non-zero exit codes of a task
    /// that are retried (none unless the policy names them).
    pub retry_exit_codes: ExitCodes,
}

/// A set of process exit codes (0–255: a shell's `128 + N` for signal N
/// included), small enough to copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ExitCodes([u64; 4]);

impl ExitCodes {
    /// No code.
    pub const NONE: Self = Self([0; 4]);

    /// The codes of `codes` that are exit codes (0–255); `None` names the
    /// first that is not.
    pub fn of(codes: &[i32]) -> Result<Self, i32> {
        let mut set = Self::NONE;
        for &c in codes {
            let bit = u8::try_from(c).map_err(|_| c)?;
            set.0[usize::from(bit / 64)] |= 1 << (bit % 64);
        }
        Ok(set)
    }

    /// Whether `code` is in the set.
    pub fn contains(self, code: i32) -> bool {
        u8::try_from(code).is_ok_and(|b| self.0[usize::from(b / 64)] & (1 << (b % 64)) != 0)
    }
}

/// Something that happened to a Run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event<'a> {
    /// The spec fails validation (the message says why).
    Invalid(&'a str),
    /// A scheduling cycle found no Pod for the Run.
    Unplaced {
        /// The `Pending` reason the scheduler gave.
        reason: Reason,
        /// Its message (which Pods were turned away for what).
        message: &'a str,
    },
    /// The Runtime the Run names does not exist.
    RuntimeMissing {
        /// `spec.runtime`.
        runtime: &'a str,
        /// Where it was looked for.
        searched: &'a str,
    },
    /// The scheduler assigned the Run to `pod`.
    Assigned {
        /// Pod name.
        pod: &'a str,
    },
    /// The owner started registering.
    RegisterStarted,
    /// The owner registered (or opened) the Run at its attempt.
    Registered,
    /// Registering or opening failed.
    RegisterFailed(&'a str),
    /// The owner's registration failed after it was registered.
    RuntimeFailed(&'a str),
    /// The owner reported idle expiry.
    IdleExpired,
    /// `spec.timeout` (seconds) elapsed.
    TimedOut {
        /// The limit.
        seconds: u32,
    },
    /// The Run was not Ready within its registration deadline after it was
    /// assigned (its owner never registered it).
    RegistrationExpired {
        /// The deadline.
        seconds: u64,
        /// The owner Pod.
        pod: &'a str,
    },
    /// The owner Pod is gone (deleted, replaced, unreachable past its grace).
    OwnerLost {
        /// Pod name.
        pod: &'a str,
    },
    /// A Ready session is gone from its (living) owner, which restarted.
    SessionLost,
    /// `spec.termination` is set (the mode is in [`Rules::termination`]).
    Terminate,
    /// The owner finished draining.
    Drained,
    /// A task's process started on its owner.
    TaskStarted,
    /// A task's process exited with `code` (a shell's `128 + N` when signal
    /// N ended it).
    TaskExited {
        /// Its exit code.
        code: i32,
    },
    /// A task's process exited (with `code`), or a session drained (no
    /// code), and its artifacts could not be exported: `invalid` (a file
    /// that cannot be an artifact) or the store did not take them in time;
    /// `why` says which file or what failed.
    ArtifactsFailed {
        /// The task's exit code.
        code: Option<i32>,
        /// The directory is invalid (else the store failed).
        invalid: bool,
        /// The message.
        why: &'a str,
    },
    /// A task's process could not be started on its owner.
    StartFailed(&'a str),
    /// A started task's process is gone from its (living) owner without an
    /// exit: the owner or its Runtime Server restarted.
    TaskLost(&'a str),
}

/// A change of a Run's life, with the message that explains it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    /// New phase.
    pub phase: Phase,
    /// Its reason.
    pub reason: Reason,
    /// New attempt.
    pub attempt: u64,
    /// Human-readable explanation (may be empty).
    pub message: String,
}

impl Transition {
    /// The life after the transition.
    pub fn life(&self) -> Life {
        Life {
            phase: self.phase,
            reason: Some(self.reason),
            attempt: self.attempt,
        }
    }

    /// Whether the Run no longer has an owner: a `Pending` Run is never
    /// assigned.
    pub fn clears_assignment(&self) -> bool {
        self.phase == Phase::Pending
    }
}

/// How an owner stops serving a Run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// Let accepted work finish (bounded by the invocation or operation
    /// timeout).
    Drain,
    /// Cancel accepted work.
    Cancel,
}

/// How a deleted Run is released: as its termination says, and cancelled
/// when it names none.
pub fn release_on_delete(termination: Option<TerminationMode>) -> Stop {
    match termination {
        Some(TerminationMode::Drain) => Stop::Drain,
        Some(TerminationMode::Immediate) | None => Stop::Cancel,
    }
}

/// The transition `event` causes, or `None` when it does not apply in this
/// phase (terminal phases absorb everything).
pub fn apply(life: &Life, rules: &Rules, event: &Event<'_>) -> Option<Transition> {
    use Phase::*;
    let phase = life.phase;
    if phase.is_terminal() {
        return None;
    }
    let to = |phase: Phase, reason: Reason, message: String| {
        Some(Transition {
            phase,
            reason,
            attempt: life.attempt,
            message,
        })
    };
    match *event {
        Event::Invalid(why) => to(Failed, Reason::InvalidSpec, why.to_owned()),
        Event::Unplaced { reason, message } if phase == Pending => to(
            Pending,
            // A Run waiting after owner loss keeps saying so.
            match life.reason {
                Some(Reason::OwnerLost) => Reason::OwnerLost,
                _ => reason,
            },
            message.to_owned(),
        ),
        Event::RuntimeMissing { runtime, searched } if phase == Pending => to(
            Pending,
            Reason::RuntimeNotFound,
            format!("Runtime {runtime:?} not found in {searched}"),
        ),
        Event::Assigned { pod } if phase == Pending => Some(Transition {
            phase: Scheduled,
            reason: Reason::Scheduled,
            attempt: life.attempt + 1,
            message: format!("assigned to Pod {pod}"),
        }),
        Event::RegisterStarted if phase == Scheduled => {
            to(Running, Reason::Registering, String::new())
        }
        Event::Registered if matches!(phase, Scheduled | Running) => {
            to(Ready, Reason::Registered, String::new())
        }
        Event::RegisterFailed(why) if matches!(phase, Scheduled | Running | Ready) => {
            to(Failed, Reason::RegistrationFailed, why.to_owned())
        }
        Event::RuntimeFailed(why) if matches!(phase, Running | Ready) => {
            to(Failed, Reason::RuntimeFailed, why.to_owned())
        }
        Event::IdleExpired if matches!(phase, Running | Ready) => to(
            Timeout,
            Reason::IdleTimeout,
            "no activity within idleTimeoutSeconds".into(),
        ),
        Event::TimedOut { seconds } => to(
            Timeout,
            Reason::RunTimeout,
            format!("spec.timeout of {seconds}s elapsed"),
        ),
        Event::OwnerLost { pod } if phase != Pending => {
            Some(owner_lost(life, rules, format!("owner Pod {pod} is gone")))
        }
        Event::TaskLost(why)
            if matches!(phase, Scheduled | Running) && rules.mode == ModeKind::Task =>
        {
            Some(owner_lost(life, rules, why.to_owned()))
        }
        Event::RegistrationExpired { seconds, pod } if matches!(phase, Scheduled | Running) => {
            Some(registration_expired(life, rules, seconds, pod))
        }
        Event::SessionLost if phase == Ready && rules.mode == ModeKind::Session => to(
            Failed,
            Reason::SessionLost,
            "the session's processes and queue died with its owner, which restarted".into(),
        ),
        Event::Terminate => match (phase, rules.termination?) {
            (Pending, _) => to(
                Cancelled,
                Reason::Terminated,
                "terminated before it was scheduled".into(),
            ),
            (Finalizing, TerminationMode::Drain) => None,
            (_, TerminationMode::Drain) => to(Finalizing, Reason::Draining, String::new()),
            (_, TerminationMode::Immediate) => to(Cancelled, Reason::Terminated, String::new()),
        },
        Event::Drained if phase == Finalizing => to(Succeeded, Reason::Drained, String::new()),
        Event::TaskStarted if phase == Scheduled && rules.mode == ModeKind::Task => {
            to(Running, Reason::Started, String::new())
        }
        // An exit may be the first word of a task that was quick.
        Event::TaskExited { code }
            if matches!(phase, Scheduled | Running) && rules.mode == ModeKind::Task =>
        {
            Some(task_exited(life, rules, code))
        }
        // Never retried: the same directory fails the same way, and a store
        // past its deadline is the operator's to fix.
        Event::ArtifactsFailed { code, invalid, why }
            if (matches!(phase, Scheduled | Running) && rules.mode == ModeKind::Task)
                || (phase == Finalizing && rules.mode == ModeKind::Session) =>
        {
            Some(Transition {
                phase: Failed,
                reason: if invalid {
                    Reason::ArtifactInvalid
                } else {
                    Reason::ArtifactExportFailed
                },
                attempt: life.attempt,
                message: match code {
                    Some(code) => format!("exited with code {code}; {why}"),
                    None => format!("drained; {why}"),
                },
            })
        }
        Event::StartFailed(why)
            if matches!(phase, Scheduled | Running) && rules.mode == ModeKind::Task =>
        {
            let (phase, message) = if rules.termination.is_some() {
                (Cancelled, format!("{why}; termination requested"))
            } else {
                retry_or_fail(life, rules, why)
            };
            Some(Transition {
                phase,
                reason: Reason::StartFailed,
                attempt: life.attempt,
                message,
            })
        }
        _ => None,
    }
}

/// A task's exit: `Succeeded` on 0; another code is `Failed`, or placed
/// again when the retry policy names that code and retries are left.
fn task_exited(life: &Life, rules: &Rules, code: i32) -> Transition {
    let exited = format!("exited with code {code}");
    let (phase, reason, message) = if code == 0 {
        (Phase::Succeeded, Reason::Completed, exited)
    } else if rules.retry_exit_codes.contains(code) && rules.termination.is_none() {
        let (phase, message) = retry_or_fail(life, rules, &exited);
        (phase, Reason::NonZeroExit, message)
    } else {
        (Phase::Failed, Reason::NonZeroExit, exited)
    };
    Transition {
        phase,
        reason,
        attempt: life.attempt,
        message,
    }
}

/// How long a Run its owner placed back in `Pending` (a task that failed
/// to start, exited with a code the retry policy names, or was lost) waits
/// before it is placed again: one second, doubling with each attempt, at
/// most a minute.
pub fn retry_backoff(attempt: u64) -> std::time::Duration {
    let doublings = attempt.saturating_sub(1).min(6) as u32;
    std::time::Duration::from_secs(1 << doublings).min(std::time::Duration::from_secs(60))
}

/// Whether a Run in `phase` is due for deletion: it ended `finished_for`
/// ago (`None`: not known to have ended) and its
/// `ttlSecondsAfterFinished` is `ttl` (`None`: kept until deleted).
pub fn ttl_elapsed(
    phase: Phase,
    ttl: Option<u32>,
    finished_for: Option<std::time::Duration>,
) -> bool {
    match (ttl, finished_for) {
        (Some(ttl), Some(f)) => {
            phase.is_terminal() && f >= std::time::Duration::from_secs(ttl.into())
        }
        _ => false,
    }
}

/// How long an assigned Run may take to become `Ready` (its owner
/// registers a function, opens a session) before it is placed again.
pub fn registration_deadline(mode: ModeKind) -> std::time::Duration {
    std::time::Duration::from_secs(match mode {
        // Imports of a large Python module, a cold worker.
        ModeKind::Function | ModeKind::Task => 120,
        // Opening a session is creating a directory.
        ModeKind::Session => 60,
    })
}

/// A Run its owner never made `Ready` in time: cancelled when terminating,
/// else placed again (a session too: nothing of it exists yet) while
/// retries are left. The new attempt fences a late registration of the old
/// one.
fn registration_expired(life: &Life, rules: &Rules, seconds: u64, pod: &str) -> Transition {
    let late = format!("not Ready within {seconds}s of its assignment to Pod {pod}");
    let (phase, message) = if rules.termination.is_some() {
        (Phase::Cancelled, format!("{late}; termination requested"))
    } else {
        retry_or_fail(life, rules, &late)
    };
    Transition {
        phase,
        reason: Reason::RegistrationTimeout,
        attempt: life.attempt,
        message,
    }
}

/// Owner loss of an assigned Run (`gone` says how): a Run being terminated
/// is cancelled, a session fails (a workspace never moves), a function or
/// task Run is placed again while retries are left.
fn owner_lost(life: &Life, rules: &Rules, gone: String) -> Transition {
    let (phase, message) = if rules.termination.is_some() || life.phase == Phase::Finalizing {
        (Phase::Cancelled, format!("{gone}; termination requested"))
    } else if rules.mode == ModeKind::Session {
        (
            Phase::Failed,
            format!("{gone}; a session's workspace does not move"),
        )
    } else {
        retry_or_fail(life, rules, &gone)
    };
    Transition {
        phase,
        reason: Reason::OwnerLost,
        attempt: life.attempt,
        message,
    }
}

/// After `what` happened to an assigned Run: back to `Pending` (placed
/// again at the next attempt) while `attempt ≤ maxRetries`, `Failed` after
/// that; the message says which.
fn retry_or_fail(life: &Life, rules: &Rules, what: &str) -> (Phase, String) {
    let retries = u64::from(rules.max_retries);
    if life.attempt <= retries {
        (
            Phase::Pending,
            format!(
                "{what}; rescheduling (attempt {} of {})",
                life.attempt + 1,
                retries + 1
            ),
        )
    } else {
        (
            Phase::Failed,
            format!("{what}, and the retry policy ({retries} retries) is exhausted"),
        )
    }
}

#[cfg(test)]
mod tests;
