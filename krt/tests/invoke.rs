//! Function invokes end to end: real `krt up`, real TLS, real Python and Bash.

use std::collections::BTreeSet;

use kruntimes_testkit::prelude::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_and_bash_are_served_in_one_hop_by_their_owners_on_both_instances() {
    let stack = start(
        2,
        vec![
            python_run("py-a"),
            python_run("py-b"),
            bash_run("sh-a"),
            bash_run("sh-b"),
        ],
        &[],
    );
    let mut served_by = BTreeSet::new();
    for name in ["py-a", "py-b", "sh-a", "sh-b"] {
        let run = stack.wait_phase(name, "Ready").await.unwrap();
        let owner = run["assignedPod"].as_str().unwrap().to_owned();
        let resp = stack.invoke(name, r#"{"name": "X"}"#).await.unwrap();
        assert_eq!(resp.status(), 200);
        let by = resp.headers()["x-kruntimes-served-by"]
            .to_str()
            .unwrap()
            .to_owned();
        assert_eq!(by, owner, "{name} is served by its owner in one hop");
        assert!(resp.headers().contains_key("x-kruntimes-invocation-id"));
        let body = json(resp).await;
        assert!(
            body["message"].as_str().unwrap().contains("hello X"),
            "{body}"
        );
        served_by.insert(by);
    }
    assert_eq!(
        served_by.len(),
        2,
        "runs are spread over both runtimed instances"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_invocations_reuse_the_warm_python_worker() {
    let stack = start(1, vec![python_run("warm")], &[]);
    stack.wait_phase("warm", "Ready").await.unwrap();
    let mut pids = BTreeSet::new();
    for i in 0..20 {
        let resp = stack
            .invoke("warm", &format!(r#"{{"name": "n{i}"}}"#))
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        let body = json(resp).await;
        assert_eq!(body["message"], format!("hello n{i}"));
        pids.insert(body["pid"].as_u64().unwrap());
    }
    assert_eq!(
        pids.len(),
        1,
        "one persistent worker serves every invocation"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invocation_id_is_echoed_or_generated() {
    let stack = start(1, vec![python_run("ids")], &[]);
    stack.wait_phase("ids", "Ready").await.unwrap();
    let url = stack.endpoint("ids").unwrap();
    let resp = stack
        .http
        .post(&url)
        .bearer_auth(&stack.token)
        .header("x-kruntimes-invocation-id", "my-call-42")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["x-kruntimes-invocation-id"], "my-call-42");
    let resp = stack
        .http
        .post(&url)
        .bearer_auth(&stack.token)
        .body("{}")
        .send()
        .await
        .unwrap();
    let generated = resp.headers()["x-kruntimes-invocation-id"]
        .to_str()
        .unwrap()
        .to_owned();
    assert_eq!(generated.len(), 36, "a UUID is generated: {generated}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn krt_cli_lists_runs_and_invokes_with_typed_failures() {
    let stack = start(1, vec![python_run("cli"), bash_run("cli-sh")], &[]);
    stack.wait_phase("cli", "Ready").await.unwrap();
    stack.wait_phase("cli-sh", "Ready").await.unwrap();
    let out = stack.krt(&["runs", "-o", "json"]).unwrap();
    assert!(out.status.success());
    let runs: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: BTreeSet<_> = runs
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        names,
        BTreeSet::from(["cli".to_owned(), "cli-sh".to_owned()])
    );
    for r in runs.as_array().unwrap() {
        for field in [
            "namespace",
            "runtime",
            "uid",
            "mode",
            "phase",
            "assignedPod",
            "endpoint",
        ] {
            assert!(!r[field].is_null(), "krt runs shows {field}: {r}");
        }
    }
    let table = stack.krt(&["runs"]).unwrap();
    assert!(String::from_utf8_lossy(&table.stdout).contains("Ready"));

    let ok = stack
        .krt(&["invoke", "cli", "--data", r#"{"name": "CLI"}"#])
        .unwrap();
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert!(String::from_utf8_lossy(&ok.stdout).contains("hello CLI"));
    let sh = stack
        .krt(&[
            "invoke",
            "cli-sh",
            "-n",
            "default",
            "--data",
            r#"{"name": "SH"}"#,
        ])
        .unwrap();
    assert!(String::from_utf8_lossy(&sh.stdout).contains("hello SH"));

    let failed = stack
        .krt(&["invoke", "cli", "--data", r#"{"raise": "boom"}"#])
        .unwrap();
    assert!(!failed.status.success());
    let err = String::from_utf8_lossy(&failed.stderr);
    assert!(
        err.contains("500 FunctionError") && err.contains("ValueError: bad boom"),
        "{err}"
    );
    let missing = stack.krt(&["invoke", "nope"]).unwrap();
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("not found"));
}
