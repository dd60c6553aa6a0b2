//! Session WebSockets are held to the caller's rights for their whole life,
//! not just at the upgrade: a socket ends with 4401 "token expired" when
//! its token expires (idle, or on its next operation), with 4403 on the
//! next operation once the caller's permission is revoked (Kubernetes RBAC,
//! within the decision cache's allowed TTL), and with 1009 when one message
//! is over the body limit — a limit that holds per message, not over the
//! connection. Deadlines are waited for, never measured.

// Test helpers panic on failure: that is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use futures::{SinkExt as _, StreamExt as _};
use kruntimes_kubetest::{ApiServer, Subject, User};
use kruntimes_testkit::Stack;
use kruntimes_testkit::prelude::*;
use serde_json::json;
use tokio_tungstenite::tungstenite::Message;

fn sandbox(name: &str, namespace: &str) -> (String, String) {
    (
        format!("{name}.yaml"),
        format!(
            "apiVersion: kruntimes.io/v1alpha1\nkind: Run\nmetadata:\n  name: {name}\n  namespace: {namespace}\nspec:\n  runtime: bash\n  mode:\n    session:\n      operationTimeout: 120\n"
        ),
    )
}

/// Reads until the socket's Close frame; returns its code and reason.
async fn close_of(ws: &mut WebSocket) -> (u16, String) {
    loop {
        match tokio::time::timeout(Duration::from_secs(60), ws.next())
            .await
            .expect("the socket stayed open")
        {
            Some(Ok(Message::Close(Some(frame)))) => {
                return (u16::from(frame.code), frame.reason.to_string());
            }
            Some(Ok(Message::Close(None))) => panic!("closed without a code"),
            Some(Ok(_)) => {}
            Some(Err(e)) => panic!("socket error instead of a Close frame: {e}"),
            None => panic!("socket ended without a Close frame"),
        }
    }
}

/// Sends `echo WORD` and reads until its `completed` event.
async fn echo(ws: &mut WebSocket, word: &str) {
    ws.send(ws_send(
        json!({"command": {"shell": format!("echo {word}")}}),
    ))
    .await
    .unwrap();
    loop {
        let msg = tokio::time::timeout(Duration::from_secs(60), ws.next())
            .await
            .expect("no answer")
            .expect("socket ended")
            .unwrap();
        if let Message::Text(t) = msg {
            let ev: serde_json::Value = serde_json::from_str(t.as_str()).unwrap();
            if ev["type"] == "completed" {
                assert_eq!(ev["stdout"], format!("{word}\n"), "{ev}");
                return;
            }
            assert_ne!(ev["type"], "failed", "{ev}");
        }
    }
}

fn short_token(stack: &Stack, ttl_secs: u64) -> (String, Instant) {
    let out = stack
        .krt(&[
            "token",
            "--subject",
            "short-lived",
            "--group",
            "kruntimes:admins",
            "--ttl-secs",
            &ttl_secs.to_string(),
        ])
        .unwrap();
    assert!(out.status.success());
    let token = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    (token, Instant::now() + Duration::from_secs(ttl_secs))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expiry_and_the_per_message_limit_end_a_socket_with_a_code() {
    let stack = start(
        1,
        vec![sandbox("sbx", "default")],
        &["--gateway-flag=--max-session-body-bytes=4096"],
    );
    let run = stack.wait_phase("sbx", "Ready").await.unwrap();
    let endpoint = run["endpoint"].as_str().unwrap().to_owned();

    // Idle past its token's expiry: the owner closes it, 4401.
    let (token, _) = short_token(&stack, 3);
    let mut idle = websocket(&stack, &endpoint, Some(&token)).await.unwrap();
    echo(&mut idle, "before").await;
    assert_eq!(close_of(&mut idle).await, (4401, "token expired".into()));

    // Busy past its expiry: its next operation ends it, 4401 too.
    let (token, expires) = short_token(&stack, 3);
    let mut busy = websocket(&stack, &endpoint, Some(&token)).await.unwrap();
    echo(&mut busy, "early").await;
    tokio::time::sleep_until((expires + Duration::from_millis(1100)).into()).await;
    let _ = busy
        .send(ws_send(json!({"command": {"shell": "echo late"}})))
        .await;
    let (code, reason) = close_of(&mut busy).await;
    assert_eq!((code, reason.as_str()), (4401, "token expired"));

    // The limit is per message: many messages under it pass, even when
    // together they are far over it; one over it ends the socket, 1009.
    let mut ws = websocket(&stack, &endpoint, Some(&stack.token))
        .await
        .unwrap();
    let padding = "x".repeat(3000);
    for i in 0..5 {
        ws.send(ws_send(
            json!({"command": {"shell": format!("echo {i} # {padding}")}}),
        ))
        .await
        .unwrap();
    }
    let mut completed = 0;
    while completed < 5 {
        if let Message::Text(t) = ws.next().await.unwrap().unwrap() {
            let ev: serde_json::Value = serde_json::from_str(t.as_str()).unwrap();
            assert_ne!(ev["type"], "failed", "{ev}");
            completed += usize::from(ev["type"] == "completed");
        }
    }
    let big = "y".repeat(5000);
    ws.send(ws_send(
        json!({"command": {"shell": format!("echo {big}")}}),
    ))
    .await
    .unwrap();
    let (code, reason) = close_of(&mut ws).await;
    assert_eq!(
        (code, reason.as_str()),
        (1009, "message over the body limit")
    );
    // No operation of the big message ran, and nothing leaked into logs.
    let logs = stack.settled_logs().await;
    assert!(!logs.contains(&big));
    assert!(!logs.contains(&token));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_permission_ends_the_socket_on_its_next_operation() {
    let server = ApiServer::start().await.unwrap();
    server.create_namespace("a").await.unwrap();
    let repo = kruntimes_testkit::checkout();
    server
        .grant_cluster_role("gateway-clusterrole.yaml", User::Gateway)
        .await
        .unwrap();
    let role = server
        .apply_role_file(
            Some("a"),
            &repo.join("examples/rbac/session-user-role.yaml"),
        )
        .await
        .unwrap();
    server
        .bind(
            Some("a"),
            "alice-sessions",
            &role,
            Subject::User(User::Alice),
        )
        .await
        .unwrap();
    let kubeconfig = server.write_kubeconfig(User::Gateway).unwrap();
    let ttl = 4u64;
    let mut stack = Stack::start(
        kruntimes_testkit::krt_binary(),
        kruntimes_testkit::Options {
            env: Vec::new(),
            runtimed: 1,
            max_runtimed: None,
            runs: vec![sandbox("sbx", "a")],
            extra_args: vec![
                "--kubeconfig".into(),
                kubeconfig.display().to_string(),
                format!("--gateway-flag=--authz-allowed-ttl-secs={ttl}"),
            ],
        },
    )
    .expect("start the embedded stack");
    stack.token = server.token(User::Admin).to_owned();
    let run = stack.wait_phase("sbx", "Ready").await.unwrap();
    let endpoint = run["endpoint"].as_str().unwrap().to_owned();
    let alice = server.token(User::Alice).to_owned();

    let mut ws = websocket(&stack, &endpoint, Some(&alice)).await.unwrap();
    echo(&mut ws, "allowed").await;
    server.unbind("a", "alice-sessions").await.unwrap();
    // Within the allowed TTL (plus RBAC's own propagation) an operation is
    // refused: keep operating until the socket ends.
    let deadline = Instant::now() + Duration::from_secs(ttl + 30);
    let mut n = 0;
    let (code, reason) = loop {
        assert!(Instant::now() < deadline, "alice kept her session socket");
        n += 1;
        ws.send(ws_send(json!({"command": {"shell": format!("echo {n}")}})))
            .await
            .unwrap();
        let mut ended = None;
        loop {
            match tokio::time::timeout(Duration::from_secs(60), ws.next())
                .await
                .expect("no answer")
            {
                Some(Ok(Message::Close(Some(f)))) => {
                    ended = Some((u16::from(f.code), f.reason.to_string()));
                    break;
                }
                Some(Ok(Message::Text(t))) => {
                    let ev: serde_json::Value = serde_json::from_str(t.as_str()).unwrap();
                    if ev["type"] == "completed" {
                        break;
                    }
                }
                Some(Ok(_)) => {}
                other => panic!("socket ended without a Close frame: {other:?}"),
            }
        }
        if let Some(e) = ended {
            break e;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert_eq!(code, 4403, "{reason}");
    assert!(reason.starts_with("forbidden"), "{reason}");
    assert!(!stack.settled_logs().await.contains(&alice));
}
