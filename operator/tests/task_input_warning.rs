//! The admission policy that warns about a task's moot fields
//! (`charts/kruntimes/files/run-task-input-policy.yaml`), on a real
//! kube-apiserver: a task Run with `spec.source.inline` and `entrypoint` or
//! `args` is created, with a warning in `krt apply`'s words; any other Run
//! is created without one.

// Test helpers panic on failure: that is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use kruntimes_api::Run;
use kruntimes_kubetest::ApiServer;
use serde_json::{Value, json};

/// Creates the Run `spec` names; the API server's status and its warnings.
async fn create(client: &kube::Client, name: &str, spec: Value) -> (u16, Vec<String>) {
    let body = json!({
        "apiVersion": "kruntimes.io/v1alpha1",
        "kind": "Run",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    });
    let request = http::Request::post("/apis/kruntimes.io/v1alpha1/namespaces/default/runs")
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&body).unwrap().into())
        .unwrap();
    let response = client.send(request).await.unwrap();
    let warnings = response
        .headers()
        .get_all("warning")
        .iter()
        .map(|v| v.to_str().unwrap().to_owned())
        .collect();
    (response.status().as_u16(), warnings)
}

/// What `krt apply` prints for the same Run.
fn krt_apply_warnings(spec: &Value) -> Vec<String> {
    let run: Run = serde_json::from_value(json!({
        "apiVersion": "kruntimes.io/v1alpha1",
        "kind": "Run",
        "metadata": {"name": "x", "namespace": "default"},
        "spec": spec,
    }))
    .unwrap();
    run.warnings()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tasks_moot_fields_are_warned_about_in_krt_applys_words() {
    let server = ApiServer::start().await.unwrap();
    let client = server.client().await.unwrap();
    server
        .apply_admission_policy_file(
            &kruntimes_testkit::checkout()
                .join("charts/kruntimes/files/run-task-input-policy.yaml"),
        )
        .await
        .unwrap();
    let task = |task: Value| json!({"runtime": "bash", "source": {"inline": "echo hi"}, "mode": {"task": task}});
    // The policy takes effect once the API server has loaded it.
    let deadline = Instant::now() + Duration::from_secs(60);
    for probe in 0.. {
        let (_, warnings) = create(
            &client,
            &format!("probe-{probe}"),
            task(json!({"args": ["a"]})),
        )
        .await;
        if !warnings.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "the policy never took effect");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for (name, spec) in [
        (
            "both",
            task(json!({"entrypoint": "run.sh", "args": ["a", "b"]})),
        ),
        ("entrypoint", task(json!({"entrypoint": "run.sh"}))),
        ("args", task(json!({"args": ["a"]}))),
    ] {
        let want = krt_apply_warnings(&spec);
        assert_eq!(want.len(), 1, "{name}");
        let (status, warnings) = create(&client, name, spec).await;
        assert_eq!(status, 201, "{name}: a warning never refuses");
        assert_eq!(warnings.len(), 1, "{name}: {warnings:?}");
        // `299 - "Validation failed for … : text"`, the text as krt apply
        // prints it.
        assert!(
            warnings[0].starts_with("299 ") && warnings[0].ends_with(&format!(": {}\"", want[0])),
            "{name}: {:?} is not {:?}",
            warnings[0],
            want[0]
        );
    }
    // Nothing moot: no warning.
    for (name, spec) in [
        ("inline", task(json!({}))),
        (
            "entry",
            json!({"runtime": "bash", "mode": {"task": {"entrypoint": "run.sh", "args": ["a"]}}}),
        ),
        (
            "commands",
            json!({"runtime": "bash", "mode": {"task": {"args": ["echo hi"]}}}),
        ),
        (
            "function",
            json!({"runtime": "python", "source": {"inline": "x"}, "mode": {"function": {"handler": "main.invoke"}}}),
        ),
    ] {
        assert!(krt_apply_warnings(&spec).is_empty(), "{name}");
        let (status, warnings) = create(&client, name, spec).await;
        assert_eq!((status, warnings), (201, vec![]), "{name}");
    }
}
