//! Calls through the gateway: an HTTPS client trusting the Run's CA and
//! sending the caller's token, and typed errors — printed with their code,
//! message and invocation id — that map onto distinct exit codes.

use anyhow::Context as _;
use kruntimes_proto::api::{ErrorBody, ErrorCode};

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
    pub fn new(ca_pem: Option<&[u8]>, token: &str) -> anyhow::Result<Self> {
        let mut auth = reqwest::header::HeaderValue::from_str(&format!("Bearer {token}"))
            .context("the token is not a valid header value")?;
        auth.set_sensitive(true);
        let headers =
            reqwest::header::HeaderMap::from_iter([(reqwest::header::AUTHORIZATION, auth)]);
        let mut b = reqwest::Client::builder().default_headers(headers);
        if let Some(pem) = ca_pem {
            for cert in reqwest::Certificate::from_pem_bundle(pem).context("parse the CA bundle")? {
                b = b.add_root_certificate(cert);
            }
        }
        Ok(Self { http: b.build()? })
    }

    /// The HTTP client.
    pub fn http(&self) -> &reqwest::Client {
        &self.http
    }
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

impl ApiError {
    /// The process exit code of this error: one per API error code.
    pub fn exit_code(&self) -> i32 {
        self.code.map_or(EXIT_HTTP, exit_code)
    }
}

/// Exit code of a failure outside the API (usage, I/O, the API server).
pub const EXIT_LOCAL: i32 = 1;
/// Exit code of an HTTP error without a kruntimes error body.
pub const EXIT_HTTP: i32 = 9;

/// The exit code of each API error code (10 and up, in the table's order).
pub fn exit_code(code: ErrorCode) -> i32 {
    use ErrorCode::*;
    match code {
        InvalidPath => 10,
        InvalidJson => 11,
        InvalidInvocationId => 12,
        BadRequest => 13,
        MethodNotAllowed => 14,
        Unauthenticated => 15,
        Forbidden => 16,
        NotFound => 17,
        PayloadTooLarge => 18,
        HeadersTooLarge => 19,
        Busy => 20,
        NotReady => 21,
        OwnerUnavailable => 22,
        StaleOwner => 23,
        Overloaded => 24,
        AuthUnavailable => 25,
        FunctionError => 26,
        WorkerCrashed => 27,
        InvalidOutput => 28,
        DeadlineExceeded => 29,
        Internal => 30,
    }
}

/// `resp` when it succeeded, else its typed error.
pub async fn check(resp: reqwest::Response) -> anyhow::Result<reqwest::Response> {
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
    Err(api_error(status, &body, invocation_id).into())
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

/// Prints `e` and returns the exit code it maps to.
pub fn report(e: &anyhow::Error) -> i32 {
    eprintln!("error: {e:#}");
    e.downcast_ref::<ApiError>()
        .map_or(EXIT_LOCAL, ApiError::exit_code)
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
        assert_eq!(e.exit_code(), 20);
        assert_eq!(
            e.to_string(),
            "429 Busy: the function already has an in-flight invocation (invocation inv-1)"
        );
        let plain = api_error(502, b"bad gateway", Some("inv-2".into()));
        assert_eq!(plain.code, None);
        assert_eq!(plain.exit_code(), EXIT_HTTP);
        assert_eq!(plain.invocation_id.as_deref(), Some("inv-2"));
    }

    #[test]
    fn every_error_code_has_its_own_exit_code() {
        let all = ErrorCode::ALL;
        let codes: std::collections::BTreeSet<i32> = all.iter().map(|c| exit_code(*c)).collect();
        assert_eq!(codes.len(), all.len());
        assert!(
            codes
                .iter()
                .all(|c| *c >= 10 && *c != EXIT_LOCAL && *c != EXIT_HTTP)
        );
    }

    #[test]
    fn local_failures_exit_1_and_api_errors_their_code() {
        assert_eq!(report(&anyhow::anyhow!("no such file")), EXIT_LOCAL);
        let e = anyhow::Error::from(api_error(
            404,
            br#"{"error":{"code":"NotFound","message":"unknown run"}}"#,
            None,
        ))
        .context("invoke default/x");
        assert_eq!(report(&e), 17);
    }
}
