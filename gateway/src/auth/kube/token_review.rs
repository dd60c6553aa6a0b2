//! Authentication with `TokenReview`: the API server decides whether a
//! bearer token is valid and whose it is.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use serde::Deserialize;

use super::KubeCalls;
use crate::auth::{AuthError, Authenticator, Identity};

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

/// Why the cluster refused `token`, as far as its unverified claims tell
/// (a hint, never a decision: the API server decided): a JWT issued for
/// other audiences than the gateway's, or expired. Claims are bounded
/// before they are quoted; nothing of the token itself is.
fn refused(token: &str, audiences: &[String], now: SystemTime) -> String {
    #[derive(Deserialize)]
    struct Claims {
        #[serde(default)]
        aud: Option<Audiences>,
        #[serde(default)]
        exp: Option<u64>,
    }
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Audiences {
        One(String),
        Many(Vec<String>),
    }
    const REFUSED: &str = "the token was not accepted by the cluster";
    let Ok(data) = jsonwebtoken::dangerous::insecure_decode::<Claims>(token) else {
        return REFUSED.into();
    };
    let claims = data.claims;
    if let Some(exp) = claims.exp
        && UNIX_EPOCH + Duration::from_secs(exp) <= now
    {
        return format!("{REFUSED}: it expired");
    }
    let aud = match claims.aud {
        Some(Audiences::One(a)) => vec![a],
        Some(Audiences::Many(a)) => a,
        None => vec![],
    };
    if !audiences.is_empty() && !aud.iter().any(|a| audiences.contains(a)) {
        let quote = |a: &[String]| {
            a.iter()
                .take(3)
                .map(|a| kruntimes_proto::api::truncate_utf8(a.clone(), 64))
                .collect::<Vec<_>>()
                .join(", ")
        };
        return format!(
            "{REFUSED}: it was issued for audience {}, and this gateway takes {} (kubectl create token NAME --audience {})",
            if aud.is_empty() {
                "none".into()
            } else {
                quote(&aud)
            },
            quote(audiences),
            audiences[0]
        );
    }
    REFUSED.into()
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
        let result = self.calls.create("tokenreview", review).await?;
        let status = result.status.unwrap_or_default();
        if status.authenticated != Some(true) {
            // The API server's error text is not passed on: it may describe
            // the credential. The token's own claims may say why.
            return Err(AuthError::Unauthenticated(refused(
                token,
                &self.audiences,
                SystemTime::now(),
            )));
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

#[cfg(test)]
mod tests {
    use super::*;

    fn jwt(claims: &str) -> String {
        use base64::Engine as _;
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        format!(
            "{}.{}.{}",
            b64.encode(br#"{"alg":"RS256","typ":"JWT"}"#),
            b64.encode(claims.as_bytes()),
            b64.encode(b"sig")
        )
    }

    #[test]
    fn a_refusal_names_the_audience_the_token_lacks_or_its_expiry_never_the_token() {
        let ours = vec!["kruntimes-gateway".to_owned()];
        let now = UNIX_EPOCH + Duration::from_secs(1_900_000_000);
        let default_aud = jwt(r#"{"aud":["https://kubernetes.default.svc"],"exp":2000000000}"#);
        let said = refused(&default_aud, &ours, now);
        assert_eq!(
            said,
            "the token was not accepted by the cluster: it was issued for audience https://kubernetes.default.svc, and this gateway takes kruntimes-gateway (kubectl create token NAME --audience kruntimes-gateway)"
        );
        assert!(!said.contains(&default_aud));
        let one = jwt(r#"{"aud":"other","exp":2000000000}"#);
        assert!(refused(&one, &ours, now).contains("issued for audience other,"));
        let none = jwt(r#"{"exp":2000000000}"#);
        assert!(refused(&none, &ours, now).contains("issued for audience none,"));
        let expired = jwt(r#"{"aud":"kruntimes-gateway","exp":1000}"#);
        assert_eq!(
            refused(&expired, &ours, now),
            "the token was not accepted by the cluster: it expired"
        );
        // Our audience and not expired: revoked, or another issuer.
        let ok_aud = jwt(r#"{"aud":"kruntimes-gateway","exp":2000000000}"#);
        assert_eq!(
            refused(&ok_aud, &ours, now),
            "the token was not accepted by the cluster"
        );
        // The API server's default audiences, or an opaque token: no guess.
        assert_eq!(
            refused(&default_aud, &[], now),
            "the token was not accepted by the cluster"
        );
        assert_eq!(
            refused("kt-0123456789", &ours, now),
            "the token was not accepted by the cluster"
        );
        let long = jwt(&format!(
            r#"{{"aud":"{}","exp":2000000000}}"#,
            "a".repeat(500)
        ));
        assert!(refused(&long, &ours, now).len() < 300);
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
}
