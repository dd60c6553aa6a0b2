//! Authentication and authorization of a request through the
//! [`DecisionCache`]: the bearer token, then the decision for the exact Run.

use std::sync::Arc;

use http::HeaderMap;

use crate::auth::Identity;
use crate::auth::cache::{DecisionCache, Outcome};
use kruntimes_proto::api::ApiError;

use super::RunTarget;

/// The bearer token of `Authorization: Bearer <token>` (scheme
/// case-insensitive), if there is a non-empty one.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    let v = headers.get(http::header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = v.split_once(' ')?;
    (scheme.eq_ignore_ascii_case("bearer") && !token.trim().is_empty()).then(|| token.trim())
}

/// The bearer token, required (401 without one).
pub fn require_bearer(headers: &HeaderMap) -> Result<&str, ApiError> {
    bearer(headers).ok_or_else(ApiError::missing_token)
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
) -> Result<Arc<Identity>, ApiError> {
    let Some(name) = run_name else {
        authenticate(cache, token).await?;
        return Err(ApiError::unknown_run());
    };
    let outcome = cache.check(token, &target.authz_target(name)).await?;
    decide(outcome, target)
}

/// Authenticates `token` alone (401 if it is not a caller's).
pub async fn authenticate(cache: &DecisionCache, token: &str) -> Result<(), ApiError> {
    match cache.authenticate(token).await? {
        Ok(_) => Ok(()),
        Err(why) => Err(ApiError::unauthenticated(why.to_string())),
    }
}

/// The identity of an allowed outcome, or the rejection of any other.
pub fn decide(outcome: Outcome, target: &RunTarget<'_>) -> Result<Arc<Identity>, ApiError> {
    match outcome {
        Outcome::Allowed(id) => Ok(id),
        Outcome::Denied(id) => Err(ApiError::forbidden(
            &id.subject,
            target.verb().as_str(),
            target.namespace,
        )),
        Outcome::Unauthenticated(why) => Err(ApiError::unauthenticated(why.to_string())),
    }
}

#[cfg(test)]
mod tests;
