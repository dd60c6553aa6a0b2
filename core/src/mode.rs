//! The kinds of Runs and how they end: the two enums every decision
//! branches on (the API's `spec.mode` and `spec.termination.mode`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Which mode a valid Run has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
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

    /// Whether a Run of this mode holds a whole Pod: a session's processes
    /// and workspace share nothing with other Runs.
    pub fn exclusive(self) -> bool {
        self == Self::Session
    }
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
