//! Calls through the gateway: an HTTPS client trusting the Run's CA and
//! sending the caller's token, and the typed error the gateway or runtimed
//! answer with — its status, stable code, message and invocation id.

use kruntimes_proto::api::{ErrorBody, ErrorCode};

use crate::{Error, Result};

/// How to reach a Run through the gateway.
#[derive(Clone)]
pub struct Gateway {
    http: reqwest::Client,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The client carries the token; never print it.
        f.debug_struct("Gateway").finish_non_exhaustive()
    }
}

impl Gateway {
    /// A client trusting `ca_pem` (the gateway's CA; the system roots when
    /// `None`) that sends `token`.
    pub fn new(ca_pem: Option<&[u8]>, token: &str) -> Result<Self> {
        // The error never names the token.
        let mut auth = reqwest::header::HeaderValue::from_str(&format!("Bearer {token}"))
            .map_err(|_| Error::Credentials("the token is not a valid header value".into()))?;
        auth.set_sensitive(true);
        let headers =
            reqwest::header::HeaderMap::from_iter([(reqwest::header::AUTHORIZATION, auth)]);
        let mut b = reqwest::Client::builder().default_headers(headers);
        if let Some(pem) = ca_pem {
            let certs = reqwest::Certificate::from_pem_bundle(pem)
                .map_err(|e| Error::Invalid(format!("parse the CA bundle: {e}")))?;
            for cert in certs {
                b = b.add_root_certificate(cert);
            }
        }
        Ok(Self { http: b.build()? })
    }

    /// The HTTP client.
    pub fn http(&self) -> &reqwest::Client {
        &self.http
    }

    /// Whether the gateway routes the Run at `endpoint` to its owner now
    /// ([`routes`]).
    pub async fn routes(&self, endpoint: &str, session: bool) -> bool {
        routes(&self.http, None, endpoint, session).await
    }
}

/// Whether the gateway routes the Run at `endpoint` to its owner, asked
/// without running anything: a function is sent a body that is not JSON
/// (its owner answers 400 `InvalidJson` before any handler runs), a
/// session is asked its status (200). `token`, unless `http` sends one.
pub async fn routes(
    http: &reqwest::Client,
    token: Option<&str>,
    endpoint: &str,
    session: bool,
) -> bool {
    let request = if session {
        http.get(endpoint)
    } else {
        http.post(endpoint).body("{")
    };
    let request = match token {
        Some(t) => request.bearer_auth(t),
        None => request,
    };
    let want = if session { 200 } else { 400 };
    request
        .send()
        .await
        .is_ok_and(|r| r.status().as_u16() == want)
}

/// A typed error answered by the gateway or runtimed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{status} {}: {message}{}", code.map_or("Error", ErrorCode::as_str), invocation_id.as_ref().map(|i| format!(" (invocation {i})")).unwrap_or_default())]
pub struct ApiError {
    /// HTTP status.
    pub status: u16,
    /// The stable code, when the body had one.
    pub code: Option<ErrorCode>,
    /// The message.
    pub message: String,
    /// The invocation id of the call.
    pub invocation_id: Option<String>,
}

/// `resp` when it succeeded, else its typed error.
pub async fn check(resp: reqwest::Response) -> Result<reqwest::Response> {
    if resp.status().is_success() {
        return Ok(resp);
    }
    let status = resp.status().as_u16();
    let invocation_id = resp
        .headers()
        .get(kruntimes_proto::api::HEADER_INVOCATION_ID)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let body = resp.bytes().await?;
    Err(Error::Api(api_error(status, &body, invocation_id)))
}

fn api_error(status: u16, body: &[u8], header_id: Option<String>) -> ApiError {
    match serde_json::from_slice::<ErrorBody>(body) {
        Ok(e) => ApiError {
            status,
            code: Some(e.error.code),
            message: e.error.message,
            invocation_id: e.error.invocation_id.or(header_id),
        },
        Err(_) => ApiError {
            status,
            code: None,
            message: String::from_utf8_lossy(body).trim().to_owned(),
            invocation_id: header_id,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_errors_keep_code_message_and_invocation_id() {
        let body = br#"{"error":{"code":"Busy","message":"the function already has an in-flight invocation","invocationId":"inv-1"}}"#;
        let e = api_error(429, body, None);
        assert_eq!(e.code, Some(ErrorCode::Busy));
        assert_eq!(e.invocation_id.as_deref(), Some("inv-1"));
        assert_eq!(
            e.to_string(),
            "429 Busy: the function already has an in-flight invocation (invocation inv-1)"
        );
        let plain = api_error(502, b"bad gateway", Some("inv-2".into()));
        assert_eq!(plain.code, None);
        assert_eq!(plain.invocation_id.as_deref(), Some("inv-2"));
        assert_eq!(
            plain.to_string(),
            "502 Error: bad gateway (invocation inv-2)"
        );
    }

    #[test]
    fn a_token_that_is_no_header_value_is_refused_without_being_named() {
        let e = Gateway::new(None, "secret\nvalue").unwrap_err();
        assert!(!e.to_string().contains("secret"), "{e}");
    }
}
