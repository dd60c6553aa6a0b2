//! Authentication and authorization of a request through the
//! [`DecisionCache`]: the bearer token, then the decision for the exact Run.

use std::sync::Arc;

use http::HeaderMap;

use crate::auth::Identity;
use crate::auth::cache::{DecisionCache, Outcome};
use crate::rejection::Rejection;

use super::RunTarget;

/// The bearer token of `Authorization: Bearer <token>` (scheme
/// case-insensitive), if there is a non-empty one.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    let v = headers.get(http::header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = v.split_once(' ')?;
    (scheme.eq_ignore_ascii_case("bearer") && !token.trim().is_empty()).then(|| token.trim())
}

/// The bearer token, required (401 without one).
pub fn require_bearer(headers: &HeaderMap) -> Result<&str, Rejection> {
    bearer(headers).ok_or_else(Rejection::missing_token)
}

/// Authenticates `token` and authorizes it for `target`, the Run the table
/// names `run_name`; the caller's identity on success.
///
/// Authorization names the Run, which only the table knows: for an unknown
/// UID (`run_name` is `None`) the caller is only authenticated, and then
/// answered 404 — an unauthenticated caller never learns whether a UID
/// exists.
pub async fn authorize(
    cache: &DecisionCache,
    token: &str,
    target: &RunTarget<'_>,
    run_name: Option<&str>,
) -> Result<Arc<Identity>, Rejection> {
    let Some(name) = run_name else {
        authenticate(cache, token).await?;
        return Err(Rejection::unknown_run());
    };
    let outcome = cache.check(token, &target.authz_target(name)).await?;
    decide(outcome, target)
}

/// Authenticates `token` alone (401 if it is not a caller's).
pub async fn authenticate(cache: &DecisionCache, token: &str) -> Result<(), Rejection> {
    match cache.authenticate(token).await? {
        Ok(_) => Ok(()),
        Err(why) => Err(Rejection::unauthenticated(&why)),
    }
}

/// The identity of an allowed outcome, or the rejection of any other.
pub fn decide(outcome: Outcome, target: &RunTarget<'_>) -> Result<Arc<Identity>, Rejection> {
    match outcome {
        Outcome::Allowed(id) => Ok(id),
        Outcome::Denied(id) => Err(Rejection::forbidden(
            &id.subject,
            target.verb(),
            target.namespace,
        )),
        Outcome::Unauthenticated(why) => Err(Rejection::unauthenticated(&why)),
    }
}

#[cfg(test)]
mod tests;
