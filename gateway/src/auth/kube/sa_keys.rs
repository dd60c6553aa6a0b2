//! Local verification of service-account JWTs against the cluster's
//! service-account keys (OIDC discovery, `/openid/v1/jwks`), with
//! `TokenReview` as the fallback for every token it cannot decide.
//!
//! Off by default: a locally verified token stays valid until its `exp` even
//! if its ServiceAccount, Pod or Secret was deleted — the API server would
//! notice, this verifier cannot.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use async_trait::async_trait;
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;

use super::KubeCalls;
use crate::auth::{AuthError, Authenticator, Identity};

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
mod tests;
