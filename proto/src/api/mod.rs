//! The public HTTP API as the gateway and runtimed both speak it: its one
//! error type and table ([`ApiError`], [`ErrorCode`]), the JSON error body,
//! the header names the two exchange, invocation ids, and the path parser.

mod error;
mod path;
pub use error::{
    ApiError, ErrorBody, ErrorCode, ErrorDetail, MAX_ERROR_MESSAGE_BYTES, RunState, error_table,
};
pub use path::{
    ApiPath, MAX_ARTIFACT_NAME_BYTES, Methods, PathError, SessionOp, artifact_name, dns_label,
    parse_path, valid_run_uid,
};

/// Caller-supplied or generated invocation id, echoed on every response.
pub const HEADER_INVOCATION_ID: &str = "x-kruntimes-invocation-id";
/// On an invoke response whose body is the envelope
/// `{"outputs": …, "artifactRefs": […]}` (the invocation left artifacts):
/// how many refs it carries. Absent: the body is the handler's value.
pub const HEADER_ARTIFACTS: &str = "x-kruntimes-artifacts";
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
/// Largest file a session operation writes or reads (32 MiB).
pub const MAX_SESSION_FILE_BYTES: usize = 32 * 1024 * 1024;

/// Why a file is not sent to a session: it is `len` bytes.
pub fn session_file_too_large(len: u64) -> String {
    format!(
        "the file is {len} bytes: a session file is at most 32 MiB ({MAX_SESSION_FILE_BYTES} bytes)"
    )
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
