//! Serving one invocation: fencing (gateway) or registration id (gRPC)
//! first, then the Run's namespace/Runtime, readiness, input bounds, the
//! one-in-flight rule, and the call to the Runtime Server under its
//! deadline or until the registration is cancelled.
//!
//! The call runs in a task of its own that holds the one-in-flight permit:
//! a caller that goes away leaves its call to finish (or die at its
//! deadline), and the next caller gets 429 `Busy` meanwhile — never the
//! abandoned call's answer. A Python function is called over the worker
//! fast path ([`super::fast`]) when the server offers it, anything else
//! with `InvokeFunction`: on the direct invoke path
//! ([`crate::runtime::direct`]) when the server offers it, over gRPC
//! otherwise.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kruntimes_proto::runtime::v1 as rt;
use kruntimes_proto::runtime::v1::invoke_function_response::Outcome;

use super::backend::Kind;
use super::engine::Engine;
use super::error::{EngineError, InvokeError};
use super::registered::{Registered, State};
use crate::registration::{Fence, IdCheck, check_id};
use crate::runtime::{self, Client, Direct};

/// How much longer than the invocation's deadline runtimed waits for the
/// Runtime Server's answer (the server kills the call at the deadline; this
/// covers a server that hangs).
const ANSWER_SLACK: Duration = Duration::from_secs(5);

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

/// Checks everything that does not need the Runtime Server.
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

/// The server's answer, classified as the public error table needs it.
pub fn classify(
    answer: Result<rt::InvokeFunctionResponse, tonic::Status>,
    timeout: Duration,
) -> Result<Vec<u8>, EngineError> {
    match answer {
        Ok(r) => match r.outcome {
            Some(Outcome::Output(out)) => Ok(out),
            Some(Outcome::Error(e)) => Err(raised(e.kind, e.message)),
            None => Err(InvokeError::Crashed("the runtime server sent no outcome".into()).into()),
        },
        Err(s) => Err(failure(&s, timeout)),
    }
}

/// A handler that raised, bounded.
pub(super) fn raised(kind: String, message: String) -> EngineError {
    InvokeError::Function {
        kind: kruntimes_proto::api::truncate_utf8(kind, 128),
        message: kruntimes_proto::api::truncate_utf8(message, 1024),
    }
    .into()
}

/// A refusal or failure of the server's, as the public error table needs
/// it.
pub(super) fn failure(s: &tonic::Status, timeout: Duration) -> EngineError {
    use tonic::Code;
    let msg = s.message().to_owned();
    match s.code() {
        Code::DeadlineExceeded => InvokeError::Timeout(timeout).into(),
        Code::Aborted => InvokeError::Crashed(msg).into(),
        Code::OutOfRange => InvokeError::InvalidOutput(msg).into(),
        Code::InvalidArgument => InvokeError::InvalidInput(msg).into(),
        Code::Cancelled => EngineError::NotReady("cancelled"),
        Code::NotFound => EngineError::Unavailable("it does not hold this registration".into()),
        _ if runtime::unreachable(s) => EngineError::Unavailable(msg),
        _ => InvokeError::Crashed(msg).into(),
    }
}

/// How an invocation reaches its function.
enum Route {
    /// The leased worker's pipes, from the server's worker socket.
    Worker(PathBuf),
    /// `InvokeFunction` on the direct invoke path, or over gRPC when its
    /// socket cannot be reached (nothing sent yet).
    Direct(Arc<Direct>, Client),
    /// `InvokeFunction` over gRPC.
    Grpc(Client),
}

/// The exchange with the Runtime Server, owning what it needs: it runs to
/// the server's answer (or the slack past the deadline) even when the
/// caller has left. Also the way it went, for the log.
async fn call_server(
    route: Route,
    f: &Registered,
    req: rt::InvokeFunctionRequest,
    timeout: Duration,
) -> (Result<Vec<u8>, EngineError>, &'static str) {
    let wait = timeout + ANSWER_SLACK;
    let mut client = match route {
        Route::Worker(socket) => {
            let result = super::fast::call(f, &socket, &req.input, timeout).await;
            return (result, "worker");
        }
        Route::Direct(direct, client) => match direct.connect().await {
            Ok(conn) => {
                let answer = direct.call(conn, &req, wait).await;
                return (classify(answer, timeout), "direct");
            }
            Err(e) => {
                tracing::debug!(error = %e, "direct invoke socket unreachable; calling over gRPC");
                client
            }
        },
        Route::Grpc(client) => client,
    };
    let result = match tokio::time::timeout(wait, client.invoke_function(req)).await {
        Ok(answer) => classify(answer.map(tonic::Response::into_inner), timeout),
        Err(_) => Err(InvokeError::Timeout(timeout).into()),
    };
    (result, "grpc")
}

fn outcome_label(result: &Result<Vec<u8>, EngineError>) -> &'static str {
    match result {
        Ok(_) => "ok",
        Err(EngineError::Invoke(InvokeError::Function { .. })) => "function_error",
        Err(EngineError::Invoke(InvokeError::Timeout(_))) => "timeout",
        Err(EngineError::Invoke(InvokeError::Crashed(_))) => "worker_crashed",
        Err(_) => "error",
    }
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
        let permit = f
            .permit
            .clone()
            .try_acquire_owned()
            .map_err(|_| EngineError::Busy)?;
        let timeout = call
            .timeout
            .map_or(f.bounds.timeout, |t| t.min(f.bounds.timeout));
        let req = rt::InvokeFunctionRequest {
            run_uid: f.run.uid.clone(),
            handle: f.handle(),
            invocation_id: call.invocation_id.to_owned(),
            input: call.input.to_vec(),
            timeout_ms: u32::try_from(timeout.as_millis()).unwrap_or(u32::MAX),
            max_output_bytes: f.bounds.max_output as u64,
        };
        // Only the built-in Python backend leases its workers; everything
        // else goes through InvokeFunction.
        let link = self.link();
        let leased = match f.kind {
            Some(Kind::Python) => link.worker_socket(),
            Some(Kind::Bash) | None => None,
        };
        let route = match (leased, link.direct()) {
            (Some(socket), _) => Route::Worker(socket),
            (None, Some(direct)) => Route::Direct(direct, link.client()),
            (None, None) => Route::Grpc(link.client()),
        };
        let mut cancelled = f.cancel.subscribe();
        let registered: Arc<Registered> = f.clone();
        let started = Instant::now();
        let invocation_id = call.invocation_id.to_owned();
        let exchange = tokio::spawn(async move {
            let (result, path) = call_server(route, &registered, req, timeout).await;
            registered.touch();
            crate::metrics::invocation(outcome_label(&result), started.elapsed().as_secs_f64());
            tracing::info!(
                run_uid = %registered.run.uid,
                invocation_id = %invocation_id,
                backend = ?registered.kind,
                path,
                outcome = outcome_label(&result),
                duration_ms = started.elapsed().as_millis() as u64,
                "invocation finished"
            );
            drop(permit);
            result
        });
        tokio::select! {
            r = exchange => r.unwrap_or_else(|e| Err(InvokeError::Crashed(format!("invocation failed: {e}")).into())),
            _ = cancelled.wait_for(|c| *c) => Err(EngineError::NotReady("cancelled")),
        }
    }
}
