//! The answers the gateway writes itself: typed JSON errors for rejections,
//! and the plain bodies of the health and metrics endpoints.

use bytes::Bytes;
use kruntimes_proto::api::{self, ApiError, ErrorCode};
use pingora::Result;
use pingora::http::ResponseHeader;
use pingora::proxy::Session;

/// The `x-kruntimes-invocation-id` value of an answer. Marked sensitive, so
/// HTTP/2 sends it as a literal that is never indexed: every answer's id is
/// new, and indexing each one would only churn the connection's HPACK table
/// (an insertion and evictions per response, pushing out the entries that
/// repeat, such as `content-type`).
pub fn invocation_id_value(invocation_id: &str) -> Result<http::HeaderValue> {
    let mut v = http::HeaderValue::from_str(invocation_id).map_err(|_| {
        pingora::Error::explain(
            pingora::ErrorType::InvalidHTTPHeader,
            "invocation id is not a header value",
        )
    })?;
    v.set_sensitive(true);
    Ok(v)
}

/// The typed JSON error answering `rejection`, carrying `invocation_id`,
/// with `Retry-After` where the code calls for it.
pub fn error_response(
    invocation_id: &str,
    rejection: &ApiError,
) -> Result<(ResponseHeader, Bytes)> {
    let code = rejection.code;
    let body = rejection.body(Some(invocation_id)).to_json();
    let mut resp = ResponseHeader::build(code.status(), Some(5))?;
    resp.insert_header(http::header::CONTENT_TYPE, "application/json")?;
    resp.insert_header(http::header::CONTENT_LENGTH, body.len().to_string())?;
    resp.insert_header(
        api::HEADER_INVOCATION_ID,
        invocation_id_value(invocation_id)?,
    )?;
    if let Some(secs) = code.retry_after_secs() {
        resp.insert_header(http::header::RETRY_AFTER, secs.to_string())?;
    }
    Ok((resp, Bytes::from(body)))
}

/// Writes the [`error_response`] to `rejection`.
pub async fn reject(
    session: &mut Session,
    invocation_id: &str,
    rejection: &ApiError,
) -> Result<()> {
    let (resp, body) = error_response(invocation_id, rejection)?;
    if matches!(
        rejection.code,
        ErrorCode::PayloadTooLarge | ErrorCode::HeadersTooLarge
    ) {
        // The unread body makes the connection unusable for another request.
        session.set_keepalive(None);
    }
    session.write_response_header(Box::new(resp), false).await?;
    session.write_response_body(Some(body), true).await
}

/// Writes a plain `status` response.
pub async fn plain(
    session: &mut Session,
    status: u16,
    content_type: &str,
    body: Vec<u8>,
) -> Result<()> {
    let mut resp = ResponseHeader::build(status, Some(3))?;
    resp.insert_header(http::header::CONTENT_TYPE, content_type)?;
    resp.insert_header(http::header::CONTENT_LENGTH, body.len().to_string())?;
    session.write_response_header(Box::new(resp), false).await?;
    session
        .write_response_body(Some(Bytes::from(body)), true)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header<'a>(resp: &'a ResponseHeader, name: &str) -> Option<&'a str> {
        resp.headers.get(name).map(|v| v.to_str().unwrap())
    }

    #[test]
    fn errors_are_typed_json_carrying_the_invocation_id() {
        let rejection = ApiError::new(ErrorCode::Forbidden, "eve may not");
        let (resp, body) = error_response("inv-1", &rejection).unwrap();
        assert_eq!(resp.status.as_u16(), 403);
        assert_eq!(header(&resp, "content-type"), Some("application/json"));
        assert_eq!(header(&resp, "x-kruntimes-invocation-id"), Some("inv-1"));
        assert_eq!(
            header(&resp, "content-length"),
            Some(body.len().to_string().as_str())
        );
        assert_eq!(header(&resp, "retry-after"), None);
        let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(json["error"]["code"], "Forbidden");
        assert_eq!(json["error"]["message"], "eve may not");
        assert_eq!(json["error"]["invocationId"], "inv-1");
        // Never HPACK-indexed: each answer's id is new.
        assert!(resp.headers["x-kruntimes-invocation-id"].is_sensitive());
    }

    #[test]
    fn invocation_ids_are_sent_unindexed_and_bad_ones_refused() {
        let v = invocation_id_value("0190-abc").unwrap();
        assert!(v.is_sensitive());
        assert_eq!(v, "0190-abc");
        assert!(invocation_id_value("a\nb").is_err());
    }

    #[test]
    fn unavailable_and_overloaded_answers_say_when_to_retry() {
        for code in [
            ErrorCode::NotReady,
            ErrorCode::OwnerUnavailable,
            ErrorCode::Overloaded,
            ErrorCode::AuthUnavailable,
        ] {
            let (resp, _) = error_response("i", &ApiError::new(code, "later")).unwrap();
            assert_eq!(resp.status.as_u16(), 503);
            assert_eq!(header(&resp, "retry-after"), Some("1"), "{code:?}");
        }
    }
}
