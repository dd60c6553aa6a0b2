//! Idle expiry and unregistration (drain, cancel).

use super::*;
use kruntimes_proto::api::ErrorCode;

#[tokio::test]
async fn idle_registrations_expire_and_report_idle_timeout() {
    let fx = fixture().await;
    let mut req = request("python", 1, "d", "main.invoke");
    function(&mut req).idle_timeout_seconds = 1;
    register(&fx, req).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    fx.engine.expire_idle().await;
    assert_eq!(
        published(&fx),
        (own::Phase::Failed as i32, "IdleTimeout".into())
    );
    assert!(matches!(
        fx.engine.invoke(call(b"{}")).await,
        Err(EngineError::NotReady(_))
    ));
    assert!(
        fx.server
            .fake
            .calls()
            .iter()
            .any(|c| c.starts_with("unregister")),
        "the worker is stopped on the server"
    );
}

#[tokio::test]
async fn drain_unregister_lets_the_in_flight_invocation_finish() {
    let (fx, reg) = python().await;
    let engine = fx.engine.clone();
    let slow = tokio::spawn(async move {
        engine
            .invoke(call(br#"{"sleep_ms": 800, "name": "drained"}"#))
            .await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let existed = fx
        .engine
        .unregister(UID, &reg, Release::Drain)
        .await
        .unwrap();
    assert!(existed);
    let out = json(&slow.await.unwrap().unwrap().output);
    assert_eq!(out["name"], "drained", "drained work completes");
    assert!(fx.engine.current_record(UID).is_none());
    assert!(matches!(
        fx.engine.invoke(call(b"{}")).await,
        Err(EngineError::Fenced(FenceError::NotRegistered { .. }))
    ));
}

#[tokio::test]
async fn cancel_unregister_stops_the_in_flight_invocation_on_the_server() {
    let (fx, reg) = python().await;
    let engine = fx.engine.clone();
    let slow = tokio::spawn(async move { engine.invoke(call(br#"{"sleep_ms": 30000}"#)).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    fx.engine
        .unregister(UID, &reg, Release::Cancel)
        .await
        .unwrap();
    let err = slow.await.unwrap().unwrap_err();
    // It was running: the caller is told it may have run, not to retry.
    assert!(matches!(err, EngineError::Interrupted), "{err:?}");
    assert_eq!(err.code(), ErrorCode::OutcomeUnknown);
    assert!(fx.server.fake.state.lock().unwrap().functions.is_empty());
}
