//! The functions this server holds, keyed by Run UID. runtimed decides
//! attempts and fencing; the server keeps the latest attempt only: the same
//! attempt again is idempotent, a higher one replaces the registration
//! (its processes killed, its directory replaced), a lower one is refused.
//! Each registration has a handle of its own, and a call naming another
//! handle never reaches it.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use kruntimes_proto::runtime::InvokeOutcome;
use tokio::sync::watch;

use super::{Backend, Interpreter, InvokeError, Loaded, Spec};
use crate::artifacts;
use crate::error::Error as RunError;
use crate::held::Held;
use crate::source;
use crate::validate::Register;

/// One registration.
#[derive(Debug)]
pub struct Registration {
    /// Run UID.
    pub run_uid: String,
    /// Its attempt.
    pub attempt: u64,
    /// The server's id of it.
    pub handle: String,
    /// Its working directory.
    pub workdir: PathBuf,
    /// Its artifacts directory, when registered with one: what one
    /// invocation leaves, collected and emptied by runtimed after it.
    pub artifacts: Option<artifacts::Location>,
    /// Held by each collection of that directory, from its walk to its
    /// emptying (one abandoned by runtimed is done before the next starts),
    /// and by the registration's end, which sets it: a collection that
    /// comes after finds the directory gone for good, never made again.
    pub collecting: Arc<std::sync::Mutex<bool>>,
    backend: Loaded,
    stopped: watch::Sender<bool>,
}

impl Registration {
    /// Whether a worker process serves it now.
    pub fn worker_running(&self) -> bool {
        self.backend.worker_running()
    }

    async fn stop(&self) {
        let _ = self.stopped.send(true);
        self.backend.stop().await;
        let _ = std::fs::remove_dir_all(&self.workdir);
        if let Some(a) = &self.artifacts {
            let mut gone = self.collecting.lock().unwrap_or_else(|p| p.into_inner());
            *gone = true;
            if let Err(e) = a.remove() {
                tracing::warn!(run_uid = %self.run_uid, error = %e, "the function's artifacts directory stays");
            }
        }
        crate::logs::remove_run_log(&self.run_uid);
    }
}

/// Every function registration of the server.
pub struct Functions {
    root: PathBuf,
    interpreter: Interpreter,
    held: Held<Registration>,
}

/// Where inline source goes when no path is given: the handler's module
/// file.
fn default_source_path(kind: Backend, module: &str) -> String {
    match kind {
        Backend::Python => format!("{}.py", module.replace('.', "/")),
        Backend::Bash => format!("{module}.sh"),
    }
}

impl Functions {
    /// An empty table whose working directories live under `root`.
    pub fn new(root: PathBuf, interpreter: Interpreter) -> Self {
        Self {
            root,
            interpreter,
            held: Held::default(),
        }
    }

    /// The current registration of a Run.
    pub fn get(&self, run_uid: &str) -> Option<Arc<Registration>> {
        self.held.get(run_uid)
    }

    /// Registers (see the module doc); returns the handle.
    pub async fn register(&self, req: Register) -> Result<String, RunError> {
        let _change = self.held.change().await;
        match self.get(&req.run_uid) {
            Some(r) if r.attempt == req.attempt => return Ok(r.handle.clone()),
            Some(r) if r.attempt > req.attempt => {
                return Err(RunError::Stale {
                    requested: req.attempt,
                    current: r.attempt,
                });
            }
            Some(r) => {
                tracing::info!(run_uid = %r.run_uid, old_attempt = r.attempt, attempt = req.attempt, "replacing registration");
                self.held.take(&r.run_uid);
                r.stop().await;
            }
            None => {}
        }
        let workdir = self.root.join(&req.run_uid);
        if workdir.exists() {
            std::fs::remove_dir_all(&workdir)?;
        }
        std::fs::create_dir_all(&workdir)?;
        // Beside the working directory, never in it, as a task's. Without
        // artifacts, whatever an earlier server left goes.
        let location = artifacts::Location::new(&self.root, &req.run_uid);
        let made = if req.artifacts {
            location.create().map(|_| Some(location.clone()))
        } else {
            location.remove().map(|()| None)
        };
        let prepared = match made {
            Ok(a) => self
                .prepare(&req, workdir.clone(), a.as_ref())
                .await
                .map(|b| (b, a)),
            Err(e) => Err(e.into()),
        };
        let (backend, artifacts) = match prepared {
            Ok(b) => b,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&workdir);
                let _ = location.remove();
                return Err(e);
            }
        };
        let reg = Arc::new(Registration {
            run_uid: req.run_uid.clone(),
            attempt: req.attempt,
            handle: format!("fn-{}", uuid::Uuid::new_v4().simple()),
            workdir,
            artifacts,
            collecting: Arc::default(),
            backend,
            stopped: watch::channel(false).0,
        });
        tracing::info!(run_uid = %reg.run_uid, attempt = reg.attempt, backend = req.kind.as_str(), "function registered");
        let handle = reg.handle.clone();
        self.held.insert(req.run_uid, reg);
        Ok(handle)
    }

    async fn prepare(
        &self,
        req: &Register,
        workdir: PathBuf,
        artifacts: Option<&artifacts::Location>,
    ) -> Result<Loaded, RunError> {
        if let Some((path, text)) = &req.source {
            let path = path
                .clone()
                .unwrap_or_else(|| default_source_path(req.kind, &req.handler.module));
            source::write_inline(&workdir, &path, text.as_bytes())?;
        }
        let mut env = crate::env::for_run(&req.run_uid, &workdir, req.env.clone());
        // The server's, whatever the request says.
        if let Some(a) = artifacts {
            env.insert(
                kruntimes_proto::runtime::ARTIFACTS_DIR_ENV.into(),
                a.path().display().to_string(),
            );
        }
        let spec = Spec {
            run_uid: req.run_uid.clone(),
            env,
            workdir,
            handler: req.handler.clone(),
            start_timeout: req.start_timeout,
        };
        Loaded::start(req.kind, spec, &self.interpreter)
            .await
            .map_err(|e| RunError::Load(e.to_string()))
    }

    /// The registration `handle` of `run_uid`.
    fn named(&self, run_uid: &str, handle: &str) -> Result<Arc<Registration>, InvokeError> {
        self.get(run_uid)
            .filter(|r| r.handle == handle)
            .ok_or_else(|| InvokeError::NotRegistered(format!("function {run_uid} ({handle})")))
    }

    /// Runs one invocation of the registration `handle` of `run_uid`.
    /// Dropping the future — its caller went away — ends the call at once:
    /// its process tree is killed (see the backends).
    pub async fn invoke(
        &self,
        run_uid: &str,
        handle: &str,
        input: Vec<u8>,
        timeout: Duration,
        max_output: usize,
    ) -> InvokeOutcome {
        let reg = self.named(run_uid, handle)?;
        let mut stopped = reg.stopped.subscribe();
        tokio::select! {
            r = reg.backend.invoke(input, timeout, max_output) => r,
            _ = stopped.wait_for(|s| *s) => Err(InvokeError::Stopped),
        }
    }

    /// Whether `run_uid`'s artifacts directory holds anything (or something
    /// took its place): what an invocation that just answered left.
    pub fn artifacts_left(&self, run_uid: &str) -> bool {
        self.get(run_uid)
            .and_then(|r| r.artifacts.clone())
            .is_some_and(|a| a.holds_anything())
    }

    /// Leases the worker of the registration `handle` of `run_uid`.
    pub async fn lease(&self, run_uid: &str, handle: &str) -> Result<super::Lease, InvokeError> {
        self.named(run_uid, handle)?.backend.lease().await
    }

    /// Unregisters; `false` when nothing (or another handle) is registered.
    pub async fn unregister(&self, run_uid: &str, handle: &str) -> bool {
        let _change = self.held.change().await;
        let Some(reg) = self
            .get(run_uid)
            .filter(|r| handle.is_empty() || r.handle == handle)
        else {
            return false;
        };
        self.held.take(run_uid);
        reg.stop().await;
        tracing::info!(run_uid = %run_uid, attempt = reg.attempt, "function unregistered");
        true
    }

    /// Drops every registration.
    pub async fn reset(&self) -> usize {
        let _change = self.held.change().await;
        let all = self.held.drain();
        for r in &all {
            r.stop().await;
        }
        all.len()
    }

    /// Stops every worker and kills the spares (shutdown).
    pub async fn shutdown(&self) {
        self.reset().await;
        if let Some(pool) = &self.interpreter.spares {
            pool.clear();
        }
    }
}
