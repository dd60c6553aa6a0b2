//! Ownership changes end to end: owner loss and recovery, Runs appearing and
//! disappearing, and runtimed's own fencing and peer checks.

// Test helpers panic on failure: that is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use kruntimes_testkit::prelude::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_runtimed_answers_503_then_recovers_with_the_next_attempt() {
    let stack = start(
        1,
        vec![python_run("survivor")],
        &["--owner-grace-secs", "2"],
    );
    let before = stack.wait_phase("survivor", "Ready").await.unwrap();
    assert_eq!(before["attempt"], 1);
    assert_eq!(stack.invoke("survivor", "{}").await.unwrap().status(), 200);

    stack.kill("runtimed-0").unwrap();
    let resp = stack.invoke("survivor", "{}").await.unwrap();
    let status = resp.status().as_u16();
    let retry_after = resp.headers().contains_key("retry-after");
    let body = json(resp).await;
    let code = body["error"]["code"].as_str().unwrap();
    // The owner is gone: 503 once the gateway knows (retry later), or 500
    // OutcomeUnknown when the call went out on the pooled connection to the
    // dead process — whether it got there first cannot be told, so it is
    // never answered as "did not run".
    match status {
        503 => {
            assert!(retry_after, "{body}");
            assert!(["OwnerUnavailable", "NotReady"].contains(&code), "{body}");
        }
        500 => assert_eq!(code, "OutcomeUnknown", "{body}"),
        other => panic!("the owner is gone, yet {other}: {body}"),
    }

    // krt restarts the instance with a new Pod UID; the control plane fences
    // the old registration and re-registers as attempt 2.
    let resp = stack
        .invoke_until_ok("survivor", r#"{"name": "again"}"#, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(json(resp).await["message"], "hello again");
    let after = stack.run("survivor").unwrap();
    assert_eq!(after["attempt"], 2);
    assert_ne!(after["assignedPodUid"], before["assignedPodUid"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_runtime_server_takes_its_processes_along_answers_503_and_serves_again() {
    let stack = start(1, vec![python_run("kept")], &[]);
    let before = stack.wait_phase("kept", "Ready").await.unwrap();
    let first = json(stack.invoke("kept", "{}").await.unwrap()).await;
    let server = stack.processes().unwrap()["runtime-server-0"]["pid"]
        .as_i64()
        .unwrap() as i32;
    let user = kruntimes_testkit::descendants(server);
    let worker = first["pid"].as_i64().unwrap() as i32;
    assert!(user.contains(&worker), "the worker runs under the server");

    stack.kill("runtime-server-0").unwrap();
    let left = kruntimes_testkit::wait_gone(&user, Duration::from_secs(30)).await;
    assert_eq!(
        left,
        Vec::<i32>::new(),
        "nothing the server ran outlives it"
    );

    // krt restarts it; runtimed registers the function again on its own,
    // at the same attempt (the control plane is not involved). Until then
    // every answer is a typed 503, never someone's 500.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let after = loop {
        let resp = stack.invoke("kept", r#"{"name": "back"}"#).await.unwrap();
        if resp.status() == 200 {
            break json(resp).await;
        }
        expect_error(resp, 503, "NotReady").await;
        assert!(std::time::Instant::now() < deadline, "never served again");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(after["message"], "hello back");
    assert_ne!(after["pid"], first["pid"], "a fresh worker");
    assert_eq!(stack.run("kept").unwrap()["attempt"], before["attempt"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_files_added_and_removed_while_running_come_and_go() {
    let stack = start(1, vec![python_run("keep")], &[]);
    stack.wait_phase("keep", "Ready").await.unwrap();
    let (file, yaml) = bash_run("late");
    stack.add_run(&file, &yaml).unwrap();
    stack.wait_phase("late", "Ready").await.unwrap();
    let resp = stack.invoke("late", r#"{"name": "late"}"#).await.unwrap();
    assert_eq!(resp.status(), 200);

    let url = stack.endpoint("late").unwrap();
    stack.remove_run(&file).unwrap();
    stack
        .wait_run("keep", Duration::from_secs(30), |_| {
            stack.run("late").is_none()
        })
        .await
        .unwrap();
    let mut last = 0;
    for _ in 0..100 {
        let r = stack
            .http
            .post(&url)
            .bearer_auth(&stack.token)
            .body("{}")
            .send()
            .await
            .unwrap();
        last = r.status().as_u16();
        if last == 404 {
            expect_error(r, 404, "NotFound").await;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(last, 404, "a removed Run's URL is 404");
    // Re-adding the same name creates a new Run: the old URL stays dead.
    stack.add_run(&file, &yaml).unwrap();
    let again = stack.wait_phase("late", "Ready").await.unwrap();
    assert_ne!(url, again["endpoint"].as_str().unwrap());
    let r = stack
        .http
        .post(&url)
        .bearer_auth(&stack.token)
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 404);
}

/// A client for runtimed's dataplane with an internal-CA identity.
fn runtimed_client(
    stack: &kruntimes_testkit::Stack,
    identity: &str,
    addr: std::net::SocketAddr,
) -> reqwest::Client {
    let pki = stack.state_dir().join("pki");
    let ca = std::fs::read(pki.join("internal-ca.crt")).unwrap();
    let mut b = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(&ca).unwrap())
        .resolve("runtimed.kruntimes.internal", addr);
    if !identity.is_empty() {
        let mut pem = std::fs::read(pki.join(format!("{identity}.crt"))).unwrap();
        pem.extend(std::fs::read(pki.join(format!("{identity}.key"))).unwrap());
        b = b.identity(reqwest::Identity::from_pem(&pem).unwrap());
    }
    b.build().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtimed_rejects_stale_attempts_foreign_pods_and_non_gateway_peers() {
    let stack = start(1, vec![python_run("fenced")], &[]);
    let run = stack.wait_phase("fenced", "Ready").await.unwrap();
    let uid = run["uid"].as_str().unwrap();
    let pod_uid = run["assignedPodUid"].as_str().unwrap();
    let addr: std::net::SocketAddr = stack.processes().unwrap()["runtimed-0"]["address"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let url = format!(
        "https://runtimed.kruntimes.internal:{}/v1/namespaces/default/runtimes/python/runs/{uid}:invoke",
        addr.port()
    );
    let send = |client: reqwest::Client, attempt: &str, pod: &str| {
        client
            .post(url.clone())
            .header("x-kruntimes-invocation-id", "direct-1")
            .header("x-kruntimes-run-uid", uid)
            .header("x-kruntimes-owner-pod-uid", pod)
            .header("x-kruntimes-attempt", attempt)
            .header("x-kruntimes-hop", "gateway")
            .body(r#"{"name": "direct"}"#)
            .send()
    };
    let gw = runtimed_client(&stack, "gateway-client", addr);
    // The gateway identity with matching fencing headers is served.
    let ok = send(gw.clone(), "1", pod_uid).await.unwrap();
    assert_eq!(ok.status(), 200);
    assert_eq!(ok.headers()["x-kruntimes-served-by"], "runtimed-0");
    // A stale attempt and a foreign Pod UID are refused as stale owners,
    // with a message saying what did not match.
    let stale = expect_error(
        send(gw.clone(), "0", pod_uid).await.unwrap(),
        503,
        "StaleOwner",
    )
    .await;
    assert_eq!(
        stale["error"]["message"],
        format!("run {uid} is registered here at attempt 1, the request carries attempt 0")
    );
    expect_error(
        send(gw.clone(), "2", pod_uid).await.unwrap(),
        503,
        "StaleOwner",
    )
    .await;
    let foreign = expect_error(
        send(gw.clone(), "1", "some-other-pod").await.unwrap(),
        503,
        "StaleOwner",
    )
    .await;
    assert_eq!(
        foreign["error"]["message"],
        format!("this Pod (uid {pod_uid}) is not the owner the gateway routed to (some-other-pod)")
    );
    // Without the hop marker the request did not come through a gateway.
    let r = gw
        .post(url.clone())
        .header("x-kruntimes-invocation-id", "direct-2")
        .body("{}")
        .send()
        .await
        .unwrap();
    expect_error(r, 403, "Forbidden").await;
    // Another internal identity (the control plane) may not use the dataplane.
    let cp = runtimed_client(&stack, "control-plane", addr);
    expect_error(send(cp, "1", pod_uid).await.unwrap(), 403, "Forbidden").await;
    // No client certificate: the TLS handshake itself is refused.
    let anonymous = runtimed_client(&stack, "", addr);
    assert!(
        send(anonymous, "1", pod_uid).await.is_err(),
        "mTLS is required"
    );
}
