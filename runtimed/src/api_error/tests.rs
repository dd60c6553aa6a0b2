//! The one rendering of API errors, and the classifications into it.

use http_body_util::BodyExt;

use super::*;

const REPLY: Reply<'static> = Reply {
    served_by: "runtimed-0",
    invocation_id: "inv-1",
};

async fn body_json(resp: Response) -> serde_json::Value {
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    serde_json::from_slice(&bytes).unwrap()
}

#[tokio::test]
async fn errors_render_as_typed_json_with_the_request_headers() {
    let resp = REPLY.error(ApiError::new(ErrorCode::NotFound, "no such run"));
    assert_eq!(resp.status(), 404);
    let h = resp.headers();
    assert_eq!(h[header::CONTENT_TYPE], "application/json");
    assert_eq!(h[api::HEADER_SERVED_BY], "runtimed-0");
    assert_eq!(h[api::HEADER_INVOCATION_ID], "inv-1");
    assert!(h.get(header::RETRY_AFTER).is_none());
    assert_eq!(
        body_json(resp).await,
        serde_json::json!({"error": {"code": "NotFound", "message": "no such run", "invocationId": "inv-1"}})
    );
}

#[tokio::test]
async fn busy_and_unavailable_errors_ask_to_retry_after_a_second() {
    for code in [ErrorCode::Busy, ErrorCode::StaleOwner, ErrorCode::NotReady] {
        let resp = REPLY.error(ApiError::new(code, "later"));
        assert_eq!(resp.headers()[header::RETRY_AFTER], "1", "{code:?}");
    }
}

#[tokio::test]
async fn errors_before_a_valid_invocation_id_carry_none() {
    let pre = Reply {
        invocation_id: "",
        ..REPLY
    };
    let resp = pre.error(ApiError::new(ErrorCode::InvalidInvocationId, "missing"));
    assert_eq!(resp.status(), 400);
    assert!(resp.headers().get(api::HEADER_INVOCATION_ID).is_none());
    assert_eq!(resp.headers()[api::HEADER_SERVED_BY], "runtimed-0");
    let body = body_json(resp).await;
    assert!(body["error"].get("invocationId").is_none(), "{body}");
}

#[tokio::test]
async fn finished_routes_are_decorated_whatever_their_outcome() {
    let ok = REPLY.finish(Ok((StatusCode::OK, "fine").into_response()));
    assert_eq!(ok.status(), 200);
    assert_eq!(ok.headers()[api::HEADER_INVOCATION_ID], "inv-1");
    let err = REPLY.finish(Err(ApiError::new(ErrorCode::Busy, "busy")));
    assert_eq!(err.status(), 429);
    assert_eq!(err.headers()[api::HEADER_SERVED_BY], "runtimed-0");
}

#[test]
fn stream_events_carry_the_same_error_object() {
    let e = ApiError::new(ErrorCode::Internal, "operation was dropped");
    assert_eq!(
        detail(&e, Some("inv-1")),
        serde_json::json!({"code": "Internal", "message": "operation was dropped", "invocationId": "inv-1"})
    );
    assert_eq!(
        detail(&e, None),
        serde_json::json!({"code": "Internal", "message": "operation was dropped"})
    );
}

#[test]
fn fencing_refusals_are_stale_owners_unless_the_headers_disagree() {
    let mismatch = FenceError::RunMismatch {
        routed: "u-1".into(),
        path: "u-2".into(),
    };
    assert_eq!(ApiError::from(mismatch).code, ErrorCode::BadRequest);
    let stale = [
        FenceError::WrongPod {
            this_pod: "pod-b".into(),
            routed_to: "pod-a".into(),
        },
        FenceError::NotRegistered { run: "u-1".into() },
        FenceError::WrongAttempt {
            run: "u-1".into(),
            registered: 2,
            requested: 1,
        },
    ];
    for e in stale {
        let sentence = e.to_string();
        let api = ApiError::from(e);
        assert_eq!(api.code, ErrorCode::StaleOwner);
        assert_eq!(api.message, sentence, "the client reads the sentence");
    }
}

#[tokio::test]
async fn bodies_over_the_limit_are_payload_too_large() {
    let e = read_body(Body::from(vec![b'x'; 11]), 10, "input")
        .await
        .unwrap_err();
    assert!(matches!(e, BodyError::TooLarge { limit: 10, .. }));
    let api = ApiError::from(e);
    assert_eq!(api.code, ErrorCode::PayloadTooLarge);
    assert_eq!(api.message, "input exceeds 10 bytes");
    let fits = read_body(Body::from("0123456789"), 10, "input")
        .await
        .unwrap();
    assert_eq!(&fits[..], b"0123456789");
}
