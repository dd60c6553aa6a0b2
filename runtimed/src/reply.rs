//! How runtimed answers an API request: the typed JSON error of the public
//! error table, and the headers every response carries (the serving
//! instance, the invocation id). Function and session routes both answer
//! through it.

use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use kruntimes_proto::api::{self, ErrorBody, ErrorCode};

/// What every response carries: the serving instance and invocation id.
pub struct Reply<'a> {
    /// This instance's name.
    pub served_by: &'a str,
    /// The request's invocation id (empty before it is validated).
    pub invocation_id: &'a str,
}

impl Reply<'_> {
    /// Adds `X-Kruntimes-Served-By` and the invocation id.
    pub fn decorate(&self, mut resp: Response) -> Response {
        let h = resp.headers_mut();
        if let Ok(v) = HeaderValue::from_str(self.served_by) {
            h.insert(api::HEADER_SERVED_BY, v);
        }
        if !self.invocation_id.is_empty()
            && let Ok(v) = HeaderValue::from_str(self.invocation_id)
        {
            h.insert(api::HEADER_INVOCATION_ID, v);
        }
        resp
    }
}

/// A typed JSON error response.
pub fn error(code: ErrorCode, message: impl Into<String>, r: &Reply<'_>) -> Response {
    let inv = (!r.invocation_id.is_empty()).then_some(r.invocation_id);
    let mut resp = (
        StatusCode::from_u16(code.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        ErrorBody::new(code, message, inv).to_json(),
    )
        .into_response();
    if let Some(secs) = code.retry_after_secs() {
        resp.headers_mut()
            .insert(axum::http::header::RETRY_AFTER, HeaderValue::from(secs));
    }
    r.decorate(resp)
}
