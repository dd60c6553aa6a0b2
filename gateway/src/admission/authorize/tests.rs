use std::sync::Arc;

use http::HeaderValue;
use kruntimes_proto::api::ErrorCode;

use super::*;
use crate::auth::testing::cache;
use crate::auth::{Identity, Verb};

fn target(namespace: &str) -> RunTarget<'_> {
    RunTarget {
        namespace,
        runtime: "python",
        uid: "u1",
        session: None,
        artifacts: false,
    }
}

fn authorization(value: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(
        http::header::AUTHORIZATION,
        HeaderValue::from_str(value).unwrap(),
    );
    h
}

#[test]
fn the_bearer_token_is_read_with_any_scheme_case_and_trimmed() {
    assert_eq!(bearer(&authorization("Bearer abc")), Some("abc"));
    assert_eq!(bearer(&authorization("bearer  abc ")), Some("abc"));
    assert_eq!(bearer(&authorization("BEARER abc")), Some("abc"));
}

#[test]
fn other_schemes_empty_tokens_and_no_header_are_401_missing_token() {
    for value in ["Basic YWxpY2U6eA==", "Bearer ", "Bearer", "abc"] {
        assert_eq!(bearer(&authorization(value)), None, "{value:?}");
        assert_eq!(
            require_bearer(&authorization(value)),
            Err(ApiError::missing_token())
        );
    }
    assert_eq!(
        require_bearer(&HeaderMap::new()),
        Err(ApiError::missing_token())
    );
}

/// Authorizes `token` for Run `u1` of `team-a`, named `run_name` by the
/// table (`None`: unknown UID).
async fn decision(token: &str, run_name: Option<&str>) -> Result<String, ApiError> {
    authorize(&cache(), token, &target("team-a"), run_name)
        .await
        .map(|id| id.subject.clone())
}

#[tokio::test]
async fn an_allowed_caller_gets_its_subject() {
    assert_eq!(
        decision("alice", Some("hello")).await,
        Ok("alice".to_owned())
    );
}

#[tokio::test]
async fn an_authenticated_caller_without_the_grant_is_403() {
    let r = decision("eve", Some("hello")).await.unwrap_err();
    assert_eq!(
        r,
        ApiError::forbidden("eve", Verb::Invoke.as_str(), "team-a")
    );
    assert_eq!(r.status(), 403);
}

#[tokio::test]
async fn an_invalid_token_is_401_whether_or_not_the_run_exists() {
    for run_name in [Some("hello"), None] {
        let r = decision("forged", run_name).await.unwrap_err();
        assert_eq!((r.status(), r.message.as_ref()), (401, "unknown token"));
    }
}

#[tokio::test]
async fn an_unknown_run_is_404_once_the_caller_is_authenticated() {
    // Even a caller with no grant at all: the UID names no Run to check.
    for token in ["alice", "eve"] {
        assert_eq!(decision(token, None).await, Err(ApiError::unknown_run()));
    }
}

#[tokio::test]
async fn an_unreachable_backend_is_503_auth_unavailable() {
    for run_name in [Some("hello"), None] {
        let r = decision("down", run_name).await.unwrap_err();
        assert_eq!(r.code, ErrorCode::AuthUnavailable);
        assert_eq!((r.status(), r.code.retry_after_secs()), (503, Some(1)));
    }
}

#[test]
fn outcomes_become_the_subject_or_a_rejection() {
    let alice = Arc::new(Identity::new("alice", vec![]));
    let t = RunTarget {
        session: Some(kruntimes_proto::api::SessionOp::Execute),
        artifacts: false,
        ..target("team-a")
    };
    assert_eq!(
        decide(Outcome::Allowed(alice.clone()), &t).map(|id| id.subject.clone()),
        Ok("alice".into())
    );
    assert_eq!(
        decide(Outcome::Denied(alice), &t).map(|id| id.subject.clone()),
        Err(ApiError::forbidden(
            "alice",
            Verb::Session.as_str(),
            "team-a"
        ))
    );
    assert_eq!(
        decide(Outcome::Unauthenticated("token expired".into()), &t).map(|id| id.subject.clone()),
        Err(ApiError::unauthenticated("token expired"))
    );
}
