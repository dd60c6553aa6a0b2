//! The Run CRD's validation, enforced by a real kube-apiserver: exactly one
//! mode, immutable execution inputs, monotonic termination, bounded status.

// Test helpers panic on failure: that is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use kruntimes_api::Run;
use kruntimes_kubetest::ApiServer;
use kube::Resource as _;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

fn run(name: &str, mode: Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "kruntimes.io/v1alpha1",
        "kind": "Run",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "runtime": "python",
            "source": {"inlinePath": "main.py", "inline": "def invoke(r):\n    return r\n"},
            "mode": mode,
        }
    }))
    .unwrap()
}

fn api(client: kube::Client) -> Api<DynamicObject> {
    Api::namespaced_with(client, "default", &ApiResource::erase::<Run>(&()))
}

async fn rejected(api: &Api<DynamicObject>, obj: &DynamicObject) -> String {
    match api.create(&PostParams::default(), obj).await {
        Err(kube::Error::Api(e)) => {
            assert_eq!(e.code, 422, "{e:?}");
            e.message
        }
        other => panic!("the API server accepted an invalid Run: {other:?}"),
    }
}

async fn patch_rejected(api: &Api<DynamicObject>, name: &str, patch: Value) -> String {
    match api
        .patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
    {
        Err(kube::Error::Api(e)) => {
            assert_eq!(e.code, 422, "{e:?}");
            e.message
        }
        other => panic!("the API server accepted an invalid change: {other:?}"),
    }
}

#[tokio::test]
async fn the_api_server_enforces_the_run_schema() {
    let server = ApiServer::start().await.expect("start the test API server");
    let runs = api(server.client().await.unwrap());
    assert_eq!(Run::group(&()), "kruntimes.io");

    // No mode, two modes, an empty mode.
    let mut no_mode = run("no-mode", json!({}));
    no_mode.data["spec"].as_object_mut().unwrap().remove("mode");
    let msg = rejected(&runs, &no_mode).await;
    assert!(msg.contains("spec.mode"), "{msg}");
    let msg = rejected(&runs, &run("empty-mode", json!({}))).await;
    assert!(
        msg.contains("exactly one of task, function, session"),
        "{msg}"
    );
    let two = run(
        "two-modes",
        json!({"function": {"handler": "main.invoke"}, "session": {}}),
    );
    let msg = rejected(&runs, &two).await;
    assert!(
        msg.contains("exactly one of task, function, session"),
        "{msg}"
    );
    // Out-of-bounds fields.
    let mut long_runtime = run("long", json!({"function": {"handler": "main.invoke"}}));
    long_runtime.data["spec"]["runtime"] = json!("x".repeat(64));
    rejected(&runs, &long_runtime).await;
    // A task's entrypoint and args are bounded.
    let msg = rejected(
        &runs,
        &run(
            "long-entrypoint",
            json!({"task": {"entrypoint": "x".repeat(256)}}),
        ),
    )
    .await;
    assert!(msg.contains("entrypoint"), "{msg}");
    let many = vec!["a"; 257];
    let msg = rejected(&runs, &run("many-args", json!({"task": {"args": many}}))).await;
    assert!(msg.contains("args"), "{msg}");

    // One mode is accepted.
    let good = run("good", json!({"function": {"handler": "main.invoke"}}));
    runs.create(&PostParams::default(), &good).await.unwrap();
    let task = run(
        "task",
        json!({"task": {"entrypoint": "main.py", "args": ["-v"]}}),
    );
    runs.create(&PostParams::default(), &task).await.unwrap();

    // Execution inputs are immutable.
    let msg = patch_rejected(&runs, "good", json!({"spec": {"runtime": "bash"}})).await;
    assert!(msg.contains("spec.runtime is immutable"), "{msg}");
    let msg = patch_rejected(
        &runs,
        "good",
        json!({"spec": {"source": {"inline": "import os\n"}}}),
    )
    .await;
    assert!(msg.contains("spec.source is immutable"), "{msg}");
    let msg = patch_rejected(
        &runs,
        "good",
        json!({"spec": {"mode": {"function": {"handler": "main.other"}}}}),
    )
    .await;
    assert!(msg.contains("spec.mode is immutable"), "{msg}");
    let msg = patch_rejected(
        &runs,
        "good",
        json!({"spec": {"env": [{"name": "A", "value": "1"}]}}),
    )
    .await;
    assert!(msg.contains("spec.env is immutable"), "{msg}");

    // Termination is monotonic: set Drain, move to Immediate, never back.
    runs.patch(
        "good",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"termination": {"mode": "Drain"}}})),
    )
    .await
    .unwrap();
    runs.patch(
        "good",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"termination": {"mode": "Immediate"}}})),
    )
    .await
    .unwrap();
    let msg = patch_rejected(
        &runs,
        "good",
        json!({"spec": {"termination": {"mode": "Drain"}}}),
    )
    .await;
    assert!(msg.contains("spec.termination"), "{msg}");
    let msg = patch_rejected(&runs, "good", json!({"spec": {"termination": null}})).await;
    assert!(msg.contains("spec.termination"), "{msg}");
    let msg = patch_rejected(
        &runs,
        "good",
        json!({"spec": {"termination": {"mode": "Later"}}}),
    )
    .await;
    assert!(msg.contains("Unsupported value"), "{msg}");

    // The status subresource bounds what components may write.
    let status = json!({"status": {"phase": "Ready", "endpoint": {
        "protocol": "HTTPS", "url": format!("https://gw/{}", "x".repeat(2048))}}});
    match runs
        .patch_status("task", &PatchParams::default(), &Patch::Merge(status))
        .await
    {
        Err(kube::Error::Api(e)) => assert_eq!(e.code, 422, "{e:?}"),
        other => panic!("an over-long endpoint URL was accepted: {other:?}"),
    }
    let status = json!({"status": {"phase": "Dancing"}});
    assert!(
        runs.patch_status("task", &PatchParams::default(), &Patch::Merge(status))
            .await
            .is_err()
    );
    let status = json!({"status": {"phase": "Ready", "attempt": 1, "endpoint": {
        "protocol": "HTTPS", "url": "https://gw/v1/namespaces/default/runtimes/python/runs/x:invoke"}}});
    runs.patch_status("task", &PatchParams::default(), &Patch::Merge(status))
        .await
        .unwrap();
}

/// A Run of `spec` (no source unless `spec` sets one).
fn bare(name: &str, spec: Value) -> DynamicObject {
    let mut spec = spec;
    spec["runtime"] = json!("bash");
    serde_json::from_value(json!({
        "apiVersion": "kruntimes.io/v1alpha1",
        "kind": "Run",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    }))
    .unwrap()
}

#[tokio::test]
async fn the_api_server_refuses_a_task_that_cannot_run_as_the_embedded_store_does() {
    let server = ApiServer::start().await.expect("start the test API server");
    let runs = api(server.client().await.unwrap());
    let function = json!({"function": {"handler": "main.invoke"}});
    for (name, spec, why) in [
        (
            "nothing",
            json!({"mode": {"task": {}}}),
            "a task needs something to run",
        ),
        (
            "escape",
            json!({"mode": {"task": {"entrypoint": "a/../../run.sh"}}}),
            "spec.mode.task.entrypoint must name a file inside the working directory",
        ),
        (
            "absolute",
            json!({"mode": {"task": {"entrypoint": "/bin/sh"}}}),
            "spec.mode.task.entrypoint must name a file inside the working directory",
        ),
        (
            "dot",
            json!({"mode": {"task": {"entrypoint": "./"}}}),
            "spec.mode.task.entrypoint must name a file inside the working directory",
        ),
        (
            "codes-of-a-function",
            json!({"mode": function, "retryPolicy": {"onExitCodes": [3]}}),
            "spec.retryPolicy.onExitCodes applies to task Runs only",
        ),
        (
            "ttl-of-a-function",
            json!({"mode": function, "ttlSecondsAfterFinished": 60}),
            "spec.ttlSecondsAfterFinished applies to task Runs only",
        ),
        (
            "zero",
            json!({"mode": {"task": {"args": ["true"]}}, "retryPolicy": {"onExitCodes": [0]}}),
            "spec.retryPolicy.onExitCodes",
        ),
        (
            "long-ttl",
            json!({"mode": {"task": {"args": ["true"]}}, "ttlSecondsAfterFinished": 2_592_001}),
            "spec.ttlSecondsAfterFinished",
        ),
        (
            "many-retries",
            json!({"mode": {"task": {"args": ["true"]}}, "retryPolicy": {"maxRetries": 101}}),
            "spec.retryPolicy.maxRetries",
        ),
    ] {
        let obj = bare(name, spec);
        let msg = rejected(&runs, &obj).await;
        assert!(msg.contains(why), "{name}: {msg}");
        // The embedded store refuses it too, naming the same field.
        let run: Run = serde_json::from_value(serde_json::to_value(&obj).unwrap()).unwrap();
        let embedded = run.validate().unwrap_err();
        let field = why
            .split(' ')
            .find(|w| w.starts_with("spec."))
            .unwrap_or(why);
        assert!(embedded.contains(field), "{name}: {embedded}");
    }
    // Each way of saying what to run is accepted, with a TTL and codes.
    for (name, spec) in [
        (
            "inline",
            json!({"source": {"inline": "exit 0"}, "mode": {"task": {}}}),
        ),
        (
            "entry",
            json!({"mode": {"task": {"entrypoint": "ci/..x/run.sh", "args": ["-v"]}}}),
        ),
        (
            "commands",
            json!({"mode": {"task": {"args": ["echo hi"]}}, "ttlSecondsAfterFinished": 0, "retryPolicy": {"onExitCodes": [3, 255]}}),
        ),
    ] {
        runs.create(&PostParams::default(), &bare(name, spec))
            .await
            .unwrap();
    }
}
