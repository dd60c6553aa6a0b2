//! The route lookup of a request: where the table sends the addressed Run,
//! and whether the Run is of the route's mode. Pure.

use std::time::Instant;

use crate::table::{Route, RouteError, Table};
use kruntimes_proto::api::ApiError;

use super::RunTarget;

/// What the table said about a target, read once (under the lock) before
/// authorization, which may wait on the API server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lookup {
    route: Result<Route, RouteError>,
    /// The Run's name when it is known but cannot be routed.
    unroutable_name: Option<String>,
    /// The Run is known, of another mode than the route serves (a task
    /// Run's UID on the invoke route): 404 whatever its phase.
    wrong_mode: bool,
}

/// Looks `target` up in `table` at `now`.
pub fn lookup(table: &Table, target: &RunTarget<'_>, now: Instant) -> Lookup {
    let route = table.route(target.namespace, target.runtime, target.uid, now);
    let unroutable_name = match &route {
        Ok(_) => None,
        Err(_) => table.run_name(target.namespace, target.runtime, target.uid),
    };
    // A routed Run's mode is checked by `into_route`; only a Run that
    // cannot be routed is looked up again (never on the hot path).
    let wrong_mode = route.is_err()
        && !target.artifacts
        && table
            .run_mode(target.namespace, target.runtime, target.uid)
            .is_some_and(|m| m != target.mode() as i32);
    Lookup {
        route,
        unroutable_name,
        wrong_mode,
    }
}

impl Lookup {
    /// Whether the table is converging on this Run: waiting for a change
    /// may route it.
    pub fn is_settling(&self) -> bool {
        !self.wrong_mode && matches!(self.route, Err(RouteError::Settling(_)))
    }

    /// Whether the table has no such Run in that namespace and Runtime (yet:
    /// the control plane's word on a new Run may be on its way).
    pub fn is_unknown(&self) -> bool {
        matches!(self.route, Err(RouteError::NotFound))
    }

    /// The name of the addressed Run, if the control plane knows it in that
    /// namespace and Runtime (routable or not).
    pub fn run_name(&self) -> Option<&str> {
        match &self.route {
            Ok(r) => Some(r.run_name()),
            Err(_) => self.unroutable_name.as_deref(),
        }
    }

    /// The route, if the Run is routable and of the mode `target` expects:
    /// 404 for an unknown UID or a Run of the other mode, 503 when not
    /// ready or stale.
    pub fn into_route(self, target: &RunTarget<'_>) -> Result<Route, ApiError> {
        if self.wrong_mode {
            return Err(ApiError::wrong_mode(target.uid, target.is_session()));
        }
        let route = self.route?;
        if route.mode() != target.mode() as i32 {
            return Err(ApiError::wrong_mode(target.uid, target.is_session()));
        }
        Ok(route)
    }
}

#[cfg(test)]
mod tests;
