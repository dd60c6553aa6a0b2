//! Idle expiry and unregistration (drain, cancel).

use super::*;

#[tokio::test]
async fn idle_registrations_expire_and_report_idle_timeout() {
    let fx = fixture();
    let mut req = request("python", 1, "d", "main.invoke", PY);
    req.idle_timeout_seconds = 1;
    fx.engine.register(req).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    fx.engine.expire_idle().await;
    let entry = fx.engine.publisher().entries().pop().unwrap();
    assert_eq!(entry.phase, own::Phase::Failed as i32);
    assert_eq!(entry.reason, "IdleTimeout");
    assert!(matches!(
        fx.engine.invoke(call(b"{}")).await,
        Err(EngineError::NotReady(_))
    ));
}

#[tokio::test]
async fn drain_unregister_lets_the_in_flight_invocation_finish() {
    let (fx, reg) = python().await;
    let engine = fx.engine.clone();
    let slow = tokio::spawn(async move {
        engine
            .invoke(call(br#"{"sleep": 1, "name": "drained"}"#))
            .await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let existed = fx
        .engine
        .unregister(UID, &reg.registration_id, pb::UnregisterMode::Drain)
        .await
        .unwrap();
    assert!(existed);
    let out = json(&slow.await.unwrap().unwrap());
    assert_eq!(out["message"], "hello drained", "drained work completes");
    assert!(fx.engine.status(UID).is_none());
    assert!(matches!(
        fx.engine.invoke(call(b"{}")).await,
        Err(EngineError::NotRegistered)
    ));
}

#[tokio::test]
async fn cancel_unregister_stops_the_in_flight_invocation_and_its_worker() {
    let (fx, reg) = python().await;
    let engine = fx.engine.clone();
    let slow = tokio::spawn(async move { engine.invoke(call(br#"{"sleep": 30}"#)).await });
    tokio::time::sleep(Duration::from_millis(400)).await;
    let pid = fx.handler_pid();
    let started = std::time::Instant::now();
    fx.engine
        .unregister(UID, &reg.registration_id, pb::UnregisterMode::Cancel)
        .await
        .unwrap();
    let err = slow.await.unwrap().unwrap_err();
    assert!(matches!(err, EngineError::NotReady("cancelled")), "{err:?}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "cancel does not wait for the handler"
    );
    assert!(
        exits_soon(pid).await,
        "the cancelled worker {pid} is killed"
    );
}
