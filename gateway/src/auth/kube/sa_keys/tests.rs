use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::SystemTime;

use jsonwebtoken::jwk::Jwk;
use jsonwebtoken::{EncodingKey, Header};

use super::*;

const ISSUER: &str = "https://kubernetes.default.svc";

/// What the fallback (TokenReview in production) answers, and how often it
/// was asked.
struct Fallback(AtomicUsize);

#[async_trait]
impl Authenticator for Fallback {
    async fn authenticate(&self, _: &str) -> Result<Identity, AuthError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(Identity::new("from-token-review", vec![]))
    }
}

struct Signer {
    key: EncodingKey,
    kid: String,
}

impl Signer {
    fn new(kid: &str) -> Self {
        let kp = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        Self {
            key: EncodingKey::from_ec_pem(kp.serialize_pem().as_bytes()).unwrap(),
            kid: kid.into(),
        }
    }

    fn jwk(&self) -> Jwk {
        let mut jwk = Jwk::from_encoding_key(&self.key, Algorithm::ES256).unwrap();
        jwk.common.key_id = Some(self.kid.clone());
        jwk
    }

    fn sign(&self, claims: &serde_json::Value) -> String {
        let mut header = Header::new(Algorithm::ES256);
        header.kid = Some(self.kid.clone());
        jsonwebtoken::encode(&header, claims, &self.key).unwrap()
    }
}

fn in_an_hour() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 3600
}

fn bot_claims(iss: &str, aud: &str) -> serde_json::Value {
    serde_json::json!({
        "iss": iss,
        "aud": [aud],
        "sub": "system:serviceaccount:a:bot",
        "exp": in_an_hour(),
        "kubernetes.io": {
            "namespace": "a",
            "serviceaccount": {"name": "bot", "uid": "sa-uid"}
        }
    })
}

fn verifier(
    signer: &Signer,
    audiences: Vec<String>,
) -> (ServiceAccountJwtAuthenticator, Arc<Fallback>) {
    let fallback = Arc::new(Fallback(AtomicUsize::new(0)));
    let jwks = JwkSet {
        keys: vec![signer.jwk()],
    };
    let v = ServiceAccountJwtAuthenticator::from_jwks(
        ISSUER.into(),
        audiences,
        &jwks,
        fallback.clone(),
    )
    .unwrap();
    (v, fallback)
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

#[test]
fn a_key_set_without_usable_keys_is_unavailable() {
    let fallback = Arc::new(Fallback(AtomicUsize::new(0)));
    let empty = JwkSet { keys: vec![] };
    let err = ServiceAccountJwtAuthenticator::from_jwks(ISSUER.into(), vec![], &empty, fallback)
        .err()
        .unwrap();
    assert!(matches!(err, AuthError::Unavailable(_)));
}

#[tokio::test]
async fn a_token_signed_by_a_cluster_key_is_verified_locally() {
    let signer = Signer::new("k1");
    // Without configured audiences the issuer is the expected audience.
    let (v, fallback) = verifier(&signer, vec![]);
    let id = v
        .authenticate(&signer.sign(&bot_claims(ISSUER, ISSUER)))
        .await
        .unwrap();
    assert_eq!(id.subject, "system:serviceaccount:a:bot");
    assert!(id.expires_at.is_some());
    assert_eq!(fallback.0.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_token_for_another_audience_is_rejected_without_asking_the_api_server() {
    let signer = Signer::new("k1");
    let (v, fallback) = verifier(&signer, vec!["kruntimes-gateway".into()]);
    let err = v
        .authenticate(&signer.sign(&bot_claims(ISSUER, ISSUER)))
        .await
        .unwrap_err();
    assert_eq!(
        err,
        AuthError::Unauthenticated("the service-account token did not verify".into())
    );
    assert_eq!(fallback.0.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_token_signed_by_an_unknown_key_with_a_known_kid_does_not_verify() {
    let (v, _) = verifier(&Signer::new("k1"), vec![]);
    let impostor = Signer::new("k1");
    let err = v
        .authenticate(&impostor.sign(&bot_claims(ISSUER, ISSUER)))
        .await
        .unwrap_err();
    assert!(matches!(err, AuthError::Unauthenticated(_)));
}

#[tokio::test]
async fn tokens_of_other_issuers_unknown_kids_or_opaque_tokens_go_to_the_fallback() {
    let signer = Signer::new("k1");
    let (v, fallback) = verifier(&signer, vec![]);
    let other_issuer = signer.sign(&bot_claims("https://elsewhere", ISSUER));
    let rotated = Signer::new("k2").sign(&bot_claims(ISSUER, ISSUER));
    for token in [other_issuer.as_str(), rotated.as_str(), "kt-opaque"] {
        let id = v.authenticate(token).await.unwrap();
        assert_eq!(id.subject, "from-token-review");
    }
    assert_eq!(fallback.0.load(Ordering::SeqCst), 3);
}
