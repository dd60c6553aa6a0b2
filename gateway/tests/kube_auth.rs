//! Gateway authentication and authorization against a real kube-apiserver:
//! TokenReview, SubjectAccessReview per Run, the decision cache (coalescing,
//! TTLs bounded by token expiry, revocation within the allowed TTL), failing
//! closed while the API server is down, and no token in any log.

// Test helpers panic on failure: that is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use kruntimes_kubetest::{ApiServer, Subject, User};
use kruntimes_testkit::{Stack, function_run};
use serde_json::Value;

use kruntimes_testkit::prelude::{PY, series_value};

fn rbac(file: &str) -> std::path::PathBuf {
    kruntimes_testkit::checkout()
        .join("examples/rbac")
        .join(file)
}

/// An API server with namespaces `a` and `b`, the gateway's ClusterRole
/// bound to its user, alice allowed to invoke in `a`, bob only reading Runs
/// in `a`, carol allowed to invoke in `b`.
async fn cluster() -> ApiServer {
    let server = ApiServer::start().await.expect("start the test API server");
    for ns in ["a", "b"] {
        server.create_namespace(ns).await.unwrap();
    }
    server
        .grant_cluster_role("gateway-clusterrole.yaml", User::Gateway)
        .await
        .unwrap();
    for ns in ["a", "b"] {
        server
            .apply_role_file(Some(ns), &rbac("run-invoker-role.yaml"))
            .await
            .unwrap();
        server
            .apply_role_file(Some(ns), &rbac("run-reader-role.yaml"))
            .await
            .unwrap();
    }
    for (ns, binding, role, user) in [
        ("a", "alice-invokes", "run-invoker", User::Alice),
        ("a", "bob-reads", "run-reader", User::Bob),
        ("b", "carol-invokes", "run-invoker", User::Carol),
    ] {
        server
            .bind(Some(ns), binding, role, Subject::User(user))
            .await
            .unwrap();
    }
    server
}

/// ServiceAccount `a/name`, allowed to invoke in `a`; returns its UID.
async fn invoker_service_account(server: &ApiServer, name: &str) -> String {
    let uid = server.create_service_account("a", name).await.unwrap();
    server
        .bind(
            Some("a"),
            &format!("{name}-invokes"),
            "run-invoker",
            Subject::ServiceAccount("a".into(), name.into()),
        )
        .await
        .unwrap();
    uid
}

/// A stack whose gateway authenticates against `server`, with one Python
/// function Run `hello` in namespace `a`.
async fn stack(server: &ApiServer, gateway_flags: &[&str]) -> (Stack, String) {
    // The cluster admin (system:masters) may invoke anything: the stack's
    // readiness helpers use it.
    stack_as(server, gateway_flags, server.token(User::Admin)).await
}

/// [`stack`], whose readiness helpers call with `token`.
async fn stack_as(server: &ApiServer, gateway_flags: &[&str], token: &str) -> (Stack, String) {
    let kubeconfig = server.write_kubeconfig(User::Gateway).unwrap();
    let manifest = function_run("hello", "python", "main.invoke", "main.py", PY, "")
        .replace("namespace: default", "namespace: a");
    let mut args = vec!["--kubeconfig".to_string(), kubeconfig.display().to_string()];
    for f in gateway_flags {
        args.push(format!("--gateway-flag={f}"));
    }
    let mut stack = Stack::start(
        kruntimes_testkit::krt_binary(),
        kruntimes_testkit::Options {
            env: Vec::new(),
            runtimed: 1,
            max_runtimed: None,
            runs: vec![("hello.yaml".into(), manifest)],
            extra_args: args,
        },
    )
    .expect("start the embedded stack");
    stack.token = token.to_owned();
    stack.wait_phase("hello", "Ready").await.unwrap();
    let url = stack.endpoint("hello").unwrap();
    (stack, url)
}

async fn call(stack: &Stack, url: &str, token: Option<&str>) -> reqwest::Response {
    let mut req = stack.http.post(url).body(r#"{"name":"k8s"}"#);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    req.send().await.expect("request")
}

async fn status(stack: &Stack, url: &str, token: Option<&str>) -> u16 {
    call(stack, url, token).await.status().as_u16()
}

async fn error_code(resp: reqwest::Response) -> String {
    let body: Value = resp.json().await.expect("JSON error body");
    body["error"]["code"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// The gateway's counter of `api` calls (all results).
async fn gateway_api_calls(stack: &Stack, api: &str) -> u64 {
    let text = stack.metrics().await.unwrap();
    let label = format!("api=\"{api}\"");
    text.lines()
        .filter(|l| l.starts_with("kruntimes_gateway_auth_api_calls_total{") && l.contains(&label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

async fn assert_no_token_in_logs(stack: &Stack, tokens: &[&str]) {
    let logs = stack.settled_logs().await;
    assert!(logs.len() > 1000, "expected captured logs, got {logs}");
    for t in tokens {
        assert!(!t.is_empty());
        // Even a prefix of a JWT's signature-bearing parts must not appear.
        let probe = &t[t.len().saturating_sub(24)..];
        assert!(!logs.contains(probe), "a token leaked into the logs");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rbac_decides_each_call_per_user_and_run() {
    let server = cluster().await;
    let (stack, url) = stack(&server, &[]).await;
    let alice = server.token(User::Alice);
    let bob = server.token(User::Bob);
    let carol = server.token(User::Carol);

    // alice may create runs/invoke in a.
    let r = call(&stack, &url, Some(alice)).await;
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["message"], "hello k8s");

    // bob may only read Runs: 403 names him, not his token.
    let r = call(&stack, &url, Some(bob)).await;
    assert_eq!(r.status(), 403);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "Forbidden");
    assert!(body["error"]["message"].as_str().unwrap().contains("bob"));
    assert!(!body.to_string().contains(bob));

    // carol's binding is in namespace b: 403 in a.
    assert_eq!(status(&stack, &url, Some(carol)).await, 403);

    // Unknown, malformed and missing tokens: 401.
    let r = call(&stack, &url, Some("kt-not-a-token")).await;
    assert_eq!(r.status(), 401);
    assert_eq!(error_code(r).await, "Unauthenticated");
    assert_eq!(status(&stack, &url, Some("a.b.c")).await, 401);
    assert_eq!(status(&stack, &url, None).await, 401);

    // The UID in the path must be the current Run's: a made-up UID is 404
    // for an authenticated caller.
    let other = url.replace(
        &url[url.rfind('/').unwrap() + 1..url.rfind(':').unwrap()],
        "00000000-0000-4000-8000-000000000000",
    );
    assert_eq!(status(&stack, &other, Some(alice)).await, 404);

    // A ServiceAccount token from the TokenRequest API (a real JWT with exp),
    // allowed through a RoleBinding to the ServiceAccount.
    invoker_service_account(&server, "bot").await;
    let sa_token = server.service_account_token("a", "bot", 600).await.unwrap();
    assert_eq!(sa_token.split('.').count(), 3, "a JWT");
    assert_eq!(status(&stack, &url, Some(&sa_token)).await, 200);
    // A ServiceAccount without a binding is authenticated but denied.
    server.create_service_account("a", "idle").await.unwrap();
    let idle_token = server
        .service_account_token("a", "idle", 600)
        .await
        .unwrap();
    assert_eq!(status(&stack, &url, Some(&idle_token)).await, 403);

    // N concurrent requests with one fresh token: one TokenReview and one
    // SubjectAccessReview, counted by the API server itself.
    let fresh = server.service_account_token("a", "bot", 600).await.unwrap();
    let tr_before = server.request_count("tokenreviews", "POST").await.unwrap();
    let sar_before = server
        .request_count("subjectaccessreviews", "POST")
        .await
        .unwrap();
    let gw_tr_before = gateway_api_calls(&stack, "tokenreview").await;
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let http = stack.http.clone();
        let url = url.clone();
        let token = fresh.clone();
        tasks.push(tokio::spawn(async move {
            http.post(&url)
                .bearer_auth(token)
                .body("{}")
                .send()
                .await
                .map(|r| r.status().as_u16())
        }));
    }
    for t in tasks {
        // 429 is the one-in-flight limit of a function Run: authorized, then
        // turned away by the owner.
        let code = t.await.unwrap().unwrap();
        assert!(code == 200 || code == 429, "{code}");
    }
    let tr_after = server.request_count("tokenreviews", "POST").await.unwrap();
    let sar_after = server
        .request_count("subjectaccessreviews", "POST")
        .await
        .unwrap();
    assert_eq!(tr_after - tr_before, 1, "TokenReviews for one fresh token");
    assert_eq!(
        sar_after - sar_before,
        1,
        "SubjectAccessReviews for one key"
    );
    assert_eq!(
        gateway_api_calls(&stack, "tokenreview").await - gw_tr_before,
        1
    );

    // Rejected tokens are answered from the negative cache: a flood of one
    // bad token costs one TokenReview.
    let tr_before = server.request_count("tokenreviews", "POST").await.unwrap();
    for _ in 0..20 {
        assert_eq!(status(&stack, &url, Some("kt-flood")).await, 401);
    }
    let tr_after = server.request_count("tokenreviews", "POST").await.unwrap();
    assert_eq!(tr_after - tr_before, 1, "negative cache");

    let tokens: Vec<String> = server
        .tokens()
        .map(str::to_owned)
        .chain([
            sa_token,
            idle_token,
            fresh,
            "kt-not-a-token".into(),
            "kt-flood".into(),
        ])
        .collect();
    let refs: Vec<&str> = tokens.iter().map(String::as_str).collect();
    assert_no_token_in_logs(&stack, &refs).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cached_identities_never_outlive_the_tokens_exp() {
    let server = cluster().await;
    // Long cache TTLs: only the token's exp may end the cached allow.
    let (stack, url) = stack(
        &server,
        &["--authn-cache-ttl-secs=600", "--authz-allowed-ttl-secs=600"],
    )
    .await;
    let uid = invoker_service_account(&server, "short").await;
    let token = server
        .mint_service_account_token("a", "short", &uid, Duration::from_secs(10))
        .unwrap();
    let issued = Instant::now();
    assert_eq!(status(&stack, &url, Some(&token)).await, 200);
    assert_eq!(status(&stack, &url, Some(&token)).await, 200);
    // Past exp, the cached allow must be gone (600 s TTLs notwithstanding).
    tokio::time::sleep(Duration::from_secs(11).saturating_sub(issued.elapsed())).await;
    let r = call(&stack, &url, Some(&token)).await;
    assert_eq!(r.status(), 401);
    assert_eq!(error_code(r).await, "Unauthenticated");
    assert_no_token_in_logs(&stack, &[&token]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revocation_within_the_allowed_ttl_and_fail_closed_outage() {
    let mut server = cluster().await;
    let ttl = 8u64;
    let (stack, url) = stack(
        &server,
        &[
            &format!("--authz-allowed-ttl-secs={ttl}"),
            "--kube-api-timeout-ms=2000",
        ],
    )
    .await;
    let alice = server.token(User::Alice).to_owned();
    let carol = server.token(User::Carol).to_owned();
    let bob = server.token(User::Bob).to_owned();

    // Deleting alice's RoleBinding takes effect within the allowed TTL (plus
    // the API server's own RBAC propagation).
    assert_eq!(status(&stack, &url, Some(&alice)).await, 200);
    server.unbind("a", "alice-invokes").await.unwrap();
    let revoked = Instant::now();
    let deadline = Duration::from_secs(ttl + 5);
    loop {
        match status(&stack, &url, Some(&alice)).await {
            403 => break,
            200 => assert!(
                revoked.elapsed() < deadline,
                "alice still allowed {:?} after her RoleBinding was deleted",
                revoked.elapsed()
            ),
            other => panic!("unexpected {other}"),
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    // Outage: carol is allowed in a and cached; then the API server stops.
    server
        .bind(
            Some("a"),
            "carol-invokes-a",
            "run-invoker",
            Subject::User(User::Carol),
        )
        .await
        .unwrap();
    let granted = Instant::now();
    loop {
        match status(&stack, &url, Some(&carol)).await {
            200 => break,
            403 if granted.elapsed() < Duration::from_secs(ttl + 5) => {
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            other => panic!("carol not allowed after her binding: {other}"),
        }
    }
    let cached_at = Instant::now();
    server.stop_apiserver();
    // A cached allow still serves within its TTL...
    if cached_at.elapsed() < Duration::from_secs(ttl - 2) {
        assert_eq!(status(&stack, &url, Some(&carol)).await, 200);
    }
    // ...while a miss fails closed: 503 with Retry-After, never 401/403.
    let r = call(&stack, &url, Some(&bob)).await;
    assert_eq!(r.status(), 503);
    assert!(r.headers().contains_key("retry-after"));
    assert_eq!(error_code(r).await, "AuthUnavailable");
    // Once the TTL passes, the allow is not extended (stale-if-error is off).
    tokio::time::sleep(Duration::from_secs(ttl + 1).saturating_sub(cached_at.elapsed())).await;
    assert_eq!(status(&stack, &url, Some(&carol)).await, 503);

    // The API server returns: decisions resume.
    server.start_apiserver().await.unwrap();
    let back = Instant::now();
    loop {
        match status(&stack, &url, Some(&carol)).await {
            200 => break,
            503 if back.elapsed() < Duration::from_secs(30) => {
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            other => panic!("no recovery after the API server returned: {other}"),
        }
    }
    assert_no_token_in_logs(&stack, &[&alice, &bob, &carol]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_if_error_and_local_service_account_verification() {
    let mut server = cluster().await;
    let (stack, url) = stack(
        &server,
        &[
            "--authz-allowed-ttl-secs=2",
            "--authn-cache-ttl-secs=2",
            "--auth-stale-if-error-secs=60",
            "--sa-jwt-local",
        ],
    )
    .await;
    invoker_service_account(&server, "bot").await;
    let sa_token = server.service_account_token("a", "bot", 600).await.unwrap();

    // Local verification: the service-account JWT is checked against the
    // cluster's keys without a TokenReview (authorization still asks).
    let tr_before = server.request_count("tokenreviews", "POST").await.unwrap();
    assert_eq!(status(&stack, &url, Some(&sa_token)).await, 200);
    assert_eq!(
        server.request_count("tokenreviews", "POST").await.unwrap() - tr_before,
        0
    );
    // Static tokens are not service-account JWTs: they still go to TokenReview.
    let alice = server.token(User::Alice).to_owned();
    assert_eq!(status(&stack, &url, Some(&alice)).await, 200);
    assert_eq!(
        server.request_count("tokenreviews", "POST").await.unwrap() - tr_before,
        1
    );
    // A JWT signed by another key claiming the cluster's issuer is rejected.
    let forged = kruntimes_kubetest::mint_service_account_token(
        &kruntimes_kubetest::foreign_signing_key().unwrap(),
        "a",
        "bot",
        "x",
        Duration::from_secs(600),
    )
    .unwrap();
    assert_eq!(status(&stack, &url, Some(&forged)).await, 401);

    // Stale-if-error: with the API server down, keys allowed recently keep
    // being allowed for the bounded window, past their 2 s TTL.
    server.stop_apiserver();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(status(&stack, &url, Some(&alice)).await, 200);
    assert_eq!(status(&stack, &url, Some(&sa_token)).await, 200);
    // Keys never allowed before still fail closed.
    assert_eq!(
        status(&stack, &url, Some(server.token(User::Carol))).await,
        503
    );
    let metrics = stack.metrics().await.unwrap();
    assert!(
        series_value(
            &metrics,
            "kruntimes_gateway_auth_cache_total{layer=\"stale\",result=\"hit\"}"
        )
        .is_some_and(|hits| hits >= 2.0),
        "{metrics}"
    );
    assert!(
        series_value(
            &metrics,
            "kruntimes_gateway_auth_decisions_total{outcome=\"unavailable\"}"
        )
        .is_some_and(|n| n >= 1.0),
        "{metrics}"
    );
    assert_no_token_in_logs(&stack, &[&alice, &sa_token, &forged]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_audiences_are_enforced() {
    let server = cluster().await;
    invoker_service_account(&server, "bot").await;
    // A token minted for the gateway's audience is accepted...
    let for_gateway = server
        .service_account_token_for("a", "bot", 600, "kruntimes-gateway")
        .await
        .unwrap();
    let (stack, url) = stack_as(
        &server,
        &["--token-audiences=kruntimes-gateway"],
        &for_gateway,
    )
    .await;
    assert_eq!(status(&stack, &url, Some(&for_gateway)).await, 200);
    // ...one minted for the API server is not (it is not meant for us).
    let for_api = server.service_account_token("a", "bot", 600).await.unwrap();
    let r = call(&stack, &url, Some(&for_api)).await;
    assert_eq!(r.status(), 401);
    // ...and the answer names the audience it lacks, and how to get one.
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "Unauthenticated");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("this gateway takes kruntimes-gateway")
            && message.contains("--audience kruntimes-gateway"),
        "{message}"
    );
    assert!(!message.contains(&for_api));
    assert_no_token_in_logs(&stack, &[&for_gateway, &for_api]).await;
}
