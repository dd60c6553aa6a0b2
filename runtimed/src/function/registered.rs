//! One registered function: its bounds, its registration on the Runtime
//! Server, its state, and how it is reported (its ownership entry).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kruntimes_proto::ownership::v1 as own;
use kruntimes_proto::runtime::Backend;
use kruntimes_proto::runtime::v1 as rt;
use tokio::sync::{Semaphore, watch};

use crate::local::Published;
use crate::registration::Registration;
use crate::runtime::lease::Lease;

/// A function in the registration table.
pub type Registered = Registration<Function>;

/// Where a registration stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Serving invocations.
    Ready,
    /// Unregistering: no new invocations.
    Draining,
    /// Idle-expired (or otherwise ended); the control plane unregisters it.
    Failed,
}

impl State {
    /// The phase an ownership entry shows for this state.
    pub fn phase(self) -> own::Phase {
        match self {
            State::Ready => own::Phase::Ready,
            State::Draining => own::Phase::Draining,
            State::Failed => own::Phase::Failed,
        }
    }
}

/// A function's bounds, fixed at registration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Largest input, bytes.
    pub max_input: usize,
    /// Largest output, bytes.
    pub max_output: usize,
    /// Invocation timeout.
    pub timeout: Duration,
    /// Idle expiry, when set.
    pub idle_timeout: Option<Duration>,
}

/// What the engine keeps for one registered function.
#[derive(Debug)]
pub struct Function {
    /// The built-in backend serving it (`None`: the server's choice).
    pub kind: Option<Backend>,
    /// Its bounds.
    pub bounds: Bounds,
    /// What the Runtime Server was asked to register (asked again when the
    /// server restarts).
    pub request: rt::RegisterFunctionRequest,
    /// The Runtime Server's handle of the registration.
    handle: Mutex<String>,
    /// The leased worker of the fast path (Python), held by one invocation
    /// at a time.
    pub lease: tokio::sync::Mutex<Option<Lease>>,
    /// The one-in-flight rule: a single permit, held by an invocation until
    /// it ends (answered, failed, or abandoned by its caller).
    pub permit: Arc<Semaphore>,
    /// Invocations served.
    pub invocations: AtomicU64,
    /// Its artifacts directory may hold what an earlier invocation left
    /// (its files were exported, it failed or was abandoned), or what this
    /// runtimed cannot know of (it restarted, and registered the Run again
    /// on a server that kept it): emptied before the next invocation.
    pub dirty: AtomicBool,
    /// Fires when the registration is cancelled.
    pub cancel: watch::Sender<bool>,
    state: Mutex<(State, String)>,
    last_activity: Mutex<Instant>,
}

impl Function {
    /// A ready function registered on the Runtime Server as `handle`.
    pub fn new(
        kind: Option<Backend>,
        bounds: Bounds,
        request: rt::RegisterFunctionRequest,
        handle: String,
    ) -> Self {
        Self {
            kind,
            bounds,
            request,
            handle: Mutex::new(handle),
            lease: tokio::sync::Mutex::new(None),
            permit: Arc::new(Semaphore::new(1)),
            invocations: AtomicU64::new(0),
            dirty: AtomicBool::new(true),
            cancel: watch::channel(false).0,
            state: Mutex::new((State::Ready, String::new())),
            last_activity: Mutex::new(Instant::now()),
        }
    }

    /// The Runtime Server's handle of it.
    pub fn handle(&self) -> String {
        self.handle
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Records the handle of a new registration on the server.
    pub fn set_handle(&self, handle: String) {
        *self.handle.lock().unwrap_or_else(|p| p.into_inner()) = handle;
    }

    /// Gives the leased worker up (the server kills it), once the
    /// invocation holding it is done.
    pub async fn drop_lease(&self) {
        self.lease.lock().await.take();
    }

    /// The state and its reason.
    pub fn state(&self) -> (State, String) {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Moves to `s` for `reason`.
    pub fn set_state(&self, s: State, reason: &str) {
        *self.state.lock().unwrap_or_else(|p| p.into_inner()) = (s, reason.to_owned());
    }

    /// Time since the last invocation finished (or the registration).
    pub fn idle_for(&self) -> Duration {
        self.last_activity
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .elapsed()
    }

    /// Records a finished invocation.
    pub fn touch(&self) {
        *self.last_activity.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
        self.invocations.fetch_add(1, Ordering::Relaxed);
    }

    /// Whether the idle reaper should end it now.
    pub fn expired(&self) -> bool {
        self.state().0 == State::Ready
            && self
                .bounds
                .idle_timeout
                .is_some_and(|t| self.idle_for() >= t)
            && self.permit.available_permits() == 1
    }
}

impl Registered {
    /// Its ownership entry in `phase` for `reason`.
    pub fn published<'a>(&self, phase: own::Phase, reason: &'a str) -> Published<'a> {
        Published {
            mode: own::Mode::Function,
            phase,
            reason,
            limits: Some(own::EntryLimits {
                max_input_bytes: self.bounds.max_input as u64,
                max_output_bytes: self.bounds.max_output as u64,
                timeout_ms: self.bounds.timeout.as_millis() as u32,
            }),
        }
    }
}
