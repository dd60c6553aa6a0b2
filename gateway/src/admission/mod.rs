//! Admission: everything that decides whether a request may leave the
//! gateway, as small steps over plain request parts (no Pingora session),
//! each in a module of its own:
//!
//! 1. [`limits`]: header bytes (431);
//! 2. [`run_target`]: path → Run target, method, verb (400, 405);
//! 3. [`limits`]: declared body size (400, 413);
//! 4. [`authorize`]: the bearer token (401) and, through the decision cache,
//!    the decision for the exact Run (401, 403, 404, 503);
//! 5. [`limits`]: the in-flight limit (503 `Overloaded`), taken only by
//!    allowed callers, so unauthenticated floods cannot fill it;
//! 6. [`route`]: the table's route and the Run's mode (404, 503). The table
//!    is read before step 4, which needs the Run's name, and its answer
//!    given after it: with authentication on, only an authorized caller
//!    learns a Run's state.
//!
//! The order is part of the contract: it decides which rejection a request
//! breaking several rules gets. The invocation id (the first check of all)
//! is read by the proxy, which needs it to answer any rejection.

pub mod authorize;
pub mod limits;
pub mod route;
pub mod run_target;

#[cfg(test)]
pub use limits::LimitError;
pub use limits::{InFlight, InFlightLimit, Limits};
pub use run_target::RunTarget;

use std::sync::{Arc, RwLock};
use std::time::Instant;

use kruntimes_proto::api::SessionOp;
use pingora::http::RequestHeader;

use crate::auth::cache::{DecisionCache, Outcome};
use crate::table::{self, Route, Table};
use kruntimes_proto::api::ApiError;

/// The state admission shares across requests.
#[derive(Clone)]
pub struct Admission {
    table: Arc<RwLock<Table>>,
    auth: Option<Arc<DecisionCache>>,
    limits: Limits,
    in_flight: InFlightLimit,
}

/// What admission learned about one request so far. It stays in the
/// request's context when a step rejects: logs read the UID and subject, the
/// in-flight slot is held until the request ends.
#[derive(Default)]
pub struct Facts {
    /// Run UID from the path.
    pub uid: String,
    /// The session route, `None` for an invoke.
    pub session: Option<SessionOp>,
    /// Body limit of the route.
    pub max_body: u64,
    /// The authenticated caller, once authorized.
    pub identity: Option<Arc<crate::auth::Identity>>,
    /// Where to forward, once admitted.
    pub route: Option<Route>,
    /// For a session WebSocket with authentication on: what each of its
    /// operations is authorized again with.
    pub websocket: Option<WebSocketAuth>,
    in_flight: Option<InFlight>,
}

/// What a session WebSocket's operations are authorized with: the caller's
/// token (held only for the socket's life, never logged) and the Run.
#[derive(Clone)]
pub struct WebSocketAuth {
    /// The decision cache.
    pub cache: Arc<DecisionCache>,
    /// The caller's bearer token.
    pub token: String,
    /// The Run's namespace.
    pub namespace: String,
    /// The Run's name.
    pub name: String,
    /// The Run's UID.
    pub uid: String,
    /// When the token expires, if it says.
    pub expires_at: Option<std::time::SystemTime>,
}

impl std::fmt::Debug for WebSocketAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebSocketAuth")
            .field("target", &self.target())
            .field("expires_at", &self.expires_at)
            .finish_non_exhaustive()
    }
}

impl Facts {
    /// The authenticated subject, once authorized.
    pub fn subject(&self) -> Option<&str> {
        self.identity.as_deref().map(|id| id.subject.as_str())
    }
}

impl WebSocketAuth {
    /// The Run, as authorization names it.
    pub fn target(&self) -> crate::auth::Target<'_> {
        crate::auth::Target {
            namespace: &self.namespace,
            name: &self.name,
            uid: &self.uid,
            verb: crate::auth::Verb::Session,
        }
    }

    /// Authorizes one more operation: `Ok` to let it through, else why the
    /// socket ends.
    pub async fn recheck(&self) -> Result<(), crate::proxy::websocket::CloseReason> {
        use crate::proxy::websocket::CloseReason;
        if self
            .expires_at
            .is_some_and(|exp| exp <= std::time::SystemTime::now())
        {
            return Err(CloseReason::TokenExpired);
        }
        match self.cache.check(&self.token, &self.target()).await {
            Ok(Outcome::Allowed(_)) => Ok(()),
            Ok(Outcome::Denied(_)) => Err(CloseReason::Forbidden),
            Ok(Outcome::Unauthenticated(why)) if why.contains("expired") => {
                Err(CloseReason::TokenExpired)
            }
            Ok(Outcome::Unauthenticated(_)) => Err(CloseReason::Unauthenticated),
            Err(_) => Err(CloseReason::Unavailable),
        }
    }
}

impl Admission {
    /// `auth` `None` disables authentication (benchmarks only); `in_flight`
    /// is the gauge of requests in flight.
    pub fn new(
        table: Arc<RwLock<Table>>,
        auth: Option<Arc<DecisionCache>>,
        limits: Limits,
        in_flight: prometheus::IntGauge,
    ) -> Self {
        Self {
            table,
            auth,
            in_flight: InFlightLimit::new(limits.max_in_flight, in_flight),
            limits,
        }
    }

    /// The ownership table routes are read from.
    pub fn table(&self) -> &RwLock<Table> {
        &self.table
    }

    /// Runs every step on `req` in order, recording what it learns in
    /// `facts`; `Ok` leaves the route in `facts.route`.
    pub async fn admit(&self, req: &RequestHeader, facts: &mut Facts) -> Result<(), ApiError> {
        limits::check_header_bytes(&req.headers, &req.uri, self.limits.max_header_bytes)?;
        let target = RunTarget::parse(req.uri.path())?;
        facts.uid = target.uid.to_owned();
        facts.session = target.session;
        target.check_method(&req.method)?;
        facts.max_body = self.limits.max_body(target.is_session());
        limits::check_content_length(&req.headers, facts.max_body)?;
        let token = match self.auth {
            Some(_) => Some(authorize::require_bearer(&req.headers)?),
            None => None,
        };
        let (mut lookup, mut changes) = {
            let t = table::read(&self.table);
            (route::lookup(&t, &target, Instant::now()), t.subscribe())
        };
        // When the wait for the table began: one budget for every wait.
        let mut settling_since = None;
        if lookup.is_unknown() && !self.limits.route_settle.is_zero() {
            // A client that saw its Run Ready may call before the control
            // plane's word on it reaches this gateway: an unknown UID is
            // answered 404 only once the table has had the settle time to
            // learn it. The caller is authenticated first (401 at once
            // otherwise: a stranger never waits, and never learns whether
            // the UID exists), then holds an in-flight slot while waiting.
            if let (Some(cache), Some(token)) = (&self.auth, token) {
                authorize::authenticate(cache, token).await?;
            }
            let slot = facts.in_flight.insert(self.in_flight.acquire());
            slot.admitted()?;
            let since = *settling_since.insert(tokio::time::Instant::now());
            lookup = Box::pin(self.settle(&target, lookup, &mut changes, since)).await;
        }
        if let (Some(cache), Some(token)) = (&self.auth, token) {
            let id = authorize::authorize(cache, token, &target, lookup.run_name()).await?;
            if let (Some(SessionOp::WebSocket), Some(name)) = (facts.session, lookup.run_name()) {
                facts.websocket = Some(WebSocketAuth {
                    cache: cache.clone(),
                    token: token.to_owned(),
                    namespace: target.namespace.to_owned(),
                    name: name.to_owned(),
                    uid: target.uid.to_owned(),
                    expires_at: id.expires_at,
                });
            }
            facts.identity = Some(id);
            // A review on a cache miss takes a round trip to the API server:
            // an owner that moved meanwhile is routed to, not the one looked
            // up before (the Run's UID, and so its name, are the same).
            if changes.has_changed().unwrap_or(false) {
                changes.borrow_and_update();
                lookup = route::lookup(&table::read(&self.table), &target, Instant::now());
            }
        }
        // The slot is taken once the caller is known to be allowed: a flood
        // of made-up tokens is answered 401 without filling the gateway.
        // (An unknown Run that was waited for holds one already.)
        let slot = facts
            .in_flight
            .get_or_insert_with(|| self.in_flight.acquire());
        slot.admitted()?;
        if target.artifacts {
            // Artifacts are read from any runtimed of the Runtime, whatever
            // the Run's phase: nothing to settle.
            let t = table::read(&self.table);
            facts.route = Some(t.artifact_route(
                target.namespace,
                target.runtime,
                target.uid,
                Instant::now(),
            )?);
            return Ok(());
        }
        if lookup.is_settling() {
            // Boxed: rare, and its timer would size every admission.
            let since = *settling_since.get_or_insert_with(tokio::time::Instant::now);
            lookup = Box::pin(self.settle(&target, lookup, &mut changes, since)).await;
        }
        facts.route = Some(lookup.into_route(&target)?);
        Ok(())
    }

    /// Looks `target` up again on every table change until it is known
    /// and no longer settling, or [`Limits::route_settle`] has passed
    /// `since` (the first wait of the request, so that two waits share
    /// one budget): a
    /// client that saw its Run Ready must not get `NotFound` or `NotReady`
    /// only because the control plane's or the owner's word on it reached
    /// this gateway a few milliseconds later.
    async fn settle(
        &self,
        target: &RunTarget<'_>,
        mut lookup: route::Lookup,
        changes: &mut tokio::sync::watch::Receiver<u64>,
        since: tokio::time::Instant,
    ) -> route::Lookup {
        let deadline = since + self.limits.route_settle;
        while lookup.is_settling() || lookup.is_unknown() {
            match tokio::time::timeout_at(deadline, changes.changed()).await {
                Ok(Ok(())) => {}
                // The deadline passed, or the table is gone (shutdown).
                Ok(Err(_)) | Err(_) => break,
            }
            lookup = route::lookup(&table::read(&self.table), target, Instant::now());
        }
        lookup
    }
}

#[cfg(test)]
mod tests;
