//! The Runtime Server going away and coming back: 503 meanwhile, readiness
//! that never claims what cannot be served, and registrations renewed on a
//! restarted server.

use super::*;
use crate::runtime::Change;

#[tokio::test]
async fn an_unreachable_server_is_503_and_readiness_says_so() {
    let (mut fx, _) = python().await;
    fx.server.stop().await;
    let err = fx.engine.invoke(call(b"{}")).await.unwrap_err();
    assert_eq!(crate::api_error::ApiError::from(err).code.status(), 503);
    let change = fx.server.link.check().await;
    assert_eq!(change, Change::Lost);
    fx.engine.server_changed(change).await;
    assert_eq!(
        published(&fx),
        (
            own::Phase::Running as i32,
            crate::runtime::UNAVAILABLE_REASON.into()
        )
    );
    let refused = register(&fx, request("python", 2, "d2", "main.invoke")).await;
    assert!(
        matches!(refused, Err(RegisterError::Unavailable(_))),
        "{refused:?}"
    );
}

#[tokio::test]
async fn a_restarted_server_gets_every_function_registered_again() {
    let (mut fx, _) = python().await;
    fx.server.restart().await;
    let change = fx.server.link.check().await;
    assert_eq!(change, Change::Restarted);
    fx.engine.server_changed(change).await;
    assert_eq!(published(&fx), (own::Phase::Ready as i32, String::new()));
    let out = json(
        &fx.engine
            .invoke(call(br#"{"again":1}"#))
            .await
            .unwrap()
            .output,
    );
    assert_eq!(out["again"], 1, "served with the new handle");
    let calls = fx.server.fake.calls();
    assert_eq!(
        calls.iter().filter(|c| c.starts_with("register")).count(),
        2,
        "{calls:?}"
    );
}

#[tokio::test]
async fn the_first_contact_resets_what_an_earlier_runtimed_left() {
    let fx = fixture().await;
    assert_eq!(fx.server.fake.calls(), ["reset"]);
}
