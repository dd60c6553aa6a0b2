//! The phases a Run goes through and the reasons given for them.

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
    /// Registered and invocable (function) or open (session).
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
    /// The phase as written in `status.phase`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "Pending",
            Self::Scheduled => "Scheduled",
            Self::Running => "Running",
            Self::Ready => "Ready",
            Self::Finalizing => "Finalizing",
            Self::Succeeded => "Succeeded",
            Self::Failed => "Failed",
            Self::Timeout => "Timeout",
            Self::Cancelled => "Cancelled",
        }
    }

    /// Whether the Run has ended.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            Self::Succeeded | Self::Failed | Self::Timeout | Self::Cancelled
        )
    }

    /// Whether the Run holds capacity on its Pod: from assignment until it
    /// ends.
    pub fn holds_capacity(self) -> bool {
        matches!(
            self,
            Self::Scheduled | Self::Running | Self::Ready | Self::Finalizing
        )
    }

    /// The phase the control plane publishes in its ownership table. An
    /// ended Run stays in the table as `FAILED` until it is deleted: its URL
    /// names a Run that exists but will not be served (503 `NotReady`),
    /// while a deleted Run's URL is unknown (404).
    pub fn table_phase(self) -> TablePhase {
        match self {
            Self::Pending => TablePhase::Pending,
            Self::Scheduled => TablePhase::Scheduled,
            Self::Running => TablePhase::Running,
            Self::Ready => TablePhase::Ready,
            Self::Finalizing => TablePhase::Draining,
            Self::Succeeded | Self::Failed | Self::Timeout | Self::Cancelled => TablePhase::Failed,
        }
    }
}

/// The phase of a Run in an ownership table (the gateways' routing table
/// and each owner's own): coarser than [`Phase`], and the same on the wire
/// (`kruntimes.ownership.v1.Phase`, mapped by `kruntimes-api`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TablePhase {
    /// Not assigned.
    Pending,
    /// Assigned, not registering yet.
    Scheduled,
    /// Registering.
    Running,
    /// Served.
    Ready,
    /// Draining before it ends.
    Draining,
    /// Not served (ended, or failed on its owner).
    Failed,
}

/// Machine-readable reasons (`status.reason`), one per rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// `Pending`: no ready Pod of the Runtime has a free run slot (a
    /// session needs an idle one), or the Runtime has no Pod yet.
    NoIdlePod,
    /// `Pending`: the Run's resource requests fit on no Pod with a free slot.
    InsufficientResources,
    /// `Pending`: a required affinity or anti-affinity term rules out every
    /// Pod that would otherwise fit.
    AffinityUnsatisfied,
    /// `Pending`: the Runtime the Run names does not exist.
    RuntimeNotFound,
    /// `Pending` (rescheduling), `Failed` or `Cancelled`: the owner is gone.
    OwnerLost,
    /// `Scheduled`: assigned to a Pod.
    Scheduled,
    /// `Running`: the owner is registering the Run.
    Registering,
    /// `Ready`: registered (function) or opened (session).
    Registered,
    /// `Finalizing`: draining after `termination: Drain`.
    Draining,
    /// `Succeeded`: accepted work finished after `Drain`.
    Drained,
    /// `Cancelled`: `termination: Immediate`, or termination before a Pod.
    Terminated,
    /// `Timeout`: `spec.timeout` elapsed.
    RunTimeout,
    /// `Timeout`: no activity within the idle timeout.
    IdleTimeout,
    /// `Failed`: the spec fails validation.
    InvalidSpec,
    /// `Failed`: the mode is not served.
    UnsupportedMode,
    /// `Failed`: registering or opening failed.
    RegistrationFailed,
    /// `Failed`: the owner's registration failed after it was Ready.
    RuntimeFailed,
    /// `Failed`: a Ready session's workspace is gone from its owner.
    SessionLost,
    /// `Pending` (rescheduling), `Failed` or `Cancelled`: the owner did not
    /// make the Run Ready within its registration deadline.
    RegistrationTimeout,
    /// `Running`: a task's process started on its owner.
    Started,
    /// `Succeeded`: a task's process exited with code 0.
    Completed,
    /// `Failed`, or `Pending` when the retry policy retries that exit code:
    /// a task's process exited with another code.
    NonZeroExit,
    /// `Failed`, or `Pending` while retries are left: a task's process could
    /// not be started on its owner.
    StartFailed,
    /// `Failed`: what a task left in its artifacts directory cannot be an
    /// artifact (a symbolic link, a file over the bounds; the message names
    /// it). Not retried: the same directory fails the same way.
    ArtifactInvalid,
    /// `Failed`: the artifact store did not take a task's artifacts before
    /// the export's deadline.
    ArtifactExportFailed,
}

impl Reason {
    /// Every reason, for parsing and tests.
    pub const ALL: [Reason; 25] = [
        Self::NoIdlePod,
        Self::InsufficientResources,
        Self::AffinityUnsatisfied,
        Self::RuntimeNotFound,
        Self::OwnerLost,
        Self::Scheduled,
        Self::Registering,
        Self::Registered,
        Self::Draining,
        Self::Drained,
        Self::Terminated,
        Self::RunTimeout,
        Self::IdleTimeout,
        Self::InvalidSpec,
        Self::UnsupportedMode,
        Self::RegistrationFailed,
        Self::RuntimeFailed,
        Self::SessionLost,
        Self::RegistrationTimeout,
        Self::Started,
        Self::Completed,
        Self::NonZeroExit,
        Self::StartFailed,
        Self::ArtifactInvalid,
        Self::ArtifactExportFailed,
    ];

    /// The reason as written to `status.reason`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NoIdlePod => "NoIdlePod",
            Self::InsufficientResources => "InsufficientResources",
            Self::AffinityUnsatisfied => "AffinityUnsatisfied",
            Self::RuntimeNotFound => "RuntimeNotFound",
            Self::OwnerLost => "OwnerLost",
            Self::Scheduled => "Scheduled",
            Self::Registering => "Registering",
            Self::Registered => "Registered",
            Self::Draining => "Draining",
            Self::Drained => "Drained",
            Self::Terminated => "Terminated",
            Self::RunTimeout => "RunTimeout",
            Self::IdleTimeout => "IdleTimeout",
            Self::InvalidSpec => "InvalidSpec",
            Self::UnsupportedMode => "UnsupportedMode",
            Self::RegistrationFailed => "RegistrationFailed",
            Self::RuntimeFailed => "RuntimeFailed",
            Self::SessionLost => "SessionLost",
            Self::RegistrationTimeout => "RegistrationTimeout",
            Self::Started => "Started",
            Self::Completed => "Completed",
            Self::NonZeroExit => "NonZeroExit",
            Self::StartFailed => "StartFailed",
            Self::ArtifactInvalid => "ArtifactInvalid",
            Self::ArtifactExportFailed => "ArtifactExportFailed",
        }
    }

    /// Why a Run found no Pod: the reasons a scheduling cycle gives.
    pub fn is_unplaced(self) -> bool {
        matches!(
            self,
            Self::NoIdlePod | Self::InsufficientResources | Self::AffinityUnsatisfied
        )
    }

    /// Parses `status.reason`; `None` for reasons this version does not know.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.as_str() == s)
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
