//! Admission limits: the invocation id, header bytes, the declared body
//! size, and the gateway-wide in-flight limit. Pure but for the in-flight
//! counter.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use http::{HeaderMap, Uri};
use kruntimes_proto::api::{self, ErrorCode};

use kruntimes_proto::api::ApiError;

/// Request limits.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Largest request body of invokes (413 beyond).
    pub max_body_bytes: u64,
    /// Largest request body of session operations (a base64 32 MiB file).
    pub max_session_body_bytes: u64,
    /// Largest total of header names and values (431 beyond).
    pub max_header_bytes: usize,
    /// Requests in flight at once (503 `Overloaded` beyond).
    pub max_in_flight: usize,
    /// How long a request for a Run on its way to Ready (or Ready with its
    /// owner's readiness not yet arrived) waits for the table to converge
    /// before it is answered 503 `NotReady`; zero answers at once.
    pub route_settle: std::time::Duration,
}

impl Limits {
    /// The body limit of a session route or of an invoke.
    pub fn max_body(&self, session: bool) -> u64 {
        if session {
            self.max_session_body_bytes
        } else {
            self.max_body_bytes
        }
    }
}

/// A limit a request breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum LimitError {
    /// Header names, values and the path exceed the limit (431).
    #[error("request headers exceed the limit")]
    HeadersTooLarge,
    /// `Content-Length` is not a number (400).
    #[error("invalid content-length")]
    InvalidContentLength,
    /// `Content-Length` exceeds the body limit, in bytes (413).
    #[error("body exceeds {0} bytes")]
    BodyTooLarge(u64),
    /// `X-Kruntimes-Invocation-Id` is not 1-128 visible ASCII bytes (400).
    #[error("invocation id must be 1-128 visible ASCII bytes")]
    InvalidInvocationId,
    /// The gateway is at its in-flight limit (503).
    #[error("gateway is at its in-flight limit")]
    Overloaded,
}

/// A fresh invocation id (a v4 UUID).
pub fn new_invocation_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

impl From<LimitError> for ApiError {
    fn from(e: LimitError) -> Self {
        let code = match e {
            LimitError::HeadersTooLarge => ErrorCode::HeadersTooLarge,
            LimitError::InvalidContentLength => ErrorCode::BadRequest,
            LimitError::BodyTooLarge(_) => ErrorCode::PayloadTooLarge,
            LimitError::InvalidInvocationId => ErrorCode::InvalidInvocationId,
            LimitError::Overloaded => ErrorCode::Overloaded,
        };
        Self::new(code, e.to_string())
    }
}

/// The caller's invocation id, or a fresh one when it sent none.
pub fn invocation_id(headers: &HeaderMap) -> Result<String, LimitError> {
    match headers.get(api::HEADER_INVOCATION_ID).map(|v| v.to_str()) {
        None => Ok(new_invocation_id()),
        Some(Ok(id)) if api::valid_invocation_id(id) => Ok(id.to_owned()),
        Some(_) => Err(LimitError::InvalidInvocationId),
    }
}

/// Bytes of header names and values plus the path and query.
pub fn header_bytes(headers: &HeaderMap, uri: &Uri) -> usize {
    headers
        .iter()
        .map(|(k, v)| k.as_str().len() + v.len())
        .sum::<usize>()
        + uri.path_and_query().map_or(0, |pq| pq.as_str().len())
}

/// Rejects headers (with the path) over `max` bytes.
pub fn check_header_bytes(headers: &HeaderMap, uri: &Uri, max: usize) -> Result<(), LimitError> {
    if header_bytes(headers, uri) > max {
        return Err(LimitError::HeadersTooLarge);
    }
    Ok(())
}

/// Rejects a declared `Content-Length` that is malformed or over `max`.
/// Bodies without one are counted as they stream (the proxy's body filter).
pub fn check_content_length(headers: &HeaderMap, max: u64) -> Result<(), LimitError> {
    let declared = headers
        .get(http::header::CONTENT_LENGTH)
        .map(|v| v.to_str().ok().and_then(|s| s.parse::<u64>().ok()));
    match declared {
        Some(None) => Err(LimitError::InvalidContentLength),
        Some(Some(n)) if n > max => Err(LimitError::BodyTooLarge(max)),
        _ => Ok(()),
    }
}

/// The gateway-wide bound on requests in flight; clones share it.
#[derive(Clone)]
pub struct InFlightLimit {
    counter: Arc<AtomicUsize>,
    gauge: prometheus::IntGauge,
    max: usize,
}

impl InFlightLimit {
    /// At most `max` requests at once, counted in `gauge` too.
    pub fn new(max: usize, gauge: prometheus::IntGauge) -> Self {
        Self {
            counter: Arc::new(AtomicUsize::new(0)),
            gauge,
            max,
        }
    }

    /// Takes a slot until the returned guard drops. A request over the limit
    /// takes one too: it is in flight while it is being answered.
    pub fn acquire(&self) -> InFlight {
        let previous = self.counter.fetch_add(1, Ordering::AcqRel);
        self.gauge.inc();
        InFlight {
            counter: self.counter.clone(),
            gauge: self.gauge.clone(),
            over_limit: previous >= self.max,
        }
    }
}

/// An in-flight slot, released when the request ends.
pub struct InFlight {
    counter: Arc<AtomicUsize>,
    gauge: prometheus::IntGauge,
    over_limit: bool,
}

impl InFlight {
    /// `Err(Overloaded)` when the slot was taken over the limit.
    pub fn admitted(&self) -> Result<(), LimitError> {
        if self.over_limit {
            return Err(LimitError::Overloaded);
        }
        Ok(())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.counter.fetch_sub(1, Ordering::AcqRel);
        self.gauge.dec();
    }
}

#[cfg(test)]
mod tests;
