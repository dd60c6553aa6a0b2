//! The function engine: registrations keyed by Run UID, their backends, the
//! one-in-flight rule, idle expiry, and the local ownership table.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use kruntimes_proto::function::v1 as pb;
use kruntimes_proto::ownership::v1 as own;
use kruntimes_proto::watch::Publisher;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};

use super::backend::{self, Backend, InvokeError, Kind};
use crate::local::{LocalPod, Published};
use crate::registry::{self, Fence, FenceError, IdCheck, Record, RegisterDecision};
use crate::source;

/// Hard bound of a function's input and output.
pub const MAX_IO_BYTES: u64 = 1024 * 1024;

/// Static configuration of an engine.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Python interpreter for the Python backend.
    pub python: PathBuf,
    /// Invocation timeout when the registration sets none.
    pub default_timeout: Duration,
    /// Largest invocation timeout a registration may ask for.
    pub max_timeout: Duration,
    /// Bound on handler loading at registration.
    pub start_timeout: Duration,
    /// Pre-started Python interpreters kept ready (0 disables).
    pub python_spares: usize,
    /// The built-in backend of this Pod's Runtime; `None` picks it by the
    /// Run's runtime name (`python`, `bash`).
    pub backend: Option<Kind>,
}

/// Registration failures, mapped onto gRPC codes by the service.
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
    /// The handler failed to load.
    #[error("{0}")]
    Load(String),
    /// Local I/O failed.
    #[error("prepare working directory: {0}")]
    Io(#[from] std::io::Error),
}

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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Ready,
    Draining,
    Failed,
}

#[derive(Debug)]
struct Function {
    run: pb::RunRef,
    record: Record,
    kind: Kind,
    max_input: usize,
    max_output: usize,
    timeout: Duration,
    idle_timeout: Option<Duration>,
    workdir: PathBuf,
    state: Mutex<(State, String)>,
    backend: tokio::sync::Mutex<Backend>,
    permit: Arc<Semaphore>,
    last_activity: Mutex<Instant>,
    invocations: AtomicU64,
    cancel: watch::Sender<bool>,
}

impl Function {
    fn state(&self) -> (State, String) {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn set_state(&self, s: State, reason: &str) {
        *self.state.lock().unwrap_or_else(|p| p.into_inner()) = (s, reason.to_owned());
    }

    fn idle_for(&self) -> Duration {
        self.last_activity
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .elapsed()
    }
}

/// The engine. Cheap to share behind an `Arc`.
pub struct Engine {
    pod: Arc<LocalPod>,
    cfg: EngineConfig,
    spares: Option<Arc<backend::SparePool>>,
    functions: RwLock<HashMap<String, Arc<Function>>>,
    registering: tokio::sync::Mutex<()>,
}

fn new_registration_id() -> String {
    format!("reg-{}", uuid::Uuid::new_v4().simple())
}

impl Engine {
    /// Creates an engine with no registrations, publishing into `pod`'s
    /// ownership table.
    pub fn new(pod: Arc<LocalPod>, cfg: EngineConfig) -> Arc<Self> {
        let spares = (cfg.python_spares > 0).then(|| {
            backend::SparePool::new(cfg.python.clone(), pod.work_root.clone(), cfg.python_spares)
        });
        Arc::new(Self {
            pod,
            cfg,
            spares,
            functions: RwLock::new(HashMap::new()),
            registering: tokio::sync::Mutex::new(()),
        })
    }

    /// Static configuration.
    pub fn config(&self) -> &EngineConfig {
        &self.cfg
    }

    /// The local ownership table.
    pub fn publisher(&self) -> &Publisher {
        self.pod.publisher()
    }

    fn get(&self, uid: &str) -> Option<Arc<Function>> {
        self.functions
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(uid)
            .cloned()
    }

    fn record(&self, uid: &str) -> Option<Record> {
        self.get(uid).map(|f| f.record.clone())
    }

    fn publish(&self, f: &Function) {
        let (state, reason) = f.state();
        let phase = match state {
            State::Ready => own::Phase::Ready,
            State::Draining => own::Phase::Draining,
            State::Failed => own::Phase::Failed,
        };
        self.pod.publish(
            &f.run,
            f.record.attempt,
            Published {
                mode: own::Mode::Function,
                phase,
                reason: &reason,
                limits: Some(own::EntryLimits {
                    max_input_bytes: f.max_input as u64,
                    max_output_bytes: f.max_output as u64,
                    timeout_ms: f.timeout.as_millis() as u32,
                }),
            },
        );
    }

    fn describe(&self, f: &Function) -> pb::Registration {
        let (state, message) = f.state();
        pb::Registration {
            run: Some(f.run.clone()),
            attempt: f.record.attempt,
            registration_id: f.record.registration_id.clone(),
            digest: f.record.digest.clone(),
            state: match state {
                State::Ready => pb::RegistrationState::Ready,
                State::Draining => pb::RegistrationState::Draining,
                State::Failed => pb::RegistrationState::Failed,
            } as i32,
            message,
            invocations: f.invocations.load(Ordering::Relaxed),
            idle_ms: f.idle_for().as_millis() as u64,
        }
    }

    /// Registers a function (see [`registry::decide_register`] for the rules).
    pub async fn register(
        &self,
        req: pb::RegisterRequest,
    ) -> Result<pb::Registration, RegisterError> {
        let run = req
            .run
            .clone()
            .ok_or_else(|| RegisterError::Invalid("run is required".into()))?;
        if kruntimes_proto::api::parse_path(&format!(
            "/v1/namespaces/{}/runtimes/{}/runs/{}:invoke",
            run.namespace, run.runtime, run.uid
        ))
        .is_err()
        {
            return Err(RegisterError::Invalid(
                "namespace, runtime or uid is malformed".into(),
            ));
        }
        let _serial = self.registering.lock().await;
        let current = self.get(&run.uid);
        match registry::decide_register(
            current.as_ref().map(|f| &f.record),
            req.attempt,
            &req.digest,
        ) {
            RegisterDecision::Idempotent => {
                let f =
                    current.ok_or_else(|| RegisterError::Invalid("lost registration".into()))?;
                return Ok(self.describe(&f));
            }
            RegisterDecision::Conflict => return Err(RegisterError::Conflict(req.attempt)),
            RegisterDecision::Stale => {
                return Err(RegisterError::Stale {
                    requested: req.attempt,
                    current: current.map_or(0, |f| f.record.attempt),
                });
            }
            RegisterDecision::Supersede => {
                if let Some(old) = current {
                    tracing::info!(run_uid = %run.uid, old_attempt = old.record.attempt, attempt = req.attempt, "superseding registration");
                    self.remove(&old, pb::UnregisterMode::Cancel, false).await;
                }
            }
            RegisterDecision::Create => {}
        }
        let f = self.create(run, req).await?;
        self.publish(&f);
        let reg = self.describe(&f);
        self.functions
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(f.run.uid.clone(), f);
        Ok(reg)
    }

    async fn create(
        &self,
        run: pb::RunRef,
        req: pb::RegisterRequest,
    ) -> Result<Arc<Function>, RegisterError> {
        let kind = self
            .cfg
            .backend
            .or_else(|| Kind::for_runtime(&run.runtime))
            .ok_or_else(|| {
                RegisterError::Invalid(format!("runtime {:?} has no built-in backend", run.runtime))
            })?;
        let handler = backend::parse_handler(kind, &req.handler).map_err(RegisterError::Invalid)?;
        let limits = req.limits.unwrap_or_default();
        let bound = |v: u64| if v == 0 { MAX_IO_BYTES } else { v.min(MAX_IO_BYTES) } as usize;
        let timeout = match limits.timeout_ms {
            0 => self.cfg.default_timeout,
            ms => Duration::from_millis(ms.into()).min(self.cfg.max_timeout),
        };
        for key in req.env.keys() {
            if key.is_empty() || key.contains('=') || key.contains('\0') {
                return Err(RegisterError::Invalid(format!("invalid env name {key:?}")));
            }
        }
        let workdir = self.pod.workdir(&run.uid);
        if workdir.exists() {
            std::fs::remove_dir_all(&workdir)?;
        }
        std::fs::create_dir_all(&workdir)?;
        if let Some(src) = req.source.as_ref().filter(|s| !s.inline.is_empty()) {
            let path = if src.inline_path.is_empty() {
                match kind {
                    Kind::Python => format!("{}.py", handler.module.replace('.', "/")),
                    Kind::Bash => format!("{}.sh", handler.module),
                }
            } else {
                src.inline_path.clone()
            };
            source::write_inline(&workdir, &path, src.inline.as_bytes()).map_err(|e| match e {
                source::WriteError::Path(p) => RegisterError::Invalid(p.to_string()),
                source::WriteError::Io(io) => RegisterError::Io(io),
            })?;
        }
        let spec = backend::Spec {
            run_uid: run.uid.clone(),
            workdir: workdir.clone(),
            handler,
            env: req.env.into_iter().collect(),
            python: self.cfg.python.clone(),
            start_timeout: self.cfg.start_timeout,
            spares: self.spares.clone(),
        };
        let backend = match Backend::start(kind, spec).await {
            Ok(b) => b,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&workdir);
                return Err(RegisterError::Load(e.to_string()));
            }
        };
        let (cancel, _) = watch::channel(false);
        tracing::info!(run_uid = %run.uid, attempt = req.attempt, runtime = %run.runtime, "function registered");
        Ok(Arc::new(Function {
            record: Record {
                attempt: req.attempt,
                digest: req.digest,
                registration_id: new_registration_id(),
            },
            run,
            kind,
            max_input: bound(limits.max_input_bytes),
            max_output: bound(limits.max_output_bytes),
            timeout,
            idle_timeout: (req.idle_timeout_seconds > 0)
                .then(|| Duration::from_secs(req.idle_timeout_seconds.into())),
            workdir,
            state: Mutex::new((State::Ready, String::new())),
            backend: tokio::sync::Mutex::new(backend),
            permit: Arc::new(Semaphore::new(1)),
            last_activity: Mutex::new(Instant::now()),
            invocations: AtomicU64::new(0),
            cancel,
        }))
    }

    /// Reports a registration.
    pub fn status(&self, uid: &str) -> Option<pb::Registration> {
        self.get(uid).map(|f| self.describe(&f))
    }

    /// Unregisters; absent registrations succeed with `false`. A stale
    /// registration id is refused and never touches the newer registration.
    pub async fn unregister(
        &self,
        uid: &str,
        registration_id: &str,
        mode: pb::UnregisterMode,
    ) -> Result<bool, EngineError> {
        let _serial = self.registering.lock().await;
        let current = self.get(uid);
        match registry::check_id(current.as_ref().map(|f| &f.record), registration_id) {
            IdCheck::Absent => Ok(false),
            IdCheck::Stale => Err(EngineError::StaleRegistration),
            IdCheck::Current => {
                if let Some(f) = current {
                    self.remove(&f, mode, true).await;
                }
                Ok(true)
            }
        }
    }

    /// Drains or cancels, stops the backend, removes local state and the
    /// table entry.
    async fn remove(&self, f: &Arc<Function>, mode: pb::UnregisterMode, publish_drain: bool) {
        f.set_state(State::Draining, "Unregistering");
        if publish_drain {
            self.publish(f);
        }
        let drained = match mode {
            pb::UnregisterMode::Drain => tokio::time::timeout(
                f.timeout + Duration::from_secs(1),
                f.permit.clone().acquire_owned(),
            )
            .await
            .is_ok(),
            pb::UnregisterMode::Cancel => false,
        };
        if !drained {
            let _ = f.cancel.send(true);
        }
        f.backend.lock().await.shutdown().await;
        f.permit.close();
        {
            let mut map = self.functions.write().unwrap_or_else(|p| p.into_inner());
            if map.get(&f.run.uid).is_some_and(|cur| Arc::ptr_eq(cur, f)) {
                map.remove(&f.run.uid);
            }
        }
        self.pod.withdraw(&f.run.uid);
        let _ = std::fs::remove_dir_all(&f.workdir);
        tracing::info!(run_uid = %f.run.uid, attempt = f.record.attempt, ?mode, "function unregistered");
    }

    /// Serves one invocation. `fence` comes from the gateway's headers;
    /// `registration_id` from gRPC callers.
    pub async fn invoke(&self, call: Invocation<'_>) -> Result<Vec<u8>, EngineError> {
        let f = self.get(call.run_uid);
        if let Some(fence) = call.fence {
            registry::check_fence(
                fence,
                call.run_uid,
                &self.pod.uid,
                f.as_ref().map(|f| &f.record),
            )
            .map_err(EngineError::Fenced)?;
        }
        let f = f.ok_or(EngineError::NotRegistered)?;
        if let Some(id) = call.registration_id
            && registry::check_id(Some(&f.record), id) != IdCheck::Current
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
        if call.input.len() > f.max_input {
            return Err(EngineError::TooLarge(call.input.len()));
        }
        if let Err(e) = serde_json::from_slice::<serde::de::IgnoredAny>(call.input) {
            return Err(EngineError::InvalidJson(e.to_string()));
        }
        let _permit: OwnedSemaphorePermit = f
            .permit
            .clone()
            .try_acquire_owned()
            .map_err(|_| EngineError::Busy)?;
        let timeout = call.timeout.map_or(f.timeout, |t| t.min(f.timeout));
        let mut cancelled = f.cancel.subscribe();
        let started = Instant::now();
        let result = {
            let mut backend = f.backend.lock().await;
            tokio::select! {
                r = backend.invoke(call.input, timeout, f.max_output) => r.map_err(EngineError::from),
                _ = cancelled.wait_for(|c| *c) => Err(EngineError::NotReady("cancelled")),
            }
        };
        *f.last_activity.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
        f.invocations.fetch_add(1, Ordering::Relaxed);
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

    /// Expires idle registrations: the entry turns FAILED with reason
    /// `IdleTimeout` and the worker stops; the control plane then ends the
    /// Run and unregisters it.
    pub async fn expire_idle(&self) {
        let candidates: Vec<Arc<Function>> = self
            .functions
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .filter(|f| {
                f.state().0 == State::Ready
                    && f.idle_timeout.is_some_and(|t| f.idle_for() >= t)
                    && f.permit.available_permits() == 1
            })
            .cloned()
            .collect();
        for f in candidates {
            tracing::info!(run_uid = %f.run.uid, "registration idle timeout");
            f.set_state(State::Failed, "IdleTimeout");
            self.publish(&f);
            f.backend.lock().await.shutdown().await;
        }
    }

    /// Runs [`Engine::expire_idle`] every `period` until the engine is dropped.
    pub fn spawn_idle_reaper(self: &Arc<Self>, period: Duration) {
        crate::periodic::spawn_periodic(self, period, |engine| async move {
            engine.expire_idle().await
        });
    }

    /// Stops every backend (on shutdown).
    pub async fn shutdown(&self) {
        let all: Vec<_> = self
            .functions
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect();
        for f in all {
            let _ = f.cancel.send(true);
            f.backend.lock().await.shutdown().await;
        }
    }

    /// The current record of a Run (tests and diagnostics).
    pub fn current_record(&self, uid: &str) -> Option<Record> {
        self.record(uid)
    }
}

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

#[cfg(test)]
mod tests;
