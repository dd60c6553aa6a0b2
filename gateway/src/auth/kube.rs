//! Kubernetes authentication and authorization: `TokenReview` and
//! `SubjectAccessReview` through kube-rs, and optional local verification of
//! service-account JWTs against the cluster's OIDC discovery keys.
//!
//! These backends sit behind the [`DecisionCache`](super::cache::DecisionCache),
//! which bounds and coalesces the calls made here. Every API call runs on a
//! dedicated runtime ([`KubeCalls`]) so the proxy's per-thread runtimes never
//! own connections to the API server. Tokens are never logged or echoed: a
//! rejected token gets a fixed reason, and API errors are reported without
//! the request that caused them.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use prometheus::{HistogramVec, IntCounterVec};
use serde::Deserialize;

use super::{AuthError, Authenticator, Authorizer, Identity, Target};

/// API group of Runs.
pub const GROUP: &str = "kruntimes.io";

/// Counters of API calls.
#[derive(Clone)]
pub struct ApiMetrics {
    /// Calls by `api` (`tokenreview`, `subjectaccessreview`, `jwks`) and
    /// `result` (`ok`, `error`).
    pub calls: IntCounterVec,
    /// Call latency by `api`.
    pub latency: HistogramVec,
}

/// Runs API calls on a runtime of their own and records their metrics.
#[derive(Clone)]
pub struct KubeCalls {
    client: kube::Client,
    runtime: tokio::runtime::Handle,
    metrics: Option<ApiMetrics>,
    timeout: Duration,
}

impl KubeCalls {
    /// `client` must have been created on `runtime`.
    pub fn new(
        client: kube::Client,
        runtime: tokio::runtime::Handle,
        metrics: Option<ApiMetrics>,
        timeout: Duration,
    ) -> Self {
        Self {
            client,
            runtime,
            metrics,
            timeout,
        }
    }

    /// The client.
    pub fn client(&self) -> &kube::Client {
        &self.client
    }

    async fn call<T, F>(&self, api: &'static str, f: F) -> Result<T, AuthError>
    where
        T: Send + 'static,
        F: std::future::Future<Output = Result<T, kube::Error>> + Send + 'static,
    {
        let start = Instant::now();
        let timeout = self.timeout;
        let result = self
            .runtime
            .spawn(async move { tokio::time::timeout(timeout, f).await })
            .await;
        let result = match result {
            Ok(Ok(Ok(v))) => Ok(v),
            Ok(Ok(Err(e))) => Err(AuthError::Unavailable(describe(api, &e))),
            Ok(Err(_)) => Err(AuthError::Unavailable(format!(
                "{api} timed out after {timeout:?}"
            ))),
            Err(_) => Err(AuthError::Unavailable(format!("{api} call was cancelled"))),
        };
        if let Some(m) = &self.metrics {
            m.latency
                .with_label_values(&[api])
                .observe(start.elapsed().as_secs_f64());
            m.calls
                .with_label_values(&[api, if result.is_ok() { "ok" } else { "error" }])
                .inc();
        }
        if let Err(AuthError::Unavailable(why)) = &result {
            tracing::warn!(api, error = %why, "kubernetes auth call failed");
        }
        result
    }
}

/// A safe description of an API error: status code and reason, never the
/// request (which holds the token).
fn describe(api: &str, e: &kube::Error) -> String {
    match e {
        kube::Error::Api(status) => format!(
            "{api} failed: {} {}{}",
            status.code,
            status.reason,
            if status.code == 403 && api != "jwks" {
                " (the gateway's RBAC must allow creating it)"
            } else {
                ""
            }
        ),
        _ => format!("{api} failed: the API server is unreachable"),
    }
}

/// Reads `exp` from a JWT without verifying it (the API server verifies);
/// it only bounds how long a result is cached.
pub fn jwt_expiry(token: &str) -> Option<SystemTime> {
    #[derive(Deserialize)]
    struct Exp {
        exp: u64,
    }
    let data = jsonwebtoken::dangerous::insecure_decode::<Exp>(token).ok()?;
    Some(UNIX_EPOCH + Duration::from_secs(data.claims.exp))
}

/// Authenticates bearer tokens with `TokenReview`.
pub struct TokenReviewAuthenticator {
    calls: KubeCalls,
    audiences: Vec<String>,
}

impl TokenReviewAuthenticator {
    /// `audiences` empty means the API server's default audiences.
    pub fn new(calls: KubeCalls, audiences: Vec<String>) -> Self {
        Self { calls, audiences }
    }
}

#[async_trait]
impl Authenticator for TokenReviewAuthenticator {
    async fn authenticate(&self, token: &str) -> Result<Identity, AuthError> {
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_owned()),
                audiences: (!self.audiences.is_empty()).then(|| self.audiences.clone()),
            },
            ..TokenReview::default()
        };
        let api: Api<TokenReview> = Api::all(self.calls.client().clone());
        let result = self
            .calls
            .call("tokenreview", async move {
                api.create(&PostParams::default(), &review).await
            })
            .await?;
        let status = result.status.unwrap_or_default();
        if status.authenticated != Some(true) {
            // The API server's error text is not passed on: it may describe
            // the credential.
            return Err(AuthError::Unauthenticated(
                "the token was not accepted by the cluster".into(),
            ));
        }
        if !self.audiences.is_empty() {
            let granted = status.audiences.unwrap_or_default();
            if !granted.iter().any(|a| self.audiences.contains(a)) {
                return Err(AuthError::Unauthenticated(
                    "the token is not valid for this gateway's audiences".into(),
                ));
            }
        }
        let user = status.user.unwrap_or_default();
        let Some(subject) = user.username.filter(|u| !u.is_empty()) else {
            return Err(AuthError::Unauthenticated(
                "the cluster authenticated the token without a user name".into(),
            ));
        };
        Ok(Identity {
            subject,
            groups: user.groups.unwrap_or_default(),
            uid: user.uid.filter(|u| !u.is_empty()),
            extra: user.extra.unwrap_or_default(),
            expires_at: jwt_expiry(token),
        })
    }
}

/// Authorizes with `SubjectAccessReview`: verb `create` on
/// `kruntimes.io/runs/<invoke|session>` for the exact Run.
pub struct SubjectAccessReviewAuthorizer {
    calls: KubeCalls,
}

impl SubjectAccessReviewAuthorizer {
    /// Wraps the API client.
    pub fn new(calls: KubeCalls) -> Self {
        Self { calls }
    }
}

/// The review sent for `identity` and `target` (pure; unit tested).
pub fn access_review(identity: &Identity, target: &Target) -> SubjectAccessReview {
    SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(identity.subject.clone()),
            groups: Some(identity.groups.clone()),
            uid: identity.uid.clone(),
            extra: (!identity.extra.is_empty()).then(|| identity.extra.clone()),
            resource_attributes: Some(ResourceAttributes {
                group: Some(GROUP.into()),
                resource: Some("runs".into()),
                subresource: Some(target.verb.as_str().into()),
                verb: Some("create".into()),
                namespace: Some(target.namespace.clone()),
                name: Some(target.name.clone()),
                ..ResourceAttributes::default()
            }),
            ..SubjectAccessReviewSpec::default()
        },
        ..SubjectAccessReview::default()
    }
}

#[async_trait]
impl Authorizer for SubjectAccessReviewAuthorizer {
    async fn authorize(&self, identity: &Identity, target: &Target) -> Result<bool, AuthError> {
        let review = access_review(identity, target);
        let api: Api<SubjectAccessReview> = Api::all(self.calls.client().clone());
        let result = self
            .calls
            .call("subjectaccessreview", async move {
                api.create(&PostParams::default(), &review).await
            })
            .await?;
        let status = result.status.unwrap_or_default();
        Ok(status.allowed && status.denied != Some(true))
    }
}

/// Claims of a Kubernetes service-account token.
#[derive(Debug, Deserialize)]
struct SaClaims {
    sub: String,
    exp: u64,
    #[serde(rename = "kubernetes.io")]
    kubernetes: Option<SaKubernetes>,
}

#[derive(Debug, Deserialize)]
struct SaKubernetes {
    namespace: String,
    serviceaccount: Option<SaRef>,
    pod: Option<SaRef>,
    node: Option<SaRef>,
}

#[derive(Debug, Deserialize)]
struct SaRef {
    name: String,
    uid: String,
}

/// Verifies service-account JWTs locally against the issuer's keys (OIDC
/// discovery) and hands every other token to `fallback` (TokenReview).
///
/// Off by default: a locally verified token stays valid until its `exp` even
/// if its ServiceAccount, Pod or Secret was deleted — the API server would
/// notice, this verifier cannot.
pub struct ServiceAccountJwtAuthenticator {
    issuer: String,
    audiences: Vec<String>,
    keys: Arc<std::sync::RwLock<Vec<VerifyingKey>>>,
    fallback: Arc<dyn Authenticator>,
}

type VerifyingKey = (Option<String>, Algorithm, DecodingKey);

async fn fetch_jwks(calls: &KubeCalls) -> Result<(String, JwkSet), AuthError> {
    let client = calls.client().clone();
    let discovery: Discovery = {
        let client = client.clone();
        calls
            .call("jwks", async move {
                let req = http::Request::get("/.well-known/openid-configuration")
                    .body(Vec::new())
                    .map_err(kube::Error::HttpError)?;
                client.request::<Discovery>(req).await
            })
            .await?
    };
    // The API server serves the key set at /openid/v1/jwks, whatever
    // external URL the discovery document advertises (EKS, for one).
    let path = "/openid/v1/jwks";
    let jwks: JwkSet = calls
        .call("jwks", async move {
            let req = http::Request::get(path)
                .body(Vec::new())
                .map_err(kube::Error::HttpError)?;
            client.request::<JwkSet>(req).await
        })
        .await?;
    Ok((discovery.issuer, jwks))
}

fn verifying_keys(jwks: &JwkSet) -> Vec<VerifyingKey> {
    let mut keys = Vec::new();
    for jwk in &jwks.keys {
        let Ok(key) = DecodingKey::from_jwk(jwk) else {
            continue;
        };
        let alg = match jwk.common.key_algorithm.map(|a| a.to_string()).as_deref() {
            Some("ES256") => Algorithm::ES256,
            Some("ES384") => Algorithm::ES384,
            Some("RS256") | None => match &jwk.algorithm {
                jsonwebtoken::jwk::AlgorithmParameters::EllipticCurve(p) => match p.curve {
                    jsonwebtoken::jwk::EllipticCurve::P384 => Algorithm::ES384,
                    _ => Algorithm::ES256,
                },
                _ => Algorithm::RS256,
            },
            _ => continue,
        };
        keys.push((jwk.common.key_id.clone(), alg, key));
    }
    keys
}

#[derive(Deserialize)]
struct Discovery {
    issuer: String,
}

impl ServiceAccountJwtAuthenticator {
    /// Fetches the discovery document and key set through the API server.
    /// Without `audiences`, tokens must be meant for the issuer (the API
    /// server's default audience).
    pub async fn discover(
        calls: &KubeCalls,
        audiences: Vec<String>,
        fallback: Arc<dyn Authenticator>,
    ) -> Result<Self, AuthError> {
        let (issuer, jwks) = fetch_jwks(calls).await?;
        Self::from_jwks(issuer, audiences, &jwks, fallback)
    }

    /// From a known issuer and key set.
    pub fn from_jwks(
        issuer: String,
        audiences: Vec<String>,
        jwks: &JwkSet,
        fallback: Arc<dyn Authenticator>,
    ) -> Result<Self, AuthError> {
        let keys = verifying_keys(jwks);
        if keys.is_empty() {
            return Err(AuthError::Unavailable(
                "the cluster's service-account key set has no usable key".into(),
            ));
        }
        let audiences = if audiences.is_empty() {
            vec![issuer.clone()]
        } else {
            audiences
        };
        Ok(Self {
            issuer,
            audiences,
            keys: Arc::new(std::sync::RwLock::new(keys)),
            fallback,
        })
    }

    /// Re-reads the key set every `period` (key rotation); a failed read
    /// keeps the current keys.
    pub fn refresh_every(&self, calls: KubeCalls, period: Duration) {
        let keys = Arc::downgrade(&self.keys);
        let runtime = calls.runtime.clone();
        runtime.spawn(async move {
            let mut tick = tokio::time::interval(period);
            tick.tick().await;
            loop {
                tick.tick().await;
                let Some(keys) = keys.upgrade() else {
                    return;
                };
                match fetch_jwks(&calls).await {
                    Ok((_, jwks)) => {
                        let fresh = verifying_keys(&jwks);
                        if !fresh.is_empty() {
                            *keys.write().unwrap_or_else(|p| p.into_inner()) = fresh;
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, "service-account key refresh failed"),
                }
            }
        });
    }

    fn verify(&self, token: &str) -> Option<Result<Identity, AuthError>> {
        let header = jsonwebtoken::decode_header(token).ok()?;
        // Only tokens of this issuer are ours to verify.
        #[derive(Deserialize)]
        struct Iss {
            iss: String,
        }
        let iss = jsonwebtoken::dangerous::insecure_decode::<Iss>(token).ok()?;
        if iss.claims.iss != self.issuer {
            return None;
        }
        let keys = self.keys.read().unwrap_or_else(|p| p.into_inner());
        let candidates: Vec<&VerifyingKey> = keys
            .iter()
            .filter(|(kid, alg, _)| {
                *alg == header.alg && (header.kid.is_none() || kid.is_none() || *kid == header.kid)
            })
            .collect();
        if candidates.is_empty() {
            // A key this gateway has not fetched yet (rotation): the API
            // server decides.
            return None;
        }
        let mut validation = Validation::new(header.alg);
        validation.set_issuer(&[&self.issuer]);
        validation.set_audience(&self.audiences);
        validation.leeway = 0;
        validation.set_required_spec_claims(&["exp", "iss", "sub", "aud"]);
        for (_, _, key) in candidates {
            if let Ok(data) = jsonwebtoken::decode::<SaClaims>(token, key, &validation) {
                return Some(identity_from_sa(data.claims));
            }
        }
        Some(Err(AuthError::Unauthenticated(
            "the service-account token did not verify".into(),
        )))
    }
}

fn identity_from_sa(c: SaClaims) -> Result<Identity, AuthError> {
    let Some(k) = c.kubernetes else {
        return Err(AuthError::Unauthenticated(
            "not a bound service-account token".into(),
        ));
    };
    let Some(sa) = k.serviceaccount else {
        return Err(AuthError::Unauthenticated(
            "not a bound service-account token".into(),
        ));
    };
    let subject = format!("system:serviceaccount:{}:{}", k.namespace, sa.name);
    if c.sub != subject {
        return Err(AuthError::Unauthenticated(
            "service-account token subject does not match its claims".into(),
        ));
    }
    let mut extra = BTreeMap::new();
    if let Some(pod) = k.pod {
        extra.insert(
            "authentication.kubernetes.io/pod-name".into(),
            vec![pod.name],
        );
        extra.insert("authentication.kubernetes.io/pod-uid".into(), vec![pod.uid]);
    }
    if let Some(node) = k.node {
        extra.insert(
            "authentication.kubernetes.io/node-name".into(),
            vec![node.name],
        );
        extra.insert(
            "authentication.kubernetes.io/node-uid".into(),
            vec![node.uid],
        );
    }
    Ok(Identity {
        subject,
        groups: vec![
            "system:serviceaccounts".into(),
            format!("system:serviceaccounts:{}", k.namespace),
            "system:authenticated".into(),
        ],
        uid: Some(sa.uid),
        extra,
        expires_at: Some(UNIX_EPOCH + Duration::from_secs(c.exp)),
    })
}

#[async_trait]
impl Authenticator for ServiceAccountJwtAuthenticator {
    async fn authenticate(&self, token: &str) -> Result<Identity, AuthError> {
        match self.verify(token) {
            Some(result) => result,
            None => self.fallback.authenticate(token).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::Verb;

    #[test]
    fn access_review_names_the_exact_run_and_subresource() {
        let mut id = Identity::new("alice", vec!["devs".into()]);
        id.uid = Some("u-1".into());
        id.extra.insert("k".into(), vec!["v".into()]);
        for (verb, sub) in [(Verb::Invoke, "invoke"), (Verb::Session, "session")] {
            let t = Target {
                namespace: "a".into(),
                name: "hello".into(),
                uid: "0e0c".into(),
                verb,
            };
            let r = access_review(&id, &t).spec;
            let ra = r.resource_attributes.unwrap();
            assert_eq!(ra.group.as_deref(), Some("kruntimes.io"));
            assert_eq!(ra.resource.as_deref(), Some("runs"));
            assert_eq!(ra.subresource.as_deref(), Some(sub));
            assert_eq!(ra.verb.as_deref(), Some("create"));
            assert_eq!(ra.namespace.as_deref(), Some("a"));
            assert_eq!(ra.name.as_deref(), Some("hello"));
            assert_eq!(r.user.as_deref(), Some("alice"));
            assert_eq!(r.groups, Some(vec!["devs".to_string()]));
            assert_eq!(r.uid.as_deref(), Some("u-1"));
            assert_eq!(r.extra.unwrap()["k"], vec!["v".to_string()]);
        }
    }

    #[test]
    fn expiry_is_read_without_verification_and_absent_for_opaque_tokens() {
        use base64::Engine as _;
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let token = format!(
            "{}.{}.{}",
            b64.encode(br#"{"alg":"ES256","typ":"JWT"}"#),
            b64.encode(br#"{"exp":2000000000,"sub":"x"}"#),
            b64.encode(b"not-a-signature")
        );
        assert_eq!(
            jwt_expiry(&token),
            Some(UNIX_EPOCH + Duration::from_secs(2_000_000_000))
        );
        assert_eq!(jwt_expiry("kt-0123456789abcdef"), None);
        assert_eq!(jwt_expiry("a.b.c"), None);
    }

    #[test]
    fn service_account_claims_become_the_api_servers_identity() {
        let c: SaClaims = serde_json::from_value(serde_json::json!({
            "sub": "system:serviceaccount:a:bot",
            "exp": 2000000000u64,
            "kubernetes.io": {
                "namespace": "a",
                "serviceaccount": {"name": "bot", "uid": "sa-uid"},
                "pod": {"name": "p", "uid": "pod-uid"}
            }
        }))
        .unwrap();
        let id = identity_from_sa(c).unwrap();
        assert_eq!(id.subject, "system:serviceaccount:a:bot");
        assert_eq!(id.uid.as_deref(), Some("sa-uid"));
        assert!(id.groups.contains(&"system:serviceaccounts:a".to_string()));
        assert_eq!(
            id.extra["authentication.kubernetes.io/pod-name"],
            vec!["p".to_string()]
        );
        let forged: SaClaims = serde_json::from_value(serde_json::json!({
            "sub": "system:serviceaccount:kube-system:admin",
            "exp": 2000000000u64,
            "kubernetes.io": {"namespace": "a", "serviceaccount": {"name": "bot", "uid": "x"}}
        }))
        .unwrap();
        assert!(identity_from_sa(forged).is_err());
    }
}
