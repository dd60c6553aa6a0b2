//! Invocations: answers and failures of the server, bounds, one in flight.

use super::*;

#[tokio::test]
async fn the_servers_answer_is_the_output() {
    let (fx, _) = python().await;
    let out = json(
        &fx.engine
            .invoke(call(br#"{"name":"X"}"#))
            .await
            .unwrap()
            .output,
    );
    assert_eq!(out["name"], "X");
}

#[tokio::test]
async fn a_bash_call_goes_over_grpc_when_the_direct_socket_cannot_be_reached() {
    let fx = fixture().await;
    fx.server.fake.state.lock().unwrap().invoke_socket = "runtime.sock.invoke".into();
    fx.server.link.check().await;
    let direct = fx
        .server
        .link
        .direct()
        .expect("the announced socket is known");
    assert!(!direct.socket().exists());
    register(&fx, request("bash", 1, "d", "main.run"))
        .await
        .unwrap();
    let bash = Invocation {
        runtime: "bash",
        ..call(br#"{"name":"X"}"#)
    };
    let out = json(&fx.engine.invoke(bash).await.unwrap().output);
    assert_eq!(out["name"], "X");
    assert_eq!(direct.idle(), 0);
    // The fake's gRPC InvokeFunction served it.
    assert_eq!(fx.server.fake.state.lock().unwrap().completed.len(), 1);
}

#[tokio::test]
async fn the_servers_failures_land_in_the_public_error_table() {
    let (fx, _) = python().await;
    let err = fx
        .engine
        .invoke(call(br#"{"raise":"bad input"}"#))
        .await
        .unwrap_err();
    assert!(
        matches!(err, EngineError::Invoke(InvokeError::Function { ref kind, ref message }) if kind == "ValueError" && message == "bad input"),
        "{err:?}"
    );
    type Expect = fn(&EngineError) -> bool;
    let cases: [(&[u8], Expect); 4] = [
        (
            br#"{"fail":"aborted"}"#,
            |e| matches!(e, EngineError::Invoke(InvokeError::Crashed(m)) if m.contains("exit status: 3")),
        ),
        (br#"{"fail":"deadline"}"#, |e| {
            matches!(e, EngineError::Invoke(InvokeError::Timeout(_)))
        }),
        (br#"{"fail":"too_large"}"#, |e| {
            matches!(e, EngineError::Invoke(InvokeError::InvalidOutput(_)))
        }),
        // A custom server that fails the call with a status instead.
        (br#"{"fail":"status"}"#, |e| {
            matches!(e, EngineError::Invoke(InvokeError::InvalidOutput(_)))
        }),
    ];
    for (input, expected) in cases {
        let err = fx.engine.invoke(call(input)).await.unwrap_err();
        assert!(expected(&err), "{err:?}");
    }
    assert!(
        fx.engine.invoke(call(b"{}")).await.is_ok(),
        "the function goes on"
    );
}

#[tokio::test]
async fn second_concurrent_invocation_is_busy() {
    let (fx, _) = python().await;
    let engine = fx.engine.clone();
    let slow = tokio::spawn(async move {
        engine
            .invoke(call(br#"{"sleep_ms":1000}"#))
            .await
            .map(|_| ())
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let err = fx.engine.invoke(call(b"{}")).await.unwrap_err();
    assert!(matches!(err, EngineError::Busy), "{err:?}");
    slow.await.unwrap().unwrap();
}

#[tokio::test]
async fn an_abandoned_invocation_frees_its_slot_and_is_cancelled_on_the_server() {
    let (fx, _) = python().await;
    let engine = fx.engine.clone();
    let abandoned = tokio::spawn(async move {
        let slow = Invocation {
            invocation_id: "alice",
            ..call(br#"{"sleep_ms":30000}"#)
        };
        engine.invoke(slow).await.map(|_| ())
    });
    // Until the server has the call, nothing is abandoned mid-call.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !fx.server.fake.calls().iter().any(|c| c == "invoke alice") {
        assert!(std::time::Instant::now() < deadline, "alice never arrived");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The caller goes away: its future is dropped.
    abandoned.abort();
    assert!(abandoned.await.unwrap_err().is_cancelled());
    // The slot is free at once, and bob gets his own answer.
    let bob = Invocation {
        invocation_id: "bob",
        ..call(br#"{"who":"bob"}"#)
    };
    let out = json(&fx.engine.invoke(bob).await.unwrap().output);
    assert_eq!(out["who"], "bob");
    // The server saw alice's call cancelled, not run to its end.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !fx
        .server
        .fake
        .calls()
        .iter()
        .any(|c| c == "abandoned alice")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the server never saw alice's call cancelled: {:?}",
            fx.server.fake.calls()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let completed = fx.server.fake.state.lock().unwrap().completed.clone();
    assert_eq!(completed, ["bob"], "alice's call never ran to its end");
}

#[tokio::test]
async fn input_bounds_and_json_are_checked_before_the_server() {
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
}
