//! Service-account tokens: real JWTs from the TokenRequest API, tokens
//! minted with the API server's own signing key (shorter-lived than the API
//! allows), and a foreign key for forged-token tests.

use std::time::Duration;

use anyhow::Context;
use kube::api::{Api, PostParams};

use crate::pki::{API_AUDIENCE, SA_ISSUER};
use crate::server::ApiServer;

impl ApiServer {
    /// A real service-account JWT from the TokenRequest API (the API server
    /// allows at least 600 s).
    pub async fn service_account_token(
        &self,
        namespace: &str,
        name: &str,
        expiration_seconds: i64,
    ) -> anyhow::Result<String> {
        self.service_account_token_for(namespace, name, expiration_seconds, API_AUDIENCE)
            .await
    }

    /// [`Self::service_account_token`] for another audience.
    pub async fn service_account_token_for(
        &self,
        namespace: &str,
        name: &str,
        expiration_seconds: i64,
        audience: &str,
    ) -> anyhow::Result<String> {
        use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
        use k8s_openapi::api::core::v1::ServiceAccount;
        let request = TokenRequest {
            spec: TokenRequestSpec {
                audiences: vec![audience.into()],
                expiration_seconds: Some(expiration_seconds),
                bound_object_ref: None,
            },
            ..Default::default()
        };
        let api = Api::<ServiceAccount>::namespaced(self.client().await?, namespace);
        let issued: TokenRequest = api
            .create_subresource("token", name, &PostParams::default(), &request)
            .await?;
        Ok(issued.status.context("TokenRequest without status")?.token)
    }

    /// Signs a service-account token with the API server's own signing key,
    /// valid for `ttl` (the TokenRequest API will not issue one shorter than
    /// ten minutes). The API server accepts it like one it issued: the
    /// ServiceAccount `namespace/name` must exist with `uid`.
    pub fn mint_service_account_token(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
        ttl: Duration,
    ) -> anyhow::Result<String> {
        mint_service_account_token(&self.sa_key_pem, namespace, name, uid, ttl)
    }
}

/// A fresh ES256 key the test API server does not trust (PKCS#8 PEM), for
/// forged-token tests.
pub fn foreign_signing_key() -> anyhow::Result<String> {
    Ok(rcgen::KeyPair::generate()?.serialize_pem())
}

/// Signs a service-account token of this harness's issuer with `key_pem`.
pub fn mint_service_account_token(
    key_pem: &str,
    namespace: &str,
    name: &str,
    uid: &str,
    ttl: Duration,
) -> anyhow::Result<String> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs();
    let claims = serde_json::json!({
        "iss": SA_ISSUER,
        "aud": [API_AUDIENCE],
        "sub": format!("system:serviceaccount:{namespace}:{name}"),
        "iat": now,
        "nbf": now,
        "exp": now + ttl.as_secs(),
        "jti": uuid::Uuid::new_v4().to_string(),
        "kubernetes.io": {
            "namespace": namespace,
            "serviceaccount": {"name": name, "uid": uid},
        },
    });
    let key = jsonwebtoken::EncodingKey::from_ec_pem(key_pem.as_bytes())?;
    Ok(jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::ES256),
        &claims,
        &key,
    )?)
}
