//! Local verification of the embedded control plane's ES256 JWTs: signature,
//! `exp`, `nbf`, `iss` and `aud`.

use std::time::{Duration, UNIX_EPOCH};

use async_trait::async_trait;
use jsonwebtoken::{Algorithm, DecodingKey, Validation, decode};
use serde::{Deserialize, Serialize};

use super::{AuthError, Authenticator, Identity};

/// Claims of an embedded-mode token.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Claims {
    /// Subject.
    pub sub: String,
    /// Groups.
    #[serde(default)]
    pub groups: Vec<String>,
    /// Issuer.
    pub iss: String,
    /// Audience.
    pub aud: String,
    /// Expiry (seconds since the epoch).
    pub exp: u64,
    /// Not before.
    #[serde(default)]
    pub nbf: u64,
    /// Issued at.
    #[serde(default)]
    pub iat: u64,
}

/// Verifies ES256 tokens with one public key.
pub struct JwtAuthenticator {
    key: DecodingKey,
    validation: Validation,
}

impl JwtAuthenticator {
    /// From a PEM public key, the expected issuer and audience.
    pub fn new(
        public_key_pem: &[u8],
        issuer: &str,
        audience: &str,
    ) -> Result<Self, jsonwebtoken::errors::Error> {
        let mut validation = Validation::new(Algorithm::ES256);
        validation.set_issuer(&[issuer]);
        validation.set_audience(&[audience]);
        validation.validate_nbf = true;
        validation.leeway = 5;
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        Ok(Self {
            key: DecodingKey::from_ec_pem(public_key_pem)?,
            validation,
        })
    }
}

#[async_trait]
impl Authenticator for JwtAuthenticator {
    async fn authenticate(&self, token: &str) -> Result<Identity, AuthError> {
        let data = decode::<Claims>(token, &self.key, &self.validation)
            // Why, in words; never the token, nor a decoder's internals.
            .map_err(|e| AuthError::Unauthenticated(format!("invalid token: {}", why(e.kind()))))?;
        let c = data.claims;
        Ok(Identity {
            expires_at: Some(UNIX_EPOCH + Duration::from_secs(c.exp)),
            ..Identity::new(c.sub, c.groups)
        })
    }
}

/// Why a token was refused, as the caller reads it.
fn why(kind: &jsonwebtoken::errors::ErrorKind) -> String {
    use jsonwebtoken::errors::ErrorKind as K;
    match kind {
        K::ExpiredSignature => "it has expired".into(),
        K::ImmatureSignature => "it is not valid yet (nbf)".into(),
        K::InvalidSignature => "its signature does not verify with this gateway's key".into(),
        K::InvalidIssuer => "it names another issuer".into(),
        K::InvalidAudience => "it names another audience".into(),
        K::InvalidSubject => "its subject is not accepted".into(),
        K::MissingRequiredClaim(claim) => format!("it lacks the {claim:?} claim"),
        K::InvalidClaimFormat(claim) => format!("its {claim:?} claim is malformed"),
        K::InvalidAlgorithm | K::InvalidAlgorithmName | K::MissingAlgorithm => {
            "it is not signed with ES256".into()
        }
        _ => "it is not a JWT this gateway issued (a header, claims and signature, base64url-encoded)".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jsonwebtoken::{EncodingKey, Header, encode};

    fn keys() -> (String, String) {
        let kp = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        (kp.serialize_pem(), kp.public_key_pem())
    }

    fn now() -> u64 {
        std::time::SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs()
    }

    fn token(private_pem: &str, claims: &Claims) -> String {
        encode(
            &Header::new(Algorithm::ES256),
            claims,
            &EncodingKey::from_ec_pem(private_pem.as_bytes()).unwrap(),
        )
        .unwrap()
    }

    fn claims() -> Claims {
        Claims {
            sub: "alice".into(),
            groups: vec!["dev".into()],
            iss: "krt".into(),
            aud: "kruntimes-gateway".into(),
            exp: now() + 600,
            nbf: now() - 10,
            iat: now(),
        }
    }

    #[tokio::test]
    async fn valid_token_yields_identity_with_expiry() {
        let (private, public) = keys();
        let a = JwtAuthenticator::new(public.as_bytes(), "krt", "kruntimes-gateway").unwrap();
        let c = claims();
        let id = a.authenticate(&token(&private, &c)).await.unwrap();
        assert_eq!(id.subject, "alice");
        assert_eq!(id.groups, vec!["dev"]);
        assert_eq!(id.expires_at, Some(UNIX_EPOCH + Duration::from_secs(c.exp)));
    }

    #[tokio::test]
    async fn expired_foreign_misaddressed_and_garbage_tokens_are_rejected() {
        let (private, public) = keys();
        let (other_private, _) = keys();
        let a = JwtAuthenticator::new(public.as_bytes(), "krt", "kruntimes-gateway").unwrap();
        let mut expired = claims();
        expired.exp = now() - 120;
        let mut future = claims();
        future.nbf = now() + 600;
        let mut wrong_aud = claims();
        wrong_aud.aud = "other".into();
        let mut wrong_iss = claims();
        wrong_iss.iss = "evil".into();
        for t in [
            token(&private, &expired),
            token(&private, &future),
            token(&private, &wrong_aud),
            token(&private, &wrong_iss),
            token(&other_private, &claims()),
            "not-a-jwt".to_owned(),
            String::new(),
        ] {
            let err = a.authenticate(&t).await.unwrap_err();
            assert!(matches!(err, AuthError::Unauthenticated(_)));
            if !t.is_empty() {
                assert!(!err.to_string().contains(&t), "errors must not echo tokens");
            }
            let text = err.to_string();
            assert!(
                !text.contains("Error(") && !text.contains("Json") && !text.contains("Base64"),
                "a decoder's internals leaked: {text}"
            );
        }
        let a = &a;
        let says = |t: String| async move { a.authenticate(&t).await.unwrap_err().to_string() };
        assert!(
            says(token(&private, &expired))
                .await
                .ends_with("invalid token: it has expired")
        );
        assert!(
            says("not-a-jwt".into())
                .await
                .contains("it is not a JWT this gateway issued")
        );
        assert!(
            says(token(&other_private, &claims()))
                .await
                .contains("signature does not verify")
        );
    }
}
