//! Every error row of the public API, end to end: typed JSON, the right
//! status, Retry-After where due, nothing leaked.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use kruntimes_testkit::prelude::*;
use kruntimes_testkit::{Stack, read_pids};

const UNKNOWN_UID: &str = "00000000-0000-4000-8000-000000000000";

/// One request and the typed error it must get.
struct Row<'a> {
    what: &'static str,
    method: reqwest::Method,
    url: &'a str,
    token: Option<&'a str>,
    headers: Vec<(&'static str, &'a str)>,
    body: &'a str,
    status: u16,
    code: &'static str,
}

impl<'a> Row<'a> {
    /// `POST url` with `{}` and `token`.
    fn post(
        what: &'static str,
        url: &'a str,
        token: Option<&'a str>,
        status: u16,
        code: &'static str,
    ) -> Self {
        Self {
            what,
            method: reqwest::Method::POST,
            url,
            token,
            headers: Vec::new(),
            body: "{}",
            status,
            code,
        }
    }

    fn header(mut self, name: &'static str, value: &'a str) -> Self {
        self.headers.push((name, value));
        self
    }

    fn body(mut self, body: &'a str) -> Self {
        self.body = body;
        self
    }
}

fn slow_runs() -> Vec<(String, String)> {
    vec![
        python_run("echo"),
        python_run("slow-a"),
        python_run("slow-b"),
        python_run("doomed"),
        python_run("orphaned"),
        python_run_with("deadline", "      invocationTimeoutSeconds: 1\n"),
        broken_python_run("broken"),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_error_row_is_a_typed_error() {
    let stack = start(2, slow_runs(), &["--max-in-flight", "2"]);
    let echo = stack.wait_phase("echo", "Ready").await.unwrap();
    for n in ["slow-a", "slow-b", "deadline", "doomed", "orphaned"] {
        stack.wait_phase(n, "Ready").await.unwrap();
    }
    let uid = echo["uid"].as_str().unwrap().to_owned();
    let url = stack.endpoint("echo").unwrap();
    let http = &stack.http;
    let token = stack.token.clone();
    let post = |u: String| http.post(u).bearer_auth(token.clone());

    let admin = Some(token.as_str());

    // The rows one request shows, each with its status and code.
    let bad_path = format!(
        "{}/v1/namespaces/Default/runtimes/python/runs/{uid}:invoke",
        stack.gateway
    );
    let no_verb = format!(
        "{}/v1/namespaces/default/runtimes/python/runs/{uid}",
        stack.gateway
    );
    let long_id = "x".repeat(129);
    let big = format!("{{\"pad\": \"{}\"}}", "x".repeat(1024 * 1024));
    let padding = "p".repeat(20 * 1024);
    let unknown = stack.url("default", "python", UNKNOWN_UID);
    let other_runtime = stack.url("default", "bash", &uid);
    let other_namespace = stack.url("other", "python", &uid);
    let rows: Vec<Row<'_>> = vec![
        Row::post("a malformed path", &bad_path, admin, 400, "InvalidPath"),
        Row::post("a path without a verb", &no_verb, admin, 400, "InvalidPath"),
        Row::post("a body that is not JSON", &url, admin, 400, "InvalidJson").body("{not json"),
        Row::post(
            "an overlong invocation id",
            &url,
            admin,
            400,
            "InvalidInvocationId",
        )
        .header("x-kruntimes-invocation-id", &long_id),
        Row {
            method: reqwest::Method::GET,
            ..Row::post("GET on :invoke", &url, admin, 405, "MethodNotAllowed")
        },
        Row::post("no token", &url, None, 401, "Unauthenticated"),
        Row::post(
            "a token that is not a JWT",
            &url,
            Some("garbage.token.value"),
            401,
            "Unauthenticated",
        ),
        Row::post("Basic credentials", &url, None, 401, "Unauthenticated")
            .header("authorization", "Basic Zm9vOmJhcg=="),
        Row::post("an unknown UID", &unknown, admin, 404, "NotFound"),
        Row::post(
            "the UID under another Runtime",
            &other_runtime,
            admin,
            404,
            "NotFound",
        ),
        Row::post(
            "the UID under another namespace",
            &other_namespace,
            admin,
            404,
            "NotFound",
        ),
        // Answered by the gateway from Content-Length: runtimed never sees it.
        Row::post("a body over the limit", &url, admin, 413, "PayloadTooLarge")
            .header("x-kruntimes-invocation-id", "big-cl")
            .body(&big),
    ];
    for row in &rows {
        let mut req = http.request(row.method.clone(), row.url);
        if let Some(t) = row.token {
            req = req.bearer_auth(t);
        }
        for (k, v) in &row.headers {
            req = req.header(*k, *v);
        }
        let r = req.body(row.body.to_owned()).send().await.unwrap();
        let body = expect_error(r, row.status, row.code).await;
        // Neither the token nor the payload comes back.
        assert!(
            !body.to_string().contains("garbage.token.value"),
            "{}: {body}",
            row.what
        );
    }

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

    // 431: oversized headers (Pingora answers before the gateway's code).
    let r = post(url.clone())
        .header("x-padding", padding)
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 431);

    // 401: an expired token (issued with a TTL of 0; the gateway allows 5 s
    // of clock skew, so it is refused once that has passed).
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
    let minted = stack
        .krt(&["token", "--subject", "eve", "--group", "interns"])
        .unwrap();
    // krt token says the policy decides, and how to grant.
    let note = String::from_utf8_lossy(&minted.stderr);
    assert!(
        note.contains("policy.yaml") && note.contains("--group kruntimes:admins"),
        "{note}"
    );
    let eve = String::from_utf8(minted.stdout).unwrap().trim().to_owned();
    let r = http
        .post(url.clone())
        .bearer_auth(&eve)
        .body("{}")
        .send()
        .await
        .unwrap();
    let body = expect_error(r, 403, "Forbidden").await;
    assert!(body["error"]["message"].as_str().unwrap().contains("eve"));

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

    // 500: the handler returned what JSON cannot hold (a Python set).
    let r = post(url.clone())
        .body(r#"{"set": true}"#)
        .send()
        .await
        .unwrap();
    let body = expect_error(r, 500, "InvalidOutput").await;
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("Object of type set is not JSON serializable"),
        "{body}"
    );

    // 504: the invocation deadline (1 s) passed.
    let r = post(stack.endpoint("deadline").unwrap())
        .body(r#"{"sleep": 5}"#)
        .send()
        .await
        .unwrap();
    expect_error(r, 504, "DeadlineExceeded").await;

    // 409: the Run has failed (its handler does not import), for good: the
    // answer says why and asks for no retry.
    stack.wait_phase("broken", "Failed").await.unwrap();
    let broken = stack.endpoint("broken").unwrap();
    let r = post(broken).body("{}").send().await.unwrap();
    assert!(r.headers().get("retry-after").is_none());
    let body = expect_error(r, 409, "RunFailed").await;
    assert_eq!(body["error"]["phase"], "Failed", "{body}");
    assert_eq!(body["error"]["reason"], "RegistrationFailed", "{body}");

    // 429: one in-flight invocation per function Run.
    let slow_url = stack.endpoint("slow-a").unwrap();
    let first = tokio::spawn(
        post(slow_url.clone())
            .body(r#"{"sleep": 2, "started": "started"}"#)
            .send(),
    );
    running(&stack, "slow-a").await;
    expect_error(
        post(slow_url.clone()).body("{}").send().await.unwrap(),
        429,
        "Busy",
    )
    .await;

    // 503 Overloaded: the gateway's in-flight limit (2) is reached.
    let second = tokio::spawn(
        post(stack.endpoint("slow-b").unwrap())
            .body(r#"{"sleep": 2, "started": "started"}"#)
            .send(),
    );
    running(&stack, "slow-b").await;
    expect_error(
        post(url.clone()).body("{}").send().await.unwrap(),
        503,
        "Overloaded",
    )
    .await;
    assert_eq!(first.await.unwrap().unwrap().status(), 200);
    assert_eq!(second.await.unwrap().unwrap().status(), 200);

    // 500 OutcomeUnknown, never a "did not run" 503: the Run is deleted
    // while its handler runs.
    let call = tokio::spawn(
        post(stack.endpoint("doomed").unwrap())
            .body(r#"{"sleep": 60, "started": "started"}"#)
            .send(),
    );
    running(&stack, "doomed").await;
    stack.remove_run("doomed.yaml").unwrap();
    let body = expect_error(call.await.unwrap().unwrap(), 500, "OutcomeUnknown").await;
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("may have run"),
        "{body}"
    );

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

    // 500 OutcomeUnknown from the gateway itself: the owner dies while the
    // handler runs (last: it takes the Runs it owns with it).
    let owner = stack.run("orphaned").unwrap()["assignedPod"]
        .as_str()
        .unwrap()
        .to_owned();
    let call = tokio::spawn(
        post(stack.endpoint("orphaned").unwrap())
            .body(r#"{"sleep": 60, "started": "started"}"#)
            .send(),
    );
    running(&stack, "orphaned").await;
    stack.kill(&owner).unwrap();
    let body = expect_error(call.await.unwrap().unwrap(), 500, "OutcomeUnknown").await;
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("broke after the request was sent"),
        "{body}"
    );
}

/// Waits until the call sent to Run `name` with `"started": "started"` is
/// running its handler (which holds the Run's one invocation slot).
async fn running(stack: &Stack, name: &str) {
    let started = stack.work_dir(name).unwrap().join("started");
    read_pids(&started, 1, Duration::from_secs(60))
        .await
        .unwrap();
}
