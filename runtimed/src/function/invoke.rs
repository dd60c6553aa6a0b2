//! Serving one invocation: fencing (gateway) or registration id (gRPC)
//! first, then the Run's namespace/Runtime, readiness, input bounds, the
//! one-in-flight rule, and the backend call under its deadline or until the
//! registration is cancelled.

use std::time::{Duration, Instant};

use super::backend::InvokeError;
use super::engine::Engine;
use super::error::EngineError;
use super::registered::{Registered, State};
use crate::registration::{Fence, IdCheck, check_id};

/// One invocation request.
#[derive(Debug, Clone, Copy)]
pub struct Invocation<'a> {
    /// Run UID.
    pub run_uid: &'a str,
    /// Fencing headers (dataplane).
    pub fence: Option<Fence<'a>>,
    /// Registration id (gRPC).
    pub registration_id: Option<&'a str>,
    /// Namespace and Runtime from the request path.
    pub namespace_runtime: Option<(&'a str, &'a str)>,
    /// Invocation id, for logs.
    pub invocation_id: &'a str,
    /// JSON input.
    pub input: &'a [u8],
    /// Caller's tighter deadline.
    pub timeout: Option<Duration>,
}

/// Checks everything that does not need the backend.
fn admit(f: &Registered, call: &Invocation<'_>) -> Result<(), EngineError> {
    if let Some(id) = call.registration_id
        && check_id(Some(&f.record), id) != IdCheck::Current
    {
        return Err(EngineError::StaleRegistration);
    }
    if let Some((ns, rt)) = call.namespace_runtime
        && (f.run.namespace != ns || f.run.runtime != rt)
    {
        return Err(EngineError::WrongRun);
    }
    match f.state().0 {
        State::Ready => {}
        State::Draining => return Err(EngineError::NotReady("draining")),
        State::Failed => return Err(EngineError::NotReady("failed")),
    }
    if call.input.len() > f.bounds.max_input {
        return Err(EngineError::TooLarge(call.input.len()));
    }
    if let Err(e) = serde_json::from_slice::<serde::de::IgnoredAny>(call.input) {
        return Err(EngineError::InvalidJson(e.to_string()));
    }
    Ok(())
}

impl Engine {
    /// Serves one invocation. `fence` comes from the gateway's headers;
    /// `registration_id` from gRPC callers.
    pub async fn invoke(&self, call: Invocation<'_>) -> Result<Vec<u8>, EngineError> {
        let f = match call.fence {
            Some(fence) => self
                .table()
                .fenced(fence, call.run_uid, &self.pod().uid)
                .map_err(EngineError::Fenced)?,
            None => self
                .table()
                .get(call.run_uid)
                .ok_or(EngineError::NotRegistered)?,
        };
        admit(&f, &call)?;
        let _permit = f
            .permit
            .clone()
            .try_acquire_owned()
            .map_err(|_| EngineError::Busy)?;
        let timeout = call
            .timeout
            .map_or(f.bounds.timeout, |t| t.min(f.bounds.timeout));
        let mut cancelled = f.cancel.subscribe();
        let started = Instant::now();
        let result = {
            let mut backend = f.backend.lock().await;
            tokio::select! {
                r = backend.invoke(call.input, timeout, f.bounds.max_output) => r.map_err(EngineError::from),
                _ = cancelled.wait_for(|c| *c) => Err(EngineError::NotReady("cancelled")),
            }
        };
        f.touch();
        let outcome = match &result {
            Ok(_) => "ok",
            Err(EngineError::Invoke(InvokeError::Function { .. })) => "function_error",
            Err(EngineError::Invoke(InvokeError::Timeout(_))) => "timeout",
            Err(_) => "error",
        };
        tracing::info!(
            run_uid = %f.run.uid,
            invocation_id = %call.invocation_id,
            backend = ?f.kind,
            outcome,
            duration_ms = started.elapsed().as_millis() as u64,
            "invocation finished"
        );
        result
    }
}
