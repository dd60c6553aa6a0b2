use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;

use super::*;

struct CountingAuthn {
    calls: AtomicUsize,
    down: std::sync::atomic::AtomicBool,
    revoked: std::sync::atomic::AtomicBool,
    exp: Option<SystemTime>,
}

#[async_trait]
impl Authenticator for CountingAuthn {
    async fn authenticate(&self, token: &str) -> Result<Identity, AuthError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(20)).await;
        if self.down.load(Ordering::SeqCst) {
            return Err(AuthError::Unavailable("backend down".into()));
        }
        if self.revoked.load(Ordering::SeqCst) {
            return Err(AuthError::Unauthenticated("revoked".into()));
        }
        match token {
            "good" | "good2" => Ok(Identity {
                expires_at: self.exp,
                ..Identity::new("alice", vec![])
            }),
            _ => Err(AuthError::Unauthenticated("unknown token".into())),
        }
    }
}

struct CountingAuthz(AtomicUsize);

#[async_trait]
impl Authorizer for CountingAuthz {
    async fn authorize(&self, _: &Identity, t: &Target<'_>) -> Result<bool, AuthError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(t.namespace == "a")
    }
}

fn target(ns: &str) -> Target<'_> {
    Target {
        namespace: ns,
        name: "r",
        uid: "u",
        verb: Verb::Invoke,
    }
}

fn setup(exp: Option<SystemTime>) -> (Arc<CountingAuthn>, Arc<CountingAuthz>, Arc<DecisionCache>) {
    build(exp, CacheConfig::default())
}

fn build(
    exp: Option<SystemTime>,
    cfg: CacheConfig,
) -> (Arc<CountingAuthn>, Arc<CountingAuthz>, Arc<DecisionCache>) {
    let authn = Arc::new(CountingAuthn {
        calls: AtomicUsize::new(0),
        down: false.into(),
        revoked: false.into(),
        exp,
    });
    let authz = Arc::new(CountingAuthz(AtomicUsize::new(0)));
    let cache = Arc::new(DecisionCache::new(authn.clone(), authz.clone(), cfg, None));
    (authn, authz, cache)
}

#[tokio::test]
async fn concurrent_misses_coalesce_into_one_call_per_layer() {
    let (authn, authz, cache) = setup(None);
    let mut tasks = Vec::new();
    for _ in 0..32 {
        let c = cache.clone();
        tasks.push(tokio::spawn(
            async move { c.check("good", &target("a")).await },
        ));
    }
    for t in tasks {
        assert!(matches!(t.await.unwrap().unwrap(), Outcome::Allowed(_)));
    }
    assert_eq!(authn.calls.load(Ordering::SeqCst), 1);
    assert_eq!(authz.0.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn denials_and_rejections_are_cached_and_distinct() {
    let (authn, authz, cache) = setup(None);
    assert!(matches!(
        cache.check("good", &target("b")).await.unwrap(),
        Outcome::Denied(_)
    ));
    assert!(matches!(
        cache.check("good", &target("b")).await.unwrap(),
        Outcome::Denied(_)
    ));
    assert_eq!(authz.0.load(Ordering::SeqCst), 1);
    for _ in 0..10 {
        assert!(matches!(
            cache.check("bad", &target("a")).await.unwrap(),
            Outcome::Unauthenticated(_)
        ));
    }
    assert_eq!(
        authn.calls.load(Ordering::SeqCst),
        2,
        "one call for good, one for bad"
    );
}

#[tokio::test]
async fn backend_errors_fail_closed_and_are_not_cached() {
    let (authn, _, cache) = setup(None);
    authn.down.store(true, Ordering::SeqCst);
    assert!(matches!(
        cache.check("good", &target("a")).await,
        Err(AuthError::Unavailable(_))
    ));
    authn.down.store(false, Ordering::SeqCst);
    assert!(matches!(
        cache.check("good", &target("a")).await.unwrap(),
        Outcome::Allowed(_)
    ));
    assert_eq!(authn.calls.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn cached_identity_never_outlives_token_expiry() {
    let (authn, _, cache) = setup(Some(SystemTime::now() + Duration::from_millis(300)));
    assert!(matches!(
        cache.check("good", &target("a")).await.unwrap(),
        Outcome::Allowed(_)
    ));
    tokio::time::sleep(Duration::from_millis(400)).await;
    let out = cache.check("good", &target("a")).await.unwrap();
    assert!(matches!(out, Outcome::Unauthenticated(_)), "{out:?}");
    assert_eq!(
        authn.calls.load(Ordering::SeqCst),
        2,
        "expired entry was not reused"
    );
}

#[test]
fn ttl_is_bounded_by_expiry() {
    let now = SystemTime::now();
    let d = Duration::from_secs(30);
    assert_eq!(bounded_ttl(d, None, now), d);
    assert_eq!(
        bounded_ttl(d, Some(now + Duration::from_secs(10)), now),
        Duration::from_secs(10)
    );
    assert_eq!(
        bounded_ttl(d, Some(now - Duration::from_secs(10)), now),
        Duration::ZERO
    );
}

fn setup_with(cfg: CacheConfig) -> (Arc<CountingAuthn>, Arc<DecisionCache>) {
    let (authn, _, cache) = build(None, cfg);
    (authn, cache)
}

fn short_ttls(stale_if_error: Duration) -> CacheConfig {
    CacheConfig {
        authn_max_ttl: Duration::from_millis(200),
        allowed_ttl: Duration::from_millis(200),
        stale_if_error,
        ..CacheConfig::default()
    }
}

#[tokio::test]
async fn stale_if_error_keeps_recent_allows_only_within_its_window() {
    let (authn, cache) = setup_with(short_ttls(Duration::from_millis(2000)));
    assert!(matches!(
        cache.check("good", &target("a")).await,
        Ok(Outcome::Allowed(_))
    ));
    tokio::time::sleep(Duration::from_millis(400)).await;
    authn.down.store(true, Ordering::SeqCst);
    // Past the TTL, backend down: the recent allow is reused...
    assert!(matches!(
        cache.check("good", &target("a")).await,
        Ok(Outcome::Allowed(_))
    ));
    // ...but never for a key that was not allowed before.
    assert!(matches!(
        cache.check("good2", &target("a")).await,
        Err(AuthError::Unavailable(_))
    ));
    assert!(matches!(
        cache.check("good", &target("b")).await,
        Err(AuthError::Unavailable(_))
    ));
    // Past TTL + window: fail closed.
    tokio::time::sleep(Duration::from_millis(2000)).await;
    assert!(matches!(
        cache.check("good", &target("a")).await,
        Err(AuthError::Unavailable(_))
    ));
}

#[tokio::test]
async fn without_stale_if_error_an_outage_fails_closed_after_the_ttl() {
    let (authn, cache) = setup_with(short_ttls(Duration::ZERO));
    assert!(matches!(
        cache.check("good", &target("a")).await,
        Ok(Outcome::Allowed(_))
    ));
    tokio::time::sleep(Duration::from_millis(400)).await;
    authn.down.store(true, Ordering::SeqCst);
    assert!(matches!(
        cache.check("good", &target("a")).await,
        Err(AuthError::Unavailable(_))
    ));
}

#[tokio::test]
async fn a_rejected_token_loses_its_stale_allowances() {
    let (authn, cache) = setup_with(short_ttls(Duration::from_secs(60)));
    assert!(matches!(
        cache.check("good", &target("a")).await,
        Ok(Outcome::Allowed(_))
    ));
    tokio::time::sleep(Duration::from_millis(400)).await;
    // The token is revoked: the backend now rejects it...
    authn.revoked.store(true, Ordering::SeqCst);
    assert!(matches!(
        cache.check("good", &target("a")).await,
        Ok(Outcome::Unauthenticated(_))
    ));
    // ...and a later outage does not bring the old allow back.
    tokio::time::sleep(Duration::from_millis(100)).await;
    authn.revoked.store(false, Ordering::SeqCst);
    authn.down.store(true, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(5100)).await;
    assert!(matches!(
        cache.check("good", &target("a")).await,
        Err(AuthError::Unavailable(_))
    ));
}

#[tokio::test]
async fn a_miss_waits_for_a_backend_call_only_so_long() {
    let (_, cache) = setup_with(CacheConfig {
        max_concurrent_calls: 1,
        max_call_wait: Duration::from_millis(1),
        ..CacheConfig::default()
    });
    // Two misses at once; the backend takes 20 ms a call and one call may
    // run: one is answered, the other gives up waiting.
    let t = target("a");
    let (a, b) = tokio::join!(cache.check("good", &t), cache.check("good2", &t));
    let unavailable = |r: &Result<Outcome, AuthError>| matches!(r, Err(AuthError::Unavailable(m)) if m.contains("in flight"));
    assert!(
        unavailable(&a) != unavailable(&b),
        "exactly one waited too long: {a:?} {b:?}"
    );
    // Errors are not cached: once the backend is free the same token works.
    let again = if unavailable(&a) { "good" } else { "good2" };
    assert!(matches!(
        cache.check(again, &target("a")).await,
        Ok(Outcome::Allowed(_))
    ));
}

#[tokio::test]
async fn lookups_and_decisions_are_counted_by_layer_and_outcome() {
    let lookups =
        IntCounterVec::new(prometheus::Opts::new("l", "l"), &["layer", "result"]).unwrap();
    let decisions = IntCounterVec::new(prometheus::Opts::new("d", "d"), &["outcome"]).unwrap();
    let authn = Arc::new(CountingAuthn {
        calls: AtomicUsize::new(0),
        down: false.into(),
        revoked: false.into(),
        exp: None,
    });
    let authz = Arc::new(CountingAuthz(AtomicUsize::new(0)));
    let metrics = CacheMetrics {
        lookups: lookups.clone(),
        decisions: decisions.clone(),
    };
    let cache = DecisionCache::new(authn, authz, CacheConfig::default(), Some(metrics));
    let lookup = |layer: &str, result: &str| lookups.with_label_values(&[layer, result]).get();
    let decided = |outcome: &str| decisions.with_label_values(&[outcome]).get();
    // Every series exists before the first request, at zero.
    let series = |v: &IntCounterVec| {
        use prometheus::core::Collector as _;
        v.collect()[0].get_metric().len()
    };
    assert_eq!(series(&lookups), 6);
    assert_eq!(series(&decisions), 4);

    for _ in 0..3 {
        cache.check("good", &target("a")).await.unwrap();
    }
    cache.check("good", &target("b")).await.unwrap();
    cache.check("bad", &target("a")).await.unwrap();
    cache.check("bad", &target("a")).await.unwrap();
    // authn: good (miss, 3 hits), bad (miss, hit); authz: a (miss, 2 hits), b (miss).
    assert_eq!((lookup("authn", "miss"), lookup("authn", "hit")), (2, 4));
    assert_eq!((lookup("authz", "miss"), lookup("authz", "hit")), (2, 2));
    assert_eq!((lookup("stale", "miss"), lookup("stale", "hit")), (0, 0));
    assert_eq!(
        (
            decided("allowed"),
            decided("denied"),
            decided("unauthenticated"),
            decided("unavailable")
        ),
        (3, 1, 2, 0)
    );
}

#[test]
fn a_borrowed_decision_key_finds_the_stored_one_and_only_it() {
    use std::hash::BuildHasher;
    let t = target("a");
    let borrowed = DecisionKeyRef::new(digest("good"), &t);
    let stored = borrowed.to_key();
    // A hit is looked up by the borrowed key: it must hash as the stored
    // one, under any hasher.
    let s = std::collections::hash_map::RandomState::new();
    assert_eq!(s.hash_one(borrowed), s.hash_one(&stored));
    assert!(borrowed.equivalent(&stored));
    let others = [
        Target {
            namespace: "b",
            ..t
        },
        Target { name: "s", ..t },
        Target { uid: "v", ..t },
        Target {
            verb: Verb::Session,
            ..t
        },
    ];
    for other in others {
        assert!(!DecisionKeyRef::new(digest("good"), &other).equivalent(&stored));
    }
    assert!(!DecisionKeyRef::new(digest("good2"), &t).equivalent(&stored));
}
