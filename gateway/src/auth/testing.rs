//! A fake authentication backend for tests of what sits in front of the
//! decision cache.

use std::sync::Arc;

use async_trait::async_trait;

use super::cache::{CacheConfig, DecisionCache};
use super::{AuthError, Authenticator, Authorizer, Identity, Target};

/// Tokens `alice` and `eve` are valid, `slow-alice` is alice's after the
/// review yields to the runtime a few times (other tasks run meanwhile),
/// `down` finds the backend unreachable, any other is rejected with
/// "unknown token". Alice may use every Run, eve none.
pub(crate) struct Backend;

#[async_trait]
impl Authenticator for Backend {
    async fn authenticate(&self, token: &str) -> Result<Identity, AuthError> {
        match token {
            "alice" | "eve" => Ok(Identity::new(token, vec![])),
            "slow-alice" => {
                for _ in 0..10 {
                    tokio::task::yield_now().await;
                }
                Ok(Identity::new("alice", vec![]))
            }
            "down" => Err(AuthError::Unavailable("tokenreview timed out".into())),
            _ => Err(AuthError::Unauthenticated("unknown token".into())),
        }
    }
}

#[async_trait]
impl Authorizer for Backend {
    async fn authorize(&self, id: &Identity, _: &Target<'_>) -> Result<bool, AuthError> {
        Ok(id.subject == "alice")
    }
}

/// A decision cache over [`Backend`] with the default bounds.
pub(crate) fn cache() -> DecisionCache {
    DecisionCache::new(
        Arc::new(Backend),
        Arc::new(Backend),
        CacheConfig::default(),
        None,
    )
}
