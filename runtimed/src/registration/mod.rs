//! Registrations, whatever their mode: one [`Table`] type keyed by Run UID
//! that function registrations and sessions both keep, the pure rules it
//! applies ([`rules`]: idempotent / conflict / supersede / stale, registration
//! ids, gateway fencing), and the one error a refused registration returns.

pub mod rules;
pub mod table;

pub use rules::{Fence, FenceError, IdCheck, Record, check_id};
pub use table::{Plan, Registration, Table};

use std::collections::HashMap;

use kruntimes_proto::agent::v1 as agent;
use kruntimes_proto::runtime::v1::{RunRef, Source};

/// Why an assignment (a function registered, a session opened) was
/// refused; the Agent service maps it onto status codes.
#[derive(Debug, thiserror::Error)]
pub enum RegisterError {
    /// Malformed request (handler, path, runtime, missing fields).
    #[error("invalid registration: {0}")]
    Invalid(String),
    /// Same attempt, different inputs.
    #[error("attempt {0} is already registered with different inputs")]
    Conflict(u64),
    /// A newer attempt is registered.
    #[error("attempt {requested} is older than registered attempt {current}")]
    Stale {
        /// Attempt of the request.
        requested: u64,
        /// Current attempt.
        current: u64,
    },
    /// The handler failed to load, or the Runtime Server refused it.
    #[error("{0}")]
    Load(String),
    /// The Runtime Server does not answer (worth retrying).
    #[error("the runtime server is unavailable: {0}")]
    Unavailable(String),
}

/// How a registration ends when it is released.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// Let the running invocation or operation (and, for a session, the
    /// queued ones) finish first, bounded by their deadlines.
    Drain,
    /// End what runs at once (its process tree killed) and drop what waits.
    Cancel,
}

/// A release that named an older registration than the one held: it never
/// touches the newer one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("registration id is stale")]
pub struct StaleRegistration;

/// What every assignment carries, whatever its mode, validated: the Run
/// (addressable on the public API), the attempt, the digest of its inputs,
/// its source and environment.
#[derive(Debug, Clone, PartialEq)]
pub struct Assignment {
    /// The Run.
    pub run: RunRef,
    /// Registration attempt.
    pub attempt: u64,
    /// Digest of the immutable inputs.
    pub digest: String,
    /// Inline source, if any.
    pub source: Option<Source>,
    /// The Run's environment.
    pub env: HashMap<String, String>,
    /// Artifacts to stage into its working directory before it starts.
    pub inputs: Vec<agent::InputArtifact>,
}

/// The mode an assignment asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum Mode {
    /// Register a function.
    Function(agent::FunctionAssignment),
    /// Open a session.
    Session(agent::SessionAssignment),
    /// Start a task.
    Task(agent::TaskAssignment),
}

/// Validates an `Assign` request into what both modes take.
pub fn assignment(req: agent::AssignRequest) -> Result<(Assignment, Mode), RegisterError> {
    let run = addressable_run(req.run.as_ref())?;
    let mode = match req.mode {
        Some(agent::assign_request::Mode::Function(f)) => Mode::Function(f),
        Some(agent::assign_request::Mode::Session(s)) => Mode::Session(s),
        Some(agent::assign_request::Mode::Task(t)) => Mode::Task(t),
        None => return Err(RegisterError::Invalid("mode is required".into())),
    };
    let a = Assignment {
        run,
        attempt: req.attempt,
        digest: req.digest,
        source: req.source,
        env: req.env,
        inputs: req.inputs,
    };
    Ok((a, mode))
}

/// The Run of a registration request, refused unless its namespace, Runtime
/// and UID can address it on the public API.
pub fn addressable_run(run: Option<&RunRef>) -> Result<RunRef, RegisterError> {
    let run = run.ok_or_else(|| RegisterError::Invalid("run is required".into()))?;
    // The session route accepts exactly the same segments as the invoke route.
    let path = format!(
        "/v1/namespaces/{}/runtimes/{}/runs/{}:invoke",
        run.namespace, run.runtime, run.uid
    );
    match kruntimes_proto::api::parse_path(&path) {
        Ok(_) => Ok(run.clone()),
        Err(_) => Err(RegisterError::Invalid(
            "namespace, runtime or uid is malformed".into(),
        )),
    }
}

#[cfg(test)]
mod tests;
