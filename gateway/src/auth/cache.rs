//! The decision cache in front of an [`Authenticator`] and an [`Authorizer`].
//!
//! Keys hold a SHA-256 digest of the token, never the token. Authentication
//! results live at most `authn_max_ttl` and never beyond the credential's
//! expiry; rejected tokens are cached briefly so floods of bad tokens are
//! answered locally. Decisions: allowed ≤ `allowed_ttl`, denied ≤
//! `denied_ttl`, never beyond expiry. Backend errors are not cached (fail
//! closed). Concurrent misses for one key coalesce into one backend call, and
//! backend calls in flight are bounded.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use moka::Expiry;
use moka::future::Cache;
use prometheus::IntCounterVec;
use sha2::{Digest, Sha256};
use tokio::sync::Semaphore;

use super::{AuthError, Authenticator, Authorizer, Identity, Target, Verb};

/// Cache bounds and TTLs.
#[derive(Debug, Clone)]
pub struct CacheConfig {
    /// Entries per cache layer.
    pub max_entries: u64,
    /// Longest an authenticated identity is reused.
    pub authn_max_ttl: Duration,
    /// How long a rejected token is remembered.
    pub rejected_ttl: Duration,
    /// Longest an allow decision is reused.
    pub allowed_ttl: Duration,
    /// Longest a deny decision is reused.
    pub denied_ttl: Duration,
    /// Backend calls in flight at once.
    pub max_concurrent_calls: usize,
}

impl Default for CacheConfig {
    fn default() -> Self {
        Self {
            max_entries: 100_000,
            authn_max_ttl: Duration::from_secs(120),
            rejected_ttl: Duration::from_secs(5),
            allowed_ttl: Duration::from_secs(30),
            denied_ttl: Duration::from_secs(5),
            max_concurrent_calls: 64,
        }
    }
}

type TokenDigest = [u8; 32];

#[derive(Clone)]
struct Authn {
    result: Result<Arc<Identity>, Arc<str>>,
    ttl: Duration,
}

#[derive(Clone)]
struct Decision {
    allowed: bool,
    ttl: Duration,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct DecisionKey {
    token: TokenDigest,
    namespace: String,
    name: String,
    uid: String,
    verb: Verb,
}

struct TtlFromValue;

impl<K> Expiry<K, Authn> for TtlFromValue {
    fn expire_after_create(&self, _: &K, v: &Authn, _: std::time::Instant) -> Option<Duration> {
        Some(v.ttl)
    }
}

impl<K> Expiry<K, Decision> for TtlFromValue {
    fn expire_after_create(&self, _: &K, v: &Decision, _: std::time::Instant) -> Option<Duration> {
        Some(v.ttl)
    }
}

/// The final answer for a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Allowed.
    Allowed(Arc<Identity>),
    /// Authenticated, not allowed.
    Denied(Arc<Identity>),
    /// Not authenticated (reason is safe to show; it never holds the token).
    Unauthenticated(Arc<str>),
}

/// Caps `ttl` so it never reaches past `expires_at`.
pub fn bounded_ttl(ttl: Duration, expires_at: Option<SystemTime>, now: SystemTime) -> Duration {
    match expires_at {
        Some(exp) => ttl.min(exp.duration_since(now).unwrap_or(Duration::ZERO)),
        None => ttl,
    }
}

/// The cache.
pub struct DecisionCache {
    authn: Arc<dyn Authenticator>,
    authz: Arc<dyn Authorizer>,
    tokens: Cache<TokenDigest, Authn>,
    decisions: Cache<DecisionKey, Decision>,
    calls: Arc<Semaphore>,
    cfg: CacheConfig,
    counter: Option<IntCounterVec>,
}

impl DecisionCache {
    /// Wraps the backends. `counter` (labels `layer`, `result`) counts hits
    /// and misses.
    pub fn new(
        authn: Arc<dyn Authenticator>,
        authz: Arc<dyn Authorizer>,
        cfg: CacheConfig,
        counter: Option<IntCounterVec>,
    ) -> Self {
        Self {
            authn,
            authz,
            tokens: Cache::builder()
                .max_capacity(cfg.max_entries)
                .expire_after(TtlFromValue)
                .build(),
            decisions: Cache::builder()
                .max_capacity(cfg.max_entries)
                .expire_after(TtlFromValue)
                .build(),
            calls: Arc::new(Semaphore::new(cfg.max_concurrent_calls.max(1))),
            cfg,
            counter,
        }
    }

    fn count(&self, layer: &str, hit: bool) {
        if let Some(c) = &self.counter {
            c.with_label_values(&[layer, if hit { "hit" } else { "miss" }])
                .inc();
        }
    }

    /// Authenticates `token` (cached). `Ok(Err(reason))` is a rejection.
    pub async fn authenticate(
        &self,
        token: &str,
    ) -> Result<Result<Arc<Identity>, Arc<str>>, AuthError> {
        Ok(self.authenticate_digest(token).await?.1)
    }

    /// Looks `key` up in `cache`; on a miss runs `load` once for all
    /// concurrent callers (bounded by the backend-call semaphore) and counts
    /// the hit or miss under `layer`. Errors of `load` are not cached.
    async fn cached<K, V>(
        &self,
        layer: &str,
        cache: &Cache<K, V>,
        key: K,
        load: impl std::future::Future<Output = Result<V, AuthError>>,
    ) -> Result<V, AuthError>
    where
        K: std::hash::Hash + Eq + Send + Sync + 'static,
        V: Clone + Send + Sync + 'static,
    {
        let missed = AtomicBool::new(false);
        let value = cache
            .try_get_with(key, async {
                missed.store(true, Ordering::Relaxed);
                let _permit = self
                    .calls
                    .acquire()
                    .await
                    .map_err(|_| AuthError::Unavailable("shutting down".into()))?;
                load.await
            })
            .await
            .map_err(|e: Arc<AuthError>| (*e).clone())?;
        self.count(layer, !missed.load(Ordering::Relaxed));
        Ok(value)
    }

    async fn authenticate_digest(
        &self,
        token: &str,
    ) -> Result<(TokenDigest, Result<Arc<Identity>, Arc<str>>), AuthError> {
        let digest: TokenDigest = Sha256::digest(token.as_bytes()).into();
        let authn = self
            .cached("authn", &self.tokens, digest, async {
                match self.authn.authenticate(token).await {
                    Ok(id) => {
                        let ttl =
                            bounded_ttl(self.cfg.authn_max_ttl, id.expires_at, SystemTime::now());
                        Ok(Authn {
                            result: Ok(Arc::new(id)),
                            ttl,
                        })
                    }
                    Err(AuthError::Unauthenticated(reason)) => Ok(Authn {
                        result: Err(reason.into()),
                        ttl: self.cfg.rejected_ttl,
                    }),
                    Err(e) => Err(e),
                }
            })
            .await?;
        let result = match authn.result {
            Ok(id) if id.expires_at.is_some_and(|exp| exp <= SystemTime::now()) => {
                Err("token expired".into())
            }
            other => other,
        };
        Ok((digest, result))
    }

    /// Authenticates and authorizes `token` for `target`.
    pub async fn check(&self, token: &str, target: &Target) -> Result<Outcome, AuthError> {
        let (digest, identity) = self.authenticate_digest(token).await?;
        let identity = match identity {
            Ok(id) => id,
            Err(reason) => return Ok(Outcome::Unauthenticated(reason)),
        };
        let key = DecisionKey {
            token: digest,
            namespace: target.namespace.clone(),
            name: target.name.clone(),
            uid: target.uid.clone(),
            verb: target.verb,
        };
        let decision = self
            .cached("authz", &self.decisions, key, async {
                let allowed = self.authz.authorize(&identity, target).await?;
                let ttl = if allowed {
                    self.cfg.allowed_ttl
                } else {
                    self.cfg.denied_ttl
                };
                Ok(Decision {
                    allowed,
                    ttl: bounded_ttl(ttl, identity.expires_at, SystemTime::now()),
                })
            })
            .await?;
        Ok(if decision.allowed {
            Outcome::Allowed(identity)
        } else {
            Outcome::Denied(identity)
        })
    }
}

#[cfg(test)]
mod tests;
