//! Registrations, whatever their mode: one [`Table`] type keyed by Run UID
//! that function registrations and sessions both keep, the pure rules it
//! applies ([`rules`]: idempotent / conflict / supersede / stale, registration
//! ids, gateway fencing), and the one error a refused registration returns.

pub mod rules;
pub mod table;

pub use rules::{
    Fence, FenceError, IdCheck, Record, RegisterDecision, check_fence, check_id, decide_register,
};
pub use table::{Plan, Registration, Table};

use kruntimes_proto::function::v1::RunRef;

/// Why a registration (function Register, session Open) was refused; the
/// gRPC services map it onto status codes.
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
