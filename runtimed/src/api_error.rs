//! runtimed's side of the public API's one error type ([`ApiError`], shared
//! with the gateway) and the one place it is rendered.
//!
//! Every refusal — fencing, engine, session queue, file, body limit — turns
//! into an [`ApiError`] (a code of the public error table and a message)
//! through `From`; [`Reply`] renders it for one request: the typed JSON
//! body with the invocation id, `Retry-After` where the code asks for it,
//! and the headers every response carries.

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http_body_util::BodyExt;
use kruntimes_proto::api::{self, ErrorCode};

use crate::registration::FenceError;

pub use kruntimes_proto::api::ApiError;

/// The `error` object of the JSON body, as stream and WebSocket events
/// carry it too.
pub fn detail(e: &ApiError, invocation_id: Option<&str>) -> serde_json::Value {
    // A struct of strings always serializes.
    serde_json::to_value(e.body(invocation_id).error).unwrap_or_default()
}

/// The typed JSON answer to `e`, with `Retry-After` where its code asks
/// for it.
fn render(e: &ApiError, invocation_id: Option<&str>) -> Response {
    let status = StatusCode::from_u16(e.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut resp = (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        e.body(invocation_id).to_json(),
    )
        .into_response();
    if let Some(secs) = e.code.retry_after_secs() {
        resp.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    resp
}

impl From<FenceError> for ApiError {
    fn from(e: FenceError) -> Self {
        let code = match e {
            // The gateway's own headers disagree: a malformed request.
            FenceError::RunMismatch { .. } => ErrorCode::BadRequest,
            _ => ErrorCode::StaleOwner,
        };
        Self::new(code, e.to_string())
    }
}

/// Why a request body was not read.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    /// Longer than the route's bound (413).
    #[error("{what} exceeds {limit} bytes")]
    TooLarge {
        /// What the body is (`input`, `operation body`).
        what: &'static str,
        /// The bound.
        limit: usize,
    },
    /// The connection failed while reading.
    #[error("read body: {0}")]
    Read(String),
}

impl From<BodyError> for ApiError {
    fn from(e: BodyError) -> Self {
        let code = match e {
            BodyError::TooLarge { .. } => ErrorCode::PayloadTooLarge,
            BodyError::Read(_) => ErrorCode::BadRequest,
        };
        Self::new(code, e.to_string())
    }
}

/// Reads a whole body of at most `limit` bytes.
pub async fn read_body(body: Body, limit: usize, what: &'static str) -> Result<Bytes, BodyError> {
    match http_body_util::Limited::new(body, limit).collect().await {
        Ok(c) => Ok(c.to_bytes()),
        Err(e)
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some() =>
        {
            Err(BodyError::TooLarge { what, limit })
        }
        Err(e) => Err(BodyError::Read(e.to_string())),
    }
}

/// What every response to one request carries: the serving instance and
/// the invocation id.
#[derive(Debug, Clone, Copy)]
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

    /// The invocation id for error bodies, once there is one.
    pub fn invocation(&self) -> Option<&str> {
        (!self.invocation_id.is_empty()).then_some(self.invocation_id)
    }

    /// Renders `e` as this request's typed JSON error.
    pub fn error(&self, e: impl Into<ApiError>) -> Response {
        self.decorate(render(&e.into(), self.invocation()))
    }

    /// Renders a route's outcome: its response, or its error.
    pub fn finish(&self, outcome: Result<Response, ApiError>) -> Response {
        match outcome {
            Ok(resp) => self.decorate(resp),
            Err(e) => self.error(e),
        }
    }
}

#[cfg(test)]
mod tests;
