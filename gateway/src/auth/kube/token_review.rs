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

#[cfg(test)]
mod tests {
    use super::*;

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
