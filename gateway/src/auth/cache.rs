//! The decision cache in front of an [`Authenticator`] and an [`Authorizer`].
//!
//! Keys hold a SHA-256 digest of the token, never the token. Authentication
//! results live at most `authn_max_ttl` and never beyond the credential's
//! expiry; rejected tokens are cached briefly so floods of bad tokens are
//! answered locally. Decisions: allowed ≤ `allowed_ttl`, denied ≤
//! `denied_ttl`, never beyond expiry. Backend errors are not cached (fail
//! closed). Concurrent misses for one key coalesce into one backend call, and
//! backend calls in flight are bounded.
//!
//! Optionally (`stale_if_error`, off by default) a key that was allowed
//! recently keeps being allowed for a bounded window while the backend is
//! unreachable — never beyond the credential's expiry.

use std::hash::Hash;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use foldhash::fast::RandomState;
use moka::Equivalent;
use moka::Expiry;
use moka::future::Cache as MokaCache;
use prometheus::{IntCounter, IntCounterVec};
use sha2::{Digest, Sha256};
use tokio::sync::Semaphore;

use super::{AuthError, Authenticator, Authorizer, Identity, Target, Verb};

/// A cache keyed by SHA-256 digests and Run targets, hashed with foldhash
/// (seeded per process): every request looks keys up here, and SipHash,
/// moka's default, cost ~5× as much per lookup.
type Cache<K, V> = MokaCache<K, V, RandomState>;

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
    /// Longest a cache miss waits for a free backend call: past it the
    /// request is answered 503 `AuthUnavailable` (with `Retry-After`)
    /// instead of queueing without bound behind a flood of misses.
    pub max_call_wait: Duration,
    /// How long past its TTL an allow decision may still be used while the
    /// backend is unavailable. Zero (the default) fails closed at once.
    pub stale_if_error: Duration,
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
            max_call_wait: Duration::from_secs(1),
            stale_if_error: Duration::ZERO,
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

#[derive(Clone)]
struct StaleAllow {
    identity: Arc<Identity>,
    ttl: Duration,
}

/// A decision's key, as the cache stores it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct DecisionKey {
    token: TokenDigest,
    namespace: String,
    name: String,
    uid: String,
    verb: Verb,
}

/// A decision's key as a request has it, borrowed: what a hit is looked
/// up with, so a hit copies nothing. It hashes as the [`DecisionKey`] it
/// is equivalent to (the same fields in the same order; a `str` hashes as
/// its `String`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct DecisionKeyRef<'a> {
    token: TokenDigest,
    namespace: &'a str,
    name: &'a str,
    uid: &'a str,
    verb: Verb,
}

impl<'a> DecisionKeyRef<'a> {
    fn new(token: TokenDigest, target: &Target<'a>) -> Self {
        Self {
            token,
            namespace: target.namespace,
            name: target.name,
            uid: target.uid,
            verb: target.verb,
        }
    }
}

impl Equivalent<DecisionKey> for DecisionKeyRef<'_> {
    fn equivalent(&self, key: &DecisionKey) -> bool {
        self.token == key.token
            && self.namespace == key.namespace
            && self.name == key.name
            && self.uid == key.uid
            && self.verb == key.verb
    }
}

/// What a layer is looked up with: equivalent to the stored key `K`, and
/// made into one only on a miss.
trait LookupKey<K>: Equivalent<K> + Hash {
    fn to_key(&self) -> K;
}

impl LookupKey<TokenDigest> for TokenDigest {
    fn to_key(&self) -> TokenDigest {
        *self
    }
}

impl LookupKey<DecisionKey> for DecisionKeyRef<'_> {
    fn to_key(&self) -> DecisionKey {
        DecisionKey {
            token: self.token,
            namespace: self.namespace.to_owned(),
            name: self.name.to_owned(),
            uid: self.uid.to_owned(),
            verb: self.verb,
        }
    }
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

impl<K> Expiry<K, StaleAllow> for TtlFromValue {
    fn expire_after_create(
        &self,
        _: &K,
        v: &StaleAllow,
        _: std::time::Instant,
    ) -> Option<Duration> {
        Some(v.ttl)
    }
}

/// Counters the cache keeps.
#[derive(Clone)]
pub struct CacheMetrics {
    /// Lookups by `layer` (`authn`, `authz`, `stale`) and `result` (`hit`, `miss`).
    pub lookups: IntCounterVec,
    /// Final decisions by `outcome` (`allowed`, `denied`, `unauthenticated`,
    /// `unavailable`).
    pub decisions: IntCounterVec,
}

/// A lookup layer of the cache, as the `layer` label names it.
#[derive(Debug, Clone, Copy)]
enum Layer {
    Authn,
    Authz,
    Stale,
}

/// [`CacheMetrics`]' series, resolved once: a request counts its hits
/// without hashing label values.
struct Counters {
    /// Hits and misses of each [`Layer`], in its order.
    lookups: [(IntCounter, IntCounter); 3],
    allowed: IntCounter,
    denied: IntCounter,
    unauthenticated: IntCounter,
    unavailable: IntCounter,
}

impl Counters {
    fn new(m: &CacheMetrics) -> Self {
        let layer = |name: &str| {
            (
                m.lookups.with_label_values(&[name, "hit"]),
                m.lookups.with_label_values(&[name, "miss"]),
            )
        };
        let decided = |outcome: &str| m.decisions.with_label_values(&[outcome]);
        Self {
            lookups: [layer("authn"), layer("authz"), layer("stale")],
            allowed: decided("allowed"),
            denied: decided("denied"),
            unauthenticated: decided("unauthenticated"),
            unavailable: decided("unavailable"),
        }
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

fn digest(token: &str) -> TokenDigest {
    Sha256::digest(token.as_bytes()).into()
}

/// The cache.
pub struct DecisionCache {
    authn: Arc<dyn Authenticator>,
    authz: Arc<dyn Authorizer>,
    tokens: Cache<TokenDigest, Authn>,
    decisions: Cache<DecisionKey, Decision>,
    stale: Cache<DecisionKey, StaleAllow>,
    calls: Arc<Semaphore>,
    cfg: CacheConfig,
    counters: Option<Counters>,
}

impl DecisionCache {
    /// Wraps the backends; `metrics` counts lookups and decisions.
    pub fn new(
        authn: Arc<dyn Authenticator>,
        authz: Arc<dyn Authorizer>,
        cfg: CacheConfig,
        metrics: Option<CacheMetrics>,
    ) -> Self {
        Self {
            authn,
            authz,
            tokens: MokaCache::builder()
                .max_capacity(cfg.max_entries)
                .expire_after(TtlFromValue)
                .build_with_hasher(RandomState::default()),
            decisions: MokaCache::builder()
                .max_capacity(cfg.max_entries)
                .expire_after(TtlFromValue)
                .build_with_hasher(RandomState::default()),
            stale: MokaCache::builder()
                .max_capacity(cfg.max_entries)
                .expire_after(TtlFromValue)
                .support_invalidation_closures()
                .build_with_hasher(RandomState::default()),
            calls: Arc::new(Semaphore::new(cfg.max_concurrent_calls.max(1))),
            cfg,
            counters: metrics.as_ref().map(Counters::new),
        }
    }

    fn count(&self, layer: Layer, hit: bool) {
        if let Some(c) = &self.counters {
            let (hits, misses) = &c.lookups[layer as usize];
            if hit { hits } else { misses }.inc();
        }
    }

    fn count_decision(&self, outcome: &Result<Outcome, AuthError>) {
        if let Some(c) = &self.counters {
            match outcome {
                Ok(Outcome::Allowed(_)) => &c.allowed,
                Ok(Outcome::Denied(_)) => &c.denied,
                Ok(Outcome::Unauthenticated(_)) | Err(AuthError::Unauthenticated(_)) => {
                    &c.unauthenticated
                }
                Err(AuthError::Unavailable(_)) => &c.unavailable,
            }
            .inc();
        }
    }

    /// Authenticates `token` (cached). `Ok(Err(reason))` is a rejection.
    pub async fn authenticate(
        &self,
        token: &str,
    ) -> Result<Result<Arc<Identity>, Arc<str>>, AuthError> {
        self.authenticate_digest(token, digest(token)).await
    }

    /// Looks `key` up in `cache`; on a miss runs `load()` once for all
    /// concurrent callers (bounded by the backend-call semaphore) and counts
    /// the hit or miss under `layer`. Errors of `load` are not cached.
    /// `load` makes its future only on a miss, so a hit carries none of
    /// its state.
    ///
    /// A hit is a plain read with the borrowed key: the coalescing
    /// machinery and the stored key are only made on a miss.
    async fn cached<K, Q, V, F>(
        &self,
        layer: Layer,
        cache: &Cache<K, V>,
        key: &Q,
        load: impl FnOnce() -> F,
    ) -> Result<V, AuthError>
    where
        K: Hash + Eq + Send + Sync + 'static,
        Q: LookupKey<K>,
        V: Clone + Send + Sync + 'static,
        F: std::future::Future<Output = Result<V, AuthError>>,
    {
        if let Some(hit) = cache.get(key).await {
            self.count(layer, true);
            return Ok(hit);
        }
        // Boxed: the coalescing future is several KiB, which would size
        // (and be copied with) every lookup's future, hits included.
        Box::pin(self.miss(layer, cache, key.to_key(), load)).await
    }

    /// [`Self::cached`] on a miss.
    async fn miss<K, V, F>(
        &self,
        layer: Layer,
        cache: &Cache<K, V>,
        key: K,
        load: impl FnOnce() -> F,
    ) -> Result<V, AuthError>
    where
        K: Hash + Eq + Send + Sync + 'static,
        V: Clone + Send + Sync + 'static,
        F: std::future::Future<Output = Result<V, AuthError>>,
    {
        let missed = AtomicBool::new(false);
        let value = cache
            .try_get_with(key, async {
                missed.store(true, Ordering::Relaxed);
                let _permit = match tokio::time::timeout(
                    self.cfg.max_call_wait,
                    self.calls.acquire(),
                )
                .await
                {
                    Ok(Ok(p)) => p,
                    Ok(Err(_)) => return Err(AuthError::Unavailable("shutting down".into())),
                    Err(_) => {
                        return Err(AuthError::Unavailable(
                            "too many authentication checks in flight".into(),
                        ));
                    }
                };
                load().await
            })
            .await
            .map_err(|e: Arc<AuthError>| (*e).clone())?;
        self.count(layer, !missed.load(Ordering::Relaxed));
        Ok(value)
    }

    async fn authenticate_digest(
        &self,
        token: &str,
        digest: TokenDigest,
    ) -> Result<Result<Arc<Identity>, Arc<str>>, AuthError> {
        let authn = self
            .cached(Layer::Authn, &self.tokens, &digest, || async {
                match self.authn.authenticate(token).await {
                    Ok(id) => {
                        let ttl =
                            bounded_ttl(self.cfg.authn_max_ttl, id.expires_at, SystemTime::now());
                        Ok(Authn {
                            result: Ok(Arc::new(id)),
                            ttl,
                        })
                    }
                    Err(AuthError::Unauthenticated(reason)) => {
                        // The backend rejected the token (a miss, not a
                        // negative-cache hit): it loses every stale allowance.
                        if !self.cfg.stale_if_error.is_zero() {
                            let _ = self
                                .stale
                                .invalidate_entries_if(move |k, _| k.token == digest);
                        }
                        Ok(Authn {
                            result: Err(reason.into()),
                            ttl: self.cfg.rejected_ttl,
                        })
                    }
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
        Ok(result)
    }

    /// Authenticates and authorizes `token` for `target`.
    pub async fn check(&self, token: &str, target: &Target<'_>) -> Result<Outcome, AuthError> {
        let key = DecisionKeyRef::new(digest(token), target);
        let mut outcome = self.check_key(token, target, &key).await;
        if let Err(AuthError::Unavailable(_)) = &outcome
            && !self.cfg.stale_if_error.is_zero()
        {
            let stale = self.stale.get(&key).await;
            self.count(Layer::Stale, stale.is_some());
            if let Some(s) = stale
                && s.identity
                    .expires_at
                    .is_none_or(|exp| exp > SystemTime::now())
            {
                outcome = Ok(Outcome::Allowed(s.identity));
            }
        }
        self.count_decision(&outcome);
        outcome
    }

    async fn check_key(
        &self,
        token: &str,
        target: &Target<'_>,
        key: &DecisionKeyRef<'_>,
    ) -> Result<Outcome, AuthError> {
        let identity = match self.authenticate_digest(token, key.token).await? {
            Ok(id) => id,
            Err(reason) => return Ok(Outcome::Unauthenticated(reason)),
        };
        let decision = self
            .cached(Layer::Authz, &self.decisions, key, || async {
                let allowed = self.authz.authorize(&identity, target).await?;
                // Only an answer of the backend (a miss) starts or ends a
                // stale allowance; cache hits never extend it.
                if !self.cfg.stale_if_error.is_zero() {
                    if allowed {
                        let ttl = bounded_ttl(
                            self.cfg.allowed_ttl + self.cfg.stale_if_error,
                            identity.expires_at,
                            SystemTime::now(),
                        );
                        let stale = StaleAllow {
                            identity: identity.clone(),
                            ttl,
                        };
                        self.stale.insert(key.to_key(), stale).await;
                    } else {
                        self.stale.invalidate(key).await;
                    }
                }
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
