//! Why an invocation or unregistration was not served.

use super::backend::InvokeError;
use crate::registration::FenceError;

/// Why an invocation was not served.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The fencing headers do not match this owner.
    #[error("stale owner: {0:?}")]
    Fenced(FenceError),
    /// Registration id is not the current one.
    #[error("registration id is stale")]
    StaleRegistration,
    /// Nothing registered for this Run here.
    #[error("run is not registered on this instance")]
    NotRegistered,
    /// The Run's namespace or Runtime differs from the request's.
    #[error("run does not belong to that namespace/runtime")]
    WrongRun,
    /// One invocation is already in flight.
    #[error("the function already has an in-flight invocation")]
    Busy,
    /// Draining, failed or cancelled.
    #[error("registration is {0}")]
    NotReady(&'static str),
    /// Input over the limit.
    #[error("input of {0} bytes exceeds the limit")]
    TooLarge(usize),
    /// Input is not JSON.
    #[error("input is not valid JSON: {0}")]
    InvalidJson(String),
    /// Backend failure.
    #[error(transparent)]
    Invoke(#[from] InvokeError),
}
