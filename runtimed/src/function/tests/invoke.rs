//! Invocations through the persistent Python worker: errors, crashes, timeouts, bounds, one in flight.

use super::*;

#[tokio::test]
async fn python_worker_imports_once_and_serves_many_invocations() {
    let (fx, _) = python().await;
    let a = json(&fx.engine.invoke(call(br#"{"name":"X"}"#)).await.unwrap());
    let b = json(&fx.engine.invoke(call(br#"{"name":"Y"}"#)).await.unwrap());
    assert_eq!(a["message"], "hello X");
    assert_eq!(b["message"], "hello Y");
    assert_eq!(a["pid"], b["pid"], "the same warm worker serves both calls");
}

#[tokio::test]
async fn handler_exception_is_a_bounded_function_error() {
    let (fx, _) = python().await;
    let err = fx
        .engine
        .invoke(call(br#"{"raise":"input"}"#))
        .await
        .unwrap_err();
    match err {
        EngineError::Invoke(InvokeError::Function { kind, message }) => {
            assert_eq!(kind, "ValueError");
            assert_eq!(message, "bad input");
        }
        other => panic!("unexpected {other:?}"),
    }
    // The worker survives handler errors.
    assert!(fx.engine.invoke(call(b"{}")).await.is_ok());
}

#[tokio::test]
async fn worker_crash_is_reported_then_respawned() {
    let (fx, _) = python().await;
    let first = json(&fx.engine.invoke(call(b"{}")).await.unwrap());
    let err = fx
        .engine
        .invoke(call(br#"{"crash":true}"#))
        .await
        .unwrap_err();
    assert!(
        matches!(err, EngineError::Invoke(InvokeError::Crashed(_))),
        "{err:?}"
    );
    let after = json(&fx.engine.invoke(call(b"{}")).await.unwrap());
    assert_ne!(
        first["pid"], after["pid"],
        "a fresh worker serves the next call"
    );
}

#[tokio::test]
async fn timeout_kills_the_worker_process_group() {
    let (fx, _) = python().await;
    let slow = Invocation {
        timeout: Some(Duration::from_millis(300)),
        ..call(br#"{"sleep":30}"#)
    };
    let err = fx.engine.invoke(slow).await.unwrap_err();
    assert!(
        matches!(err, EngineError::Invoke(InvokeError::Timeout(_))),
        "{err:?}"
    );
    let pid = fx.handler_pid();
    assert!(
        exits_soon(pid).await,
        "the timed-out worker {pid} must be killed"
    );
    assert!(fx.engine.invoke(call(b"{}")).await.is_ok());
}

#[tokio::test]
async fn second_concurrent_invocation_is_busy() {
    let (fx, _) = python().await;
    let engine = fx.engine.clone();
    let slow =
        tokio::spawn(async move { engine.invoke(call(br#"{"sleep":1}"#)).await.map(|_| ()) });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let err = fx.engine.invoke(call(b"{}")).await.unwrap_err();
    assert!(matches!(err, EngineError::Busy), "{err:?}");
    slow.await.unwrap().unwrap();
}

#[tokio::test]
async fn input_and_output_bounds_are_enforced() {
    let (fx, _) = python().await;
    let big = vec![b' '; (MAX_IO_BYTES + 1) as usize];
    assert!(matches!(
        fx.engine.invoke(call(&big)).await,
        Err(EngineError::TooLarge(_))
    ));
    assert!(matches!(
        fx.engine.invoke(call(b"{nope")).await,
        Err(EngineError::InvalidJson(_))
    ));
    let err = fx
        .engine
        .invoke(call(br#"{"big":2000000}"#))
        .await
        .unwrap_err();
    assert!(
        matches!(err, EngineError::Invoke(InvokeError::InvalidOutput(_))),
        "{err:?}"
    );
    assert!(fx.engine.invoke(call(b"{}")).await.is_ok());
}
