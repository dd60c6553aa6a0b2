//! Every error row of the public API, end to end: typed JSON, the right
//! status, Retry-After where due, nothing leaked.

mod common;

use std::time::Duration;

use common::*;

const UNKNOWN_UID: &str = "00000000-0000-4000-8000-000000000000";

fn slow_runs() -> Vec<(String, String)> {
    vec![
        python_run("echo"),
        python_run("slow-a"),
        python_run("slow-b"),
        python_run_with("deadline", "      invocationTimeoutSeconds: 1\n"),
        (
            "broken.yaml".into(),
            kruntimes_testkit::function_run(
                "broken",
                "python",
                "main.invoke",
                "main.py",
                "def invoke(:\n",
                "",
            ),
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_error_row_is_a_typed_error() {
    let stack = start(2, slow_runs(), &["--max-in-flight", "2"]);
    let echo = stack.wait_phase("echo", "Ready").await.unwrap();
    for n in ["slow-a", "slow-b", "deadline"] {
        stack.wait_phase(n, "Ready").await.unwrap();
    }
    let uid = echo["uid"].as_str().unwrap().to_owned();
    let url = stack.endpoint("echo").unwrap();
    let http = &stack.http;
    let token = stack.token.clone();
    let post = |u: String| http.post(u).bearer_auth(token.clone());

    // 400: malformed path, JSON, invocation id.
    let bad_path = format!(
        "{}/v1/namespaces/Default/runtimes/python/runs/{uid}:invoke",
        stack.gateway
    );
    expect_error(
        post(bad_path).body("{}").send().await.unwrap(),
        400,
        "InvalidPath",
    )
    .await;
    let no_verb = format!(
        "{}/v1/namespaces/default/runtimes/python/runs/{uid}",
        stack.gateway
    );
    expect_error(
        post(no_verb).body("{}").send().await.unwrap(),
        400,
        "InvalidPath",
    )
    .await;
    expect_error(
        post(url.clone()).body("{not json").send().await.unwrap(),
        400,
        "InvalidJson",
    )
    .await;
    let long_id = "x".repeat(129);
    let r = post(url.clone())
        .header("x-kruntimes-invocation-id", long_id)
        .body("{}")
        .send()
        .await
        .unwrap();
    expect_error(r, 400, "InvalidInvocationId").await;
    let r = http
        .get(url.clone())
        .bearer_auth(&stack.token)
        .send()
        .await
        .unwrap();
    expect_error(r, 405, "MethodNotAllowed").await;

    // 401: missing, garbage, foreign-signed and expired tokens.
    expect_error(
        http.post(url.clone()).body("{}").send().await.unwrap(),
        401,
        "Unauthenticated",
    )
    .await;
    let r = http
        .post(url.clone())
        .bearer_auth("garbage.token.value")
        .body("{}")
        .send()
        .await
        .unwrap();
    let body = expect_error(r, 401, "Unauthenticated").await;
    assert!(
        !body.to_string().contains("garbage.token.value"),
        "tokens never appear in error bodies"
    );
    let r = http
        .post(url.clone())
        .header("authorization", "Basic Zm9vOmJhcg==")
        .body("{}")
        .send()
        .await
        .unwrap();
    expect_error(r, 401, "Unauthenticated").await;
    let expired = stack
        .krt(&[
            "token",
            "--subject",
            "krt-admin",
            "--group",
            "kruntimes:admins",
            "--ttl-secs",
            "0",
        ])
        .unwrap();
    let expired = String::from_utf8(expired.stdout).unwrap().trim().to_owned();
    tokio::time::sleep(Duration::from_secs(6)).await;
    let r = http
        .post(url.clone())
        .bearer_auth(&expired)
        .body("{}")
        .send()
        .await
        .unwrap();
    expect_error(r, 401, "Unauthenticated").await;

    // 403: authenticated, not allowed by the policy.
    let eve = stack
        .krt(&["token", "--subject", "eve", "--group", "interns"])
        .unwrap();
    let eve = String::from_utf8(eve.stdout).unwrap().trim().to_owned();
    let r = http
        .post(url.clone())
        .bearer_auth(&eve)
        .body("{}")
        .send()
        .await
        .unwrap();
    let body = expect_error(r, 403, "Forbidden").await;
    assert!(body["error"]["message"].as_str().unwrap().contains("eve"));

    // 404: unknown UID, UID under another Runtime or namespace.
    expect_error(
        post(stack.url("default", "python", UNKNOWN_UID))
            .body("{}")
            .send()
            .await
            .unwrap(),
        404,
        "NotFound",
    )
    .await;
    expect_error(
        post(stack.url("default", "bash", &uid))
            .body("{}")
            .send()
            .await
            .unwrap(),
        404,
        "NotFound",
    )
    .await;
    expect_error(
        post(stack.url("other", "python", &uid))
            .body("{}")
            .send()
            .await
            .unwrap(),
        404,
        "NotFound",
    )
    .await;

    // 413 with Content-Length: answered by the gateway, runtimed never sees it.
    let big = format!("{{\"pad\": \"{}\"}}", "x".repeat(1024 * 1024));
    let r = post(url.clone())
        .header("x-kruntimes-invocation-id", "big-cl")
        .body(big.clone())
        .send()
        .await
        .unwrap();
    expect_error(r, 413, "PayloadTooLarge").await;
    // 413 without Content-Length (streamed): counted by the gateway.
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
        (0..20).map(|_| Ok(vec![b' '; 64 * 1024])).collect();
    let stream = futures::stream::iter(chunks);
    let r = post(url.clone())
        .header("x-kruntimes-invocation-id", "big-stream")
        .body(reqwest::Body::wrap_stream(stream))
        .send()
        .await
        .unwrap();
    expect_error(r, 413, "PayloadTooLarge").await;

    // 431: oversized headers.
    let r = post(url.clone())
        .header("x-padding", "p".repeat(20 * 1024))
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 431);

    // 500: the handler raised; bounded type and message, no traceback.
    let r = post(url.clone())
        .body(r#"{"raise": "input"}"#)
        .send()
        .await
        .unwrap();
    let body = expect_error(r, 500, "FunctionError").await;
    let msg = body["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("ValueError") && msg.contains("bad input"),
        "{msg}"
    );
    assert!(!msg.contains("Traceback"), "tracebacks stay in logs: {msg}");

    // 504: the invocation deadline (1 s) passed.
    let r = post(stack.endpoint("deadline").unwrap())
        .body(r#"{"sleep": 5}"#)
        .send()
        .await
        .unwrap();
    expect_error(r, 504, "DeadlineExceeded").await;

    // 503: the Run is known but not Ready (its handler does not import).
    stack.wait_phase("broken", "Failed").await.unwrap();
    let broken = stack.endpoint("broken").unwrap();
    expect_error(
        post(broken).body("{}").send().await.unwrap(),
        503,
        "NotReady",
    )
    .await;

    // 429: one in-flight invocation per function Run.
    let slow_url = stack.endpoint("slow-a").unwrap();
    let first = tokio::spawn(post(slow_url.clone()).body(r#"{"sleep": 2}"#).send());
    tokio::time::sleep(Duration::from_millis(500)).await;
    expect_error(
        post(slow_url.clone()).body("{}").send().await.unwrap(),
        429,
        "Busy",
    )
    .await;

    // 503 Overloaded: the gateway's in-flight limit (2) is reached.
    let second = tokio::spawn(
        post(stack.endpoint("slow-b").unwrap())
            .body(r#"{"sleep": 2}"#)
            .send(),
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    expect_error(
        post(url.clone()).body("{}").send().await.unwrap(),
        503,
        "Overloaded",
    )
    .await;
    assert_eq!(first.await.unwrap().unwrap().status(), 200);
    assert_eq!(second.await.unwrap().unwrap().status(), 200);

    // Payloads and outputs are never logged.
    let secret = "payload-marker-7f3a9c";
    let r = post(url.clone())
        .body(format!(r#"{{"name": "{secret}"}}"#))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);

    // Nothing crashed: the Run still answers.
    assert_eq!(
        post(url.clone()).body("{}").send().await.unwrap().status(),
        200
    );

    // Oversized bodies never reached the owners.
    let runtimed_logs = stack.log_of("runtimed-0") + &stack.log_of("runtimed-1");
    assert!(
        runtimed_logs.contains("invocation finished"),
        "runtimed logs invocations"
    );
    for id in ["big-cl", "big-stream"] {
        assert!(
            !runtimed_logs.contains(id),
            "413 request {id} reached runtimed"
        );
    }
    // No token ever appears in any log.
    let logs = stack.settled_logs().await;
    assert!(
        stack.log_of("gateway").contains("big-cl"),
        "the gateway logs the rejection"
    );
    for t in [&stack.token, &eve, &expired] {
        assert!(!logs.contains(t.as_str()), "a token leaked into the logs");
    }
    assert!(!logs.contains(secret), "a payload leaked into the logs");
}
