//! The persistent Python worker of a registration: one interpreter imports
//! the handler once and serves invocations over a framed pipe protocol
//! ([`kruntimes_proto::runtime::worker`], [`worker`]), with warm spares
//! ready for the next import ([`spare`]). Over the fast path the worker's
//! pipes are leased to runtimed ([`PythonFunction::lease`]) while the
//! server keeps the process and kills its tree when the lease ends.
//!
//! Callers never share an exchange: an invocation holds the worker from
//! its request to its reply. Replies carry the invocation's sequence
//! number; one that does not match is an error and the worker is replaced.
//! A crash, a timeout, oversized output or a caller that goes away
//! mid-call discards the worker's whole process tree; the next invocation
//! starts a fresh one.

pub mod spare;
pub mod worker;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use kruntimes_proto::runtime::worker::Answer;
use tokio::sync::{Mutex, watch};
use tokio::time::Instant;

use self::spare::SparePool;
use self::worker::Process;
use super::{InvokeError, Spec, StartError};
use crate::contain::Shim;
use crate::logs;

/// What starting a worker needs besides the registration.
#[derive(Debug, Clone)]
pub struct Interpreter {
    /// The shim every process runs under.
    pub shim: Shim,
    /// The Python executable.
    pub python: PathBuf,
    /// Warm spares, when enabled.
    pub spares: Option<Arc<SparePool>>,
}

/// A registration's Python worker.
#[derive(Debug)]
pub struct PythonFunction {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    spec: Spec,
    interpreter: Interpreter,
    /// The worker; an exchange holds it from request to reply.
    slot: Mutex<Option<Process>>,
    running: AtomicBool,
    /// The worker's pipes are runtimed's (a lease holds the process).
    leased: AtomicBool,
    seq: AtomicU64,
    stopped: watch::Sender<bool>,
}

impl Inner {
    async fn start(&self) -> Result<Process, StartError> {
        let spec = &self.spec;
        let interp = &self.interpreter;
        let spare = interp.spares.as_ref().and_then(|pool| pool.take());
        let mut process = match spare {
            Some(mut p) => match p.load(spec).await {
                Ok(()) => p,
                Err(e) => {
                    p.discard().await;
                    return Err(StartError::Io(e));
                }
            },
            None => worker::spawn(
                &interp.shim,
                &interp.python,
                &spec.workdir,
                &spec.env,
                Some((&spec.handler.module, &spec.handler.function)),
                logs::Label::new(&spec.run_uid),
            )?,
        };
        match process.ready(spec.start_timeout).await {
            Ok(()) => Ok(process),
            Err(e) => {
                process.discard().await;
                Err(e)
            }
        }
    }

    /// One invocation, holding the worker throughout. If the future is
    /// dropped before the reply (its caller went away), the worker's pipes
    /// may be mid-frame: [`Exchange`] kills its tree on the way out, and the
    /// next invocation starts a fresh worker.
    async fn exchange(
        &self,
        input: &[u8],
        deadline: Instant,
        max_output: usize,
    ) -> Result<Vec<u8>, InvokeError> {
        let mut held = Exchange {
            slot: self.slot.lock().await,
            running: &self.running,
            done: false,
        };
        if *self.stopped.borrow() {
            held.done = true;
            return Err(InvokeError::Stopped);
        }
        if self.leased.load(Ordering::Acquire) {
            held.done = true;
            return Err(InvokeError::Leased);
        }
        let timeout = deadline.saturating_duration_since(Instant::now());
        let mut stopped = self.stopped.subscribe();
        let seq = self.seq.fetch_add(1, Ordering::Relaxed) + 1;
        let slot = &mut held.slot;
        let work = async {
            if slot.is_none() {
                tracing::info!(run_uid = %self.spec.run_uid, "starting python worker");
                let p = self
                    .start()
                    .await
                    .map_err(|e| InvokeError::Crashed(e.to_string()))?;
                **slot = Some(p);
                self.running.store(true, Ordering::Release);
            }
            match slot.as_mut() {
                Some(p) => p.exchange(seq, input, max_output).await,
                None => Err(InvokeError::Crashed("worker not running".into())),
            }
        };
        let outcome = tokio::select! {
            r = tokio::time::timeout_at(deadline, work) => {
                r.unwrap_or(Err(InvokeError::timeout(timeout)))
            }
            _ = stopped.wait_for(|s| *s) => Err(InvokeError::Stopped),
        };
        let answer = match outcome {
            // The server looks at the directory itself (`artifacts_left`).
            Ok(Answer::Output { body, .. }) => Ok(body),
            Ok(Answer::Raised { kind, message }) => Err(InvokeError::function(kind, message)),
            Ok(Answer::Unserializable(why)) => Err(InvokeError::InvalidOutput(why)),
            Err(e) => {
                // Timeouts, crashes, oversized output and replies out of
                // step all leave the pipe in an unknown state.
                if let Some(p) = held.slot.take() {
                    p.discard().await;
                }
                self.running.store(false, Ordering::Release);
                Err(e)
            }
        };
        held.done = true;
        answer
    }
}

/// The worker as one exchange holds it. Dropped before the exchange is
/// done — the caller went away mid-call — it kills the worker's tree, whose
/// pipes may hold half a frame or a reply nobody will read.
struct Exchange<'a> {
    slot: tokio::sync::MutexGuard<'a, Option<Process>>,
    running: &'a AtomicBool,
    done: bool,
}

impl Drop for Exchange<'_> {
    fn drop(&mut self) {
        if !self.done
            && let Some(mut p) = self.slot.take()
        {
            // Closing the shim's control pipe kills the tree; the shim is
            // reaped in the background.
            p.kill();
            self.running.store(false, Ordering::Release);
        }
    }
}

impl PythonFunction {
    /// Starts the worker and waits until the handler is imported.
    pub async fn start(spec: Spec, interpreter: Interpreter) -> Result<Self, StartError> {
        let inner = Arc::new(Inner {
            spec,
            interpreter,
            slot: Mutex::new(None),
            running: AtomicBool::new(false),
            leased: AtomicBool::new(false),
            seq: AtomicU64::new(0),
            stopped: watch::channel(false).0,
        });
        let process = inner.start().await?;
        *inner.slot.lock().await = Some(process);
        inner.running.store(true, Ordering::Release);
        Ok(Self { inner })
    }

    /// Runs one invocation. Dropping the future ends it at once: the
    /// worker's tree is killed (see [`Inner::exchange`]), never left to
    /// finish a call nobody waits for.
    pub async fn invoke(
        &self,
        input: Vec<u8>,
        timeout: Duration,
        max_output: usize,
    ) -> Result<Vec<u8>, InvokeError> {
        let deadline = Instant::now() + timeout;
        self.inner.exchange(&input, deadline, max_output).await
    }

    /// Leases the worker (starting one first if none runs): the process
    /// moves into the lease, and invocations through the server are refused
    /// until it ends.
    pub async fn lease(&self) -> Result<Lease, InvokeError> {
        let mut slot = self.inner.slot.lock().await;
        if *self.inner.stopped.borrow() {
            return Err(InvokeError::Stopped);
        }
        if self.inner.leased.load(Ordering::Acquire) {
            return Err(InvokeError::Leased);
        }
        let process = match slot.take() {
            Some(p) => p,
            None => self
                .inner
                .start()
                .await
                .map_err(|e| InvokeError::Crashed(e.to_string()))?,
        };
        self.inner.leased.store(true, Ordering::Release);
        self.inner.running.store(true, Ordering::Release);
        Ok(Lease {
            process: Some(process),
            inner: self.inner.clone(),
        })
    }

    /// Whether a worker process runs now.
    pub fn worker_running(&self) -> bool {
        self.inner.running.load(Ordering::Acquire)
    }

    /// Stops the worker: an exchange in flight ends at once, then the
    /// worker's tree is killed.
    pub async fn stop(&self) {
        let _ = self.inner.stopped.send(true);
        if let Some(p) = self.inner.slot.lock().await.take() {
            p.discard().await;
        }
        self.inner.running.store(false, Ordering::Release);
    }
}

/// A worker whose pipes runtimed holds. Ending it (or dropping it) kills
/// the worker's tree: its pipes are in a state only runtimed knew.
#[derive(Debug)]
pub struct Lease {
    process: Option<Process>,
    inner: Arc<Inner>,
}

impl Lease {
    /// The worker's stdin and stdout, to hand over.
    pub fn pipes(&self) -> Option<[std::os::fd::BorrowedFd<'_>; 2]> {
        self.process.as_ref().map(Process::pipes)
    }

    /// Resolves when the registration is stopped (unregistered).
    pub async fn stopped(&self) {
        let mut stopped = self.inner.stopped.subscribe();
        let _ = stopped.wait_for(|s| *s).await;
    }

    /// Ends the lease: how the worker ended (it crashed, or is killed now).
    pub async fn end(mut self) -> String {
        let Some(mut p) = self.process.take() else {
            return "killed".into();
        };
        let exit = p
            .ended()
            .await
            .map_or_else(|| "killed".into(), |s| s.to_string());
        p.discard().await;
        self.release();
        exit
    }

    fn release(&self) {
        self.inner.running.store(false, Ordering::Release);
        self.inner.leased.store(false, Ordering::Release);
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(mut p) = self.process.take() {
            // Closing the control pipe kills the tree; the shim is reaped
            // in the background.
            p.kill();
        }
        self.release();
    }
}
