//! The public HTTP API's stable error codes, their statuses, the JSON error
//! body, and the header names the gateway and runtimed exchange.

use serde::{Deserialize, Serialize};

mod path;
pub use path::{ApiPath, PathError, SessionOp, dns_label, parse_path, valid_run_uid};

/// Caller-supplied or generated invocation id, echoed on every response.
pub const HEADER_INVOCATION_ID: &str = "x-kruntimes-invocation-id";
/// Name of the runtimed instance that served the request.
pub const HEADER_SERVED_BY: &str = "x-kruntimes-served-by";
/// Fencing: the Run UID the gateway expects the owner to hold.
pub const HEADER_RUN_UID: &str = "x-kruntimes-run-uid";
/// Fencing: the owner Pod UID from the gateway's table.
pub const HEADER_OWNER_POD_UID: &str = "x-kruntimes-owner-pod-uid";
/// Fencing: the registration attempt from the gateway's table.
pub const HEADER_ATTEMPT: &str = "x-kruntimes-attempt";
/// The authenticated subject (for runtimed's logs; never a token).
pub const HEADER_SUBJECT: &str = "x-kruntimes-subject";
/// Gateway → owner, on a session WebSocket: when the caller's token
/// expires (Unix seconds); the owner closes the socket then (4401).
pub const HEADER_TOKEN_EXPIRES: &str = "x-kruntimes-token-expires";
/// Hop marker set by the gateway; runtimed rejects requests without it.
pub const HEADER_HOP: &str = "x-kruntimes-hop";
/// Value of [`HEADER_HOP`] written by the gateway.
pub const HOP_GATEWAY: &str = "gateway";
/// Longest accepted invocation id, in bytes.
pub const MAX_INVOCATION_ID_BYTES: usize = 128;
/// Default bound of a function's JSON input and output.
pub const DEFAULT_MAX_BODY_BYTES: u64 = 1024 * 1024;

/// Stable error codes of the public API (ARCHITECTURE §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ErrorCode {
    /// Path does not name a known API route or has malformed segments.
    InvalidPath,
    /// Body is not valid JSON.
    InvalidJson,
    /// `X-Kruntimes-Invocation-Id` is too long or not printable ASCII.
    InvalidInvocationId,
    /// Other malformed request (headers, content-length).
    BadRequest,
    /// The route exists but not for this method.
    MethodNotAllowed,
    /// Missing, malformed, expired or unknown bearer token.
    Unauthenticated,
    /// Authenticated caller is not allowed to use this Run.
    Forbidden,
    /// Unknown Run UID, or the UID does not belong to that namespace/Runtime.
    NotFound,
    /// Request body over the limit.
    PayloadTooLarge,
    /// Request headers over the limit.
    HeadersTooLarge,
    /// The function already has an in-flight invocation.
    Busy,
    /// Run known but not Ready (pending, recovering, draining).
    NotReady,
    /// Owner unreachable, or the table cannot vouch for it any more.
    OwnerUnavailable,
    /// The owner no longer holds this registration (fenced: other Pod or attempt).
    StaleOwner,
    /// The gateway's global in-flight limit is reached.
    Overloaded,
    /// The authentication/authorization backend is unavailable on a cache miss.
    AuthUnavailable,
    /// The handler raised or exited non-zero.
    FunctionError,
    /// The worker process died during the invocation.
    WorkerCrashed,
    /// The handler's output exceeded the output limit or is not JSON.
    InvalidOutput,
    /// The invocation deadline passed; the worker was killed.
    DeadlineExceeded,
    /// Unexpected internal failure.
    Internal,
}

impl ErrorCode {
    /// Every code, in declaration order.
    pub const ALL: [ErrorCode; 21] = {
        use ErrorCode::*;
        [
            InvalidPath,
            InvalidJson,
            InvalidInvocationId,
            BadRequest,
            MethodNotAllowed,
            Unauthenticated,
            Forbidden,
            NotFound,
            PayloadTooLarge,
            HeadersTooLarge,
            Busy,
            NotReady,
            OwnerUnavailable,
            StaleOwner,
            Overloaded,
            AuthUnavailable,
            FunctionError,
            WorkerCrashed,
            InvalidOutput,
            DeadlineExceeded,
            Internal,
        ]
    };

    /// HTTP status for this code.
    pub fn status(self) -> u16 {
        use ErrorCode::*;
        match self {
            InvalidPath | InvalidJson | InvalidInvocationId | BadRequest => 400,
            MethodNotAllowed => 405,
            Unauthenticated => 401,
            Forbidden => 403,
            NotFound => 404,
            PayloadTooLarge => 413,
            HeadersTooLarge => 431,
            Busy => 429,
            NotReady | OwnerUnavailable | StaleOwner | Overloaded | AuthUnavailable => 503,
            FunctionError | WorkerCrashed | InvalidOutput | Internal => 500,
            DeadlineExceeded => 504,
        }
    }

    /// Whether the response carries `Retry-After` (429 and 503).
    pub fn retry_after_secs(self) -> Option<u32> {
        match self.status() {
            429 | 503 => Some(1),
            _ => None,
        }
    }

    /// The code as written on the wire.
    pub fn as_str(self) -> &'static str {
        use ErrorCode::*;
        match self {
            InvalidPath => "InvalidPath",
            InvalidJson => "InvalidJson",
            InvalidInvocationId => "InvalidInvocationId",
            BadRequest => "BadRequest",
            MethodNotAllowed => "MethodNotAllowed",
            Unauthenticated => "Unauthenticated",
            Forbidden => "Forbidden",
            NotFound => "NotFound",
            PayloadTooLarge => "PayloadTooLarge",
            HeadersTooLarge => "HeadersTooLarge",
            Busy => "Busy",
            NotReady => "NotReady",
            OwnerUnavailable => "OwnerUnavailable",
            StaleOwner => "StaleOwner",
            Overloaded => "Overloaded",
            AuthUnavailable => "AuthUnavailable",
            FunctionError => "FunctionError",
            WorkerCrashed => "WorkerCrashed",
            InvalidOutput => "InvalidOutput",
            DeadlineExceeded => "DeadlineExceeded",
            Internal => "Internal",
        }
    }
}

/// Longest error message put on the wire, in bytes.
pub const MAX_ERROR_MESSAGE_BYTES: usize = 2048;

/// `{"error": {...}}`, the body of every error response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// The error itself.
    pub error: ErrorDetail,
}

/// The fields of an error response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ErrorDetail {
    /// Stable code.
    pub code: ErrorCode,
    /// Bounded human-readable message.
    pub message: String,
    /// Invocation id of the request, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invocation_id: Option<String>,
}

impl ErrorBody {
    /// Builds an error body, truncating the message on a char boundary.
    pub fn new(code: ErrorCode, message: impl Into<String>, invocation_id: Option<&str>) -> Self {
        Self {
            error: ErrorDetail {
                code,
                message: truncate_utf8(message.into(), MAX_ERROR_MESSAGE_BYTES),
                invocation_id: invocation_id.map(str::to_owned),
            },
        }
    }

    /// Serialized JSON bytes.
    pub fn to_json(&self) -> Vec<u8> {
        // Serializing a struct of strings into a Vec cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }
}

/// Truncates `s` to at most `max` bytes without splitting a character.
pub fn truncate_utf8(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut cut = max;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
    }
    s
}

/// Checks an invocation id: 1..=128 bytes of visible ASCII.
pub fn valid_invocation_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_INVOCATION_ID_BYTES
        && id.bytes().all(|b| b.is_ascii_graphic())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_maps_to_the_documented_status() {
        assert_eq!(ErrorCode::InvalidJson.status(), 400);
        assert_eq!(ErrorCode::Unauthenticated.status(), 401);
        assert_eq!(ErrorCode::Forbidden.status(), 403);
        assert_eq!(ErrorCode::NotFound.status(), 404);
        assert_eq!(ErrorCode::PayloadTooLarge.status(), 413);
        assert_eq!(ErrorCode::HeadersTooLarge.status(), 431);
        assert_eq!(ErrorCode::Busy.status(), 429);
        assert_eq!(ErrorCode::OwnerUnavailable.status(), 503);
        assert_eq!(ErrorCode::FunctionError.status(), 500);
        assert_eq!(ErrorCode::DeadlineExceeded.status(), 504);
        assert_eq!(ErrorCode::Busy.retry_after_secs(), Some(1));
        assert_eq!(ErrorCode::NotFound.retry_after_secs(), None);
    }

    #[test]
    fn all_lists_every_code_once_and_each_is_its_own_wire_name() {
        let names: std::collections::BTreeSet<&str> =
            ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(names.len(), ErrorCode::ALL.len());
        for c in ErrorCode::ALL {
            let wire = serde_json::to_value(c).unwrap();
            assert_eq!(wire, c.as_str());
            // A new variant missing from ALL fails this match.
            match c {
                ErrorCode::InvalidPath
                | ErrorCode::InvalidJson
                | ErrorCode::InvalidInvocationId
                | ErrorCode::BadRequest
                | ErrorCode::MethodNotAllowed
                | ErrorCode::Unauthenticated
                | ErrorCode::Forbidden
                | ErrorCode::NotFound
                | ErrorCode::PayloadTooLarge
                | ErrorCode::HeadersTooLarge
                | ErrorCode::Busy
                | ErrorCode::NotReady
                | ErrorCode::OwnerUnavailable
                | ErrorCode::StaleOwner
                | ErrorCode::Overloaded
                | ErrorCode::AuthUnavailable
                | ErrorCode::FunctionError
                | ErrorCode::WorkerCrashed
                | ErrorCode::InvalidOutput
                | ErrorCode::DeadlineExceeded
                | ErrorCode::Internal => {}
            }
        }
    }

    #[test]
    fn error_body_round_trips_and_bounds_message() {
        let body = ErrorBody::new(ErrorCode::Busy, "é".repeat(5000), Some("inv-1"));
        assert!(body.error.message.len() <= MAX_ERROR_MESSAGE_BYTES);
        let back: ErrorBody = serde_json::from_slice(&body.to_json()).unwrap();
        assert_eq!(back, body);
        let text = String::from_utf8(body.to_json()).unwrap();
        assert!(text.contains("\"code\":\"Busy\""));
        assert!(text.contains("\"invocationId\":\"inv-1\""));
    }

    #[test]
    fn invocation_ids_are_bounded_visible_ascii() {
        assert!(valid_invocation_id("abc-123_X.y"));
        assert!(valid_invocation_id(&"a".repeat(128)));
        assert!(!valid_invocation_id(&"a".repeat(129)));
        assert!(!valid_invocation_id(""));
        assert!(!valid_invocation_id("has space"));
        assert!(!valid_invocation_id("tab\t"));
        assert!(!valid_invocation_id("ü"));
    }
}
