//! Serving one invocation: fencing first, then the Run's namespace/Runtime,
//! readiness, input bounds, the one-in-flight rule, and the call to the
//! Runtime Server under its deadline or until the registration is
//! cancelled.
//!
//! **A caller that goes away** (its connection closed, so the request's
//! future is dropped) ends its invocation at once: the call to the server
//! is dropped with it — the gRPC call cancelled, the direct socket or the
//! leased worker's connection closed — and the server kills the
//! invocation's process tree (a Python worker is replaced); the
//! one-in-flight permit, held by this future, is free for the next caller,
//! who gets its own answer. A Python function is called over the worker
//! fast path ([`super::fast`]) when the server offers it, anything else
//! with `InvokeFunction`: on the direct invoke path
//! ([`crate::runtime::direct`]) when the server offers it, over gRPC
//! otherwise.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kruntimes_proto::runtime::v1 as rt;
use kruntimes_proto::runtime::{Backend, InvokeError, ServerError, invoke};

use std::sync::atomic::Ordering;

use super::engine::Engine;
use super::error::EngineError;
use super::registered::{Registered, State};
use crate::artifacts::{Artifacts, Exported};
use crate::registration::Fence;
use crate::runtime::{Client, Direct};

/// How much longer than the invocation's deadline runtimed waits for the
/// Runtime Server's answer (the server kills the call at the deadline; this
/// covers a server that hangs).
const ANSWER_SLACK: Duration = Duration::from_secs(5);

/// One invocation request, as the gateway forwarded it.
#[derive(Debug, Clone, Copy)]
pub struct Invocation<'a> {
    /// Run UID.
    pub run_uid: &'a str,
    /// Fencing headers.
    pub fence: Fence<'a>,
    /// Namespace and Runtime from the request path.
    pub namespace: &'a str,
    /// Runtime from the request path.
    pub runtime: &'a str,
    /// Invocation id, for logs.
    pub invocation_id: &'a str,
    /// JSON input.
    pub input: &'a [u8],
}

/// Checks everything that does not need the Runtime Server.
fn admit(f: &Registered, call: &Invocation<'_>) -> Result<(), EngineError> {
    if f.run.namespace != call.namespace || f.run.runtime != call.runtime {
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

/// The server's answer — an outcome and its `artifacts_left`, or a call
/// that failed on the way — as the invocation's result.
fn answered(
    answer: Result<(kruntimes_proto::runtime::InvokeOutcome, bool), ServerError>,
) -> Result<(Vec<u8>, bool), EngineError> {
    match answer {
        Ok((outcome, left)) => outcome.map(|o| (o, left)).map_err(EngineError::from),
        Err(e) => Err(EngineError::of_server(e)),
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

/// The exchange with the Runtime Server — the output, and whether the call
/// left anything in its artifacts directory — and the way it went, for the
/// log. Dropping the future cancels the call (see the module doc).
async fn call_server(
    route: Route,
    f: &Registered,
    req: rt::InvokeFunctionRequest,
    timeout: Duration,
) -> (Result<(Vec<u8>, bool), EngineError>, &'static str) {
    let wait = timeout + ANSWER_SLACK;
    let mut client = match route {
        Route::Worker(socket) => {
            let result = super::fast::call(f, &socket, &req.input, timeout).await;
            return (result, "worker");
        }
        Route::Direct(direct, client) => match direct.connect().await {
            Ok(conn) => {
                let answer = direct.call(conn, &req, wait).await;
                return (answered(answer), "direct");
            }
            Err(e) => {
                tracing::debug!(error = %e, "direct invoke socket unreachable; calling over gRPC");
                client
            }
        },
        Route::Grpc(client) => client,
    };
    let result = match tokio::time::timeout(wait, client.functions.invoke_function(req)).await {
        Ok(answer) => answered(
            answer
                .map(|r| {
                    let r = r.into_inner();
                    let left = r.artifacts_left;
                    (invoke::decode(r), left)
                })
                .map_err(ServerError::from),
        ),
        Err(_) => {
            Err(InvokeError::Timeout("the runtime server did not answer in time".into()).into())
        }
    };
    (result, "grpc")
}

fn outcome_label(result: &Result<Invoked, EngineError>) -> &'static str {
    match result {
        Ok(_) => "ok",
        Err(EngineError::Artifacts { .. }) => "artifacts_failed",
        Err(EngineError::Invoke(InvokeError::Function { .. })) => "function_error",
        Err(EngineError::Invoke(InvokeError::Timeout(_))) => "timeout",
        Err(EngineError::Invoke(InvokeError::Crashed(_))) => "worker_crashed",
        Err(_) => "error",
    }
}

/// The end of one invocation, logged and counted however it ends: dropped
/// before it finished, it was abandoned by its caller.
struct Finish<'a> {
    f: &'a Registered,
    invocation_id: &'a str,
    started: Instant,
    path: &'static str,
    outcome: &'static str,
}

impl Drop for Finish<'_> {
    fn drop(&mut self) {
        self.f.touch();
        let elapsed = self.started.elapsed();
        crate::metrics::invocation(self.outcome, elapsed.as_secs_f64());
        tracing::info!(
            run_uid = %self.f.run.uid,
            invocation_id = %self.invocation_id,
            backend = self.f.kind.map_or("custom", Backend::as_str),
            path = self.path,
            outcome = self.outcome,
            duration_ms = elapsed.as_millis() as u64,
            "invocation finished"
        );
    }
}

/// An invocation's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invoked {
    /// The handler's JSON document.
    pub output: Vec<u8>,
    /// What it left in its artifacts directory, uploaded (named
    /// `invocations/{segment}/…` in its Run).
    pub artifacts: Vec<kruntimes_api::ArtifactRef>,
}

/// How long emptying a function's artifacts directory before a call may
/// take (a Runtime Server that does not answer in time: the call does not
/// run, 503).
const DISCARD_TIMEOUT: Duration = Duration::from_secs(10);

/// How much of the gateway's wait for an answer (the invocation timeout +
/// 5 s) an invocation's export may use at most, counted from the
/// invocation's start: the answer, or the export's failure, comes before
/// the gateway gives up on the owner.
const EXPORT_SLACK: Duration = Duration::from_secs(4);

/// Empties `f`'s artifacts directory before a call, holding the
/// one-in-flight permit to the end even if the caller goes away meanwhile:
/// no next call starts before the directory is empty. Gives the permit
/// back.
async fn discard(
    artifacts: Arc<Artifacts>,
    link: Arc<crate::runtime::Link>,
    f: Arc<Registered>,
    permit: tokio::sync::OwnedSemaphorePermit,
) -> Result<tokio::sync::OwnedSemaphorePermit, EngineError> {
    let work = tokio::spawn(async move {
        match tokio::time::timeout(DISCARD_TIMEOUT, artifacts.discard(&link, &f.run.uid)).await {
            Ok(Ok(())) => {
                f.dirty.store(false, Ordering::Release);
                Ok(permit)
            }
            Ok(Err(e)) => Err(EngineError::Unavailable(format!(
                "the function's artifacts directory could not be emptied: {e}"
            ))),
            Err(_) => Err(EngineError::Unavailable(format!(
                "the function's artifacts directory was not emptied in {} s",
                DISCARD_TIMEOUT.as_secs()
            ))),
        }
    });
    work.await
        .map_err(|e| EngineError::Unavailable(format!("emptying the artifacts directory: {e}")))?
}

/// The export of what one invocation left, once the handler answered,
/// within what is left of `budget` (see [`EXPORT_SLACK`]).
async fn export_invocation(
    artifacts: &Artifacts,
    link: &crate::runtime::Link,
    f: &Registered,
    invocation_id: &str,
    budget: Duration,
) -> Result<Vec<kruntimes_api::ArtifactRef>, EngineError> {
    let segment = kruntimes_artifacts::invocation_segment(invocation_id);
    let within = budget.min(artifacts.deadline).max(Duration::from_secs(1));
    match artifacts
        .export_invocation(link, &f.run.namespace, &f.run.uid, &segment, within)
        .await
    {
        Exported::Done(refs) => Ok(refs),
        Exported::Failed { reason, message } => Err(EngineError::Artifacts {
            invalid: reason == crate::artifacts::INVALID_REASON,
            message,
        }),
    }
}

impl Engine {
    /// Serves one invocation forwarded by the gateway.
    pub async fn invoke(&self, call: Invocation<'_>) -> Result<Invoked, EngineError> {
        let f = self
            .table()
            .fenced(call.fence, call.run_uid, &self.pod().uid)
            .map_err(EngineError::Fenced)?;
        admit(&f, &call)?;
        let started = Instant::now();
        // Held until this future ends, however it ends.
        let mut permit = f
            .permit
            .clone()
            .try_acquire_owned()
            .map_err(|_| EngineError::Busy)?;
        let link = self.link();
        // One invocation's files at a time: whatever an earlier call left
        // (its files, empty directories, a link in the directory's place)
        // goes first. Every call that may have run leaves it to empty.
        let artifacts = self.artifacts().filter(|_| f.request.artifacts);
        if let Some(a) = artifacts {
            if f.dirty.load(Ordering::Acquire) {
                permit = discard(a.clone(), self.link_arc(), f.clone(), permit).await?;
            }
            f.dirty.store(true, Ordering::Release);
        }
        let _permit = permit;
        let timeout = f.bounds.timeout;
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
        let leased = match f.kind {
            Some(Backend::Python) => link.worker_socket(),
            Some(Backend::Bash) | None => None,
        };
        let route = match (leased, link.direct()) {
            (Some(socket), _) => Route::Worker(socket),
            (None, Some(direct)) => Route::Direct(direct, link.client()),
            (None, None) => Route::Grpc(link.client()),
        };
        let mut finish = Finish {
            f: &f,
            invocation_id: call.invocation_id,
            started: Instant::now(),
            path: "",
            outcome: "abandoned",
        };
        let mut cancelled = f.cancel.subscribe();
        let served = async {
            let (result, path) = call_server(route, &f, req, timeout).await;
            finish.path = path;
            let (output, left) = result?;
            let artifacts = match artifacts {
                // Something to collect (files, empty directories, something
                // in the directory's place): exported, then emptied before
                // the next call.
                Some(a) if left => {
                    let budget = (timeout + EXPORT_SLACK).saturating_sub(started.elapsed());
                    export_invocation(a, link, &f, call.invocation_id, budget).await?
                }
                // Left empty: nothing to export or to empty.
                Some(_) => {
                    f.dirty.store(false, Ordering::Release);
                    Vec::new()
                }
                None => Vec::new(),
            };
            Ok(Invoked { output, artifacts })
        };
        let result = tokio::select! {
            result = served => result,
            _ = cancelled.wait_for(|c| *c) => Err(EngineError::Interrupted),
        };
        finish.outcome = outcome_label(&result);
        result
    }
}
