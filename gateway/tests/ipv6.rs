//! IPv6 owner addresses end to end: a stack whose runtimed instances listen
//! on `::1` (`krt up --runtimed-ip ::1`) registers, routes and answers
//! function invocations and session operations through the gateway, one hop
//! to `[::1]:PORT`.

// Test helpers panic on failure: that is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use kruntimes_testkit::prelude::*;
use serde_json::json;

fn sandbox(name: &str) -> (String, String) {
    (
        format!("{name}.yaml"),
        format!(
            "apiVersion: kruntimes.io/v1alpha1\nkind: Run\nmetadata:\n  name: {name}\n  namespace: default\nspec:\n  runtime: bash\n  mode:\n    session: {{}}\n"
        ),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_on_ipv6_owners_are_routed_and_answer() {
    if std::net::TcpListener::bind("[::1]:0").is_err() {
        panic!("this machine has no IPv6 loopback (::1); the test needs it");
    }
    let stack = start(
        2,
        vec![python_run("fn"), bash_run("sh"), sandbox("sbx")],
        &["--runtimed-ip", "::1"],
    );
    let processes = stack.processes().unwrap();
    for name in ["runtimed-0", "runtimed-1"] {
        let address = processes[name]["address"].as_str().unwrap();
        assert!(address.starts_with("[::1]:"), "{name} at {address}");
    }
    for (name, body, want) in [
        ("fn", r#"{"name": "v6"}"#, "hello v6"),
        ("sh", r#"{"name": "v6"}"#, "hello v6"),
    ] {
        stack.wait_phase(name, "Ready").await.unwrap();
        let r = stack.invoke(name, body).await.unwrap();
        assert_eq!(r.status(), 200, "{name}");
        assert_eq!(json(r).await["message"], want, "{name}");
    }
    let run = stack.wait_phase("sbx", "Ready").await.unwrap();
    let endpoint = run["endpoint"].as_str().unwrap();
    let r = stack
        .http
        .post(format!("{endpoint}/operations:execute"))
        .bearer_auth(&stack.token)
        .json(&json!({"command": {"shell": "echo over v6"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let out = json(r).await;
    assert_eq!(out["stdout"], "over v6\n", "{out}");
    let runs = stack.runs().unwrap();
    assert!(runs.iter().all(|r| r["phase"] == "Ready"), "{runs:?}");
}
