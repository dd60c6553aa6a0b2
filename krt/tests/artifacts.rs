//! Artifacts end to end on `krt up`: what a task leaves in
//! `$KRUNTIME_ARTIFACTS_DIR` is uploaded by runtimed to the store (a local
//! directory by default, a real S3-compatible server — versitygw on
//! loopback — with `--artifacts s3://…`), listed in the Run's status, and
//! read back through the gateway (`krt artifacts`, byte ranges) after the
//! Run has ended; invalid directories fail the Run naming the file; the
//! store away during the export is waited for up to the export deadline;
//! the store's credentials never reach user code.

// Test helpers panic on failure: that is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use kruntimes_testkit::prelude::*;
use kruntimes_testkit::{Options, S3Server, Stack, function_run, krt_binary};
use sha2::{Digest as _, Sha256};

const WITHIN: Duration = Duration::from_secs(60);

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn sha(b: &[u8]) -> String {
    Sha256::digest(b)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `krt run` of a Bash task running `script`; its output.
fn run_task(stack: &Stack, name: &str, script: &str) -> std::process::Output {
    stack
        .krt(&[
            "run",
            "--name",
            name,
            "--runtime",
            "bash",
            "--inline",
            script,
        ])
        .unwrap()
}

/// Writes a report, a nested 3 MB file, an empty file; prints the
/// environment's variable names.
const EXPORTS: &str = r#"set -e
cd "$KRUNTIME_ARTIFACTS_DIR"
mkdir -p out/deep
printf 'hello artifacts' > report.txt
head -c 3000000 /dev/urandom > out/deep/blob.bin
: > empty
env | cut -d= -f1 | sort | tr '\n' ' '
"#;

/// The artifacts URL of Run `name`, from its status.
fn artifacts_url(stack: &Stack, name: &str) -> String {
    let run = stack.run(name).unwrap();
    format!(
        "{}/v1/namespaces/default/runtimes/bash/runs/{}/artifacts",
        stack.gateway,
        run["uid"].as_str().unwrap()
    )
}

async fn get(stack: &Stack, url: &str, range: Option<&str>) -> reqwest::Response {
    let mut req = stack.http.get(url).bearer_auth(&stack.token);
    if let Some(r) = range {
        req = req.header(reqwest::header::RANGE, r);
    }
    req.send().await.unwrap()
}

/// The checks of an exported task, whatever the store.
async fn exported_and_read_back(stack: &Stack, dir: &std::path::Path) {
    let out = run_task(stack, "exports", EXPORTS);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // The store's credentials and settings are runtimed's alone.
    let env = text(&out.stdout);
    assert!(env.contains("KRUNTIME_ARTIFACTS_DIR"), "{env}");
    assert!(!env.contains("KRUNTIMES_ARTIFACT"), "{env}");
    assert!(!env.contains("AWS_"), "{env}");

    // status.artifacts: the three files, with sizes and digests.
    let run = stack.run("exports").unwrap();
    let refs = run["artifacts"]
        .as_array()
        .expect("status.artifacts")
        .clone();
    let by_name = |n: &str| refs.iter().find(|a| a["name"] == n).cloned().unwrap();
    assert_eq!(refs.len(), 3, "{refs:?}");
    assert_eq!(by_name("report.txt")["size"], 15);
    assert_eq!(by_name("report.txt")["sha256"], sha(b"hello artifacts"));
    assert_eq!(by_name("out/deep/blob.bin")["size"], 3_000_000);
    assert_eq!(by_name("empty")["size"], 0);

    // krt artifacts list / get, after the Run has ended.
    let listed = stack
        .krt(&["artifacts", "list", "exports", "-o", "json"])
        .unwrap();
    assert!(listed.status.success(), "{}", text(&listed.stderr));
    let listed: Vec<serde_json::Value> = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(listed.len(), 3);
    let file = dir.join("blob.bin");
    let got = stack
        .krt(&[
            "artifacts",
            "get",
            "exports",
            "out/deep/blob.bin",
            "-o",
            file.to_str().unwrap(),
        ])
        .unwrap();
    assert!(got.status.success(), "{}", text(&got.stderr));
    let blob = std::fs::read(&file).unwrap();
    assert_eq!(blob.len(), 3_000_000);
    assert_eq!(sha(&blob), by_name("out/deep/blob.bin")["sha256"]);
    let stdout = stack
        .krt(&["artifacts", "get", "exports", "report.txt"])
        .unwrap();
    assert_eq!(text(&stdout.stdout), "hello artifacts");

    // Through the gateway as any HTTP client: whole, ranges, typed errors.
    let url = artifacts_url(stack, "exports");
    let whole = get(stack, &format!("{url}/out/deep/blob.bin"), None).await;
    assert_eq!(whole.status(), 200);
    assert_eq!(
        whole.headers()["x-kruntimes-artifact-sha256"],
        by_name("out/deep/blob.bin")["sha256"].as_str().unwrap()
    );
    assert_eq!(whole.bytes().await.unwrap(), blob);
    let part = get(
        stack,
        &format!("{url}/out/deep/blob.bin"),
        Some("bytes=1000-1999"),
    )
    .await;
    assert_eq!(part.status(), 206);
    assert_eq!(part.headers()["content-range"], "bytes 1000-1999/3000000");
    assert_eq!(part.bytes().await.unwrap(), &blob[1000..2000]);
    let tail = get(stack, &format!("{url}/report.txt"), Some("bytes=-9")).await;
    assert_eq!(tail.status(), 206);
    assert_eq!(tail.bytes().await.unwrap(), "artifacts");
    let past = get(stack, &format!("{url}/report.txt"), Some("bytes=15-")).await;
    assert_eq!(past.status(), 416);
    assert_eq!(past.headers()["content-range"], "bytes */15");
    let body: serde_json::Value = past.json().await.unwrap();
    assert_eq!(body["error"]["code"], "RangeNotSatisfiable");
    let empty = get(stack, &format!("{url}/empty"), None).await;
    assert_eq!(empty.status(), 200);
    assert!(empty.bytes().await.unwrap().is_empty());
    let missing = get(stack, &format!("{url}/nope.txt"), None).await;
    assert_eq!(missing.status(), 404);
    let body: serde_json::Value = missing.json().await.unwrap();
    assert_eq!(body["error"]["code"], "NotFound");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("nope.txt"),
        "{body}"
    );
    let bad = get(stack, &format!("{url}/..%2Fetc"), None).await;
    assert_eq!(bad.status(), 400);
    let anonymous = stack
        .http
        .get(format!("{url}/report.txt"))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tasks_artifacts_outlive_it_in_the_default_directory_store() {
    let stack = start(1, vec![], &[]);
    let dir = tempfile::tempdir().unwrap();
    exported_and_read_back(&stack, dir.path()).await;
    // In STATE_DIR/artifacts, under the namespace and the Run's UID.
    let uid = stack.run("exports").unwrap()["uid"]
        .as_str()
        .unwrap()
        .to_owned();
    let stored = stack
        .state_dir()
        .join("artifacts/default")
        .join(&uid)
        .join("files/report.txt");
    assert_eq!(std::fs::read(stored).unwrap(), b"hello artifacts");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_artifacts_fail_the_task_naming_the_file() {
    let stack = start(
        1,
        vec![],
        &["--runtimed-flag=--artifact-max-file-bytes=1000"],
    );
    for (name, script, file, why) in [
        (
            "symlink",
            r#"printf ok > "$KRUNTIME_ARTIFACTS_DIR/fine"; ln -s /etc/passwd "$KRUNTIME_ARTIFACTS_DIR/p""#,
            "\"p\"",
            "symbolic link",
        ),
        (
            "too-big",
            r#"head -c 1001 /dev/zero > "$KRUNTIME_ARTIFACTS_DIR/big""#,
            "\"big\"",
            "1001",
        ),
        (
            "bad-name",
            r#"printf x > "$KRUNTIME_ARTIFACTS_DIR/a b""#,
            "\"a b\"",
            "character",
        ),
    ] {
        let out = run_task(&stack, name, script);
        assert_ne!(out.status.code(), Some(0), "{name}");
        let run = stack.wait_phase(name, "Failed").await.unwrap();
        assert_eq!(run["reason"], "ArtifactInvalid", "{name}: {run}");
        let message = run["message"].as_str().unwrap();
        assert!(message.contains(file), "{name}: {message}");
        assert!(message.contains(why), "{name}: {message}");
        assert!(message.contains("exited with code 0"), "{name}: {message}");
        // Nothing of it is served.
        let listed = get(&stack, &artifacts_url(&stack, name), None).await;
        assert_eq!(listed.status(), 200);
        let body: serde_json::Value = listed.json().await.unwrap();
        assert_eq!(body["artifacts"], serde_json::json!([]), "{name}");
    }
}

async fn s3_stack(s3: &S3Server, extra: &[&str]) -> Stack {
    let mut extra_args: Vec<String> = vec![
        "--artifacts".into(),
        "s3://artifacts/e2e".into(),
        "--artifacts-endpoint".into(),
        s3.endpoint(),
    ];
    extra_args.extend(extra.iter().map(|s| s.to_string()));
    Stack::start(
        krt_binary(),
        Options {
            runtimed: 1,
            max_runtimed: None,
            runs: vec![],
            extra_args,
            env: vec![
                (
                    "KRUNTIMES_ARTIFACT_ACCESS_KEY_ID".into(),
                    s3.access_key().into(),
                ),
                (
                    "KRUNTIMES_ARTIFACT_SECRET_ACCESS_KEY".into(),
                    s3.secret_key().into(),
                ),
            ],
        },
    )
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tasks_artifacts_go_to_a_real_s3_server_and_its_keys_stay_with_runtimed() {
    let s3 = S3Server::start().await.unwrap();
    s3.create_bucket("artifacts").await.unwrap();
    let stack = s3_stack(&s3, &[]).await;
    let dir = tempfile::tempdir().unwrap();
    exported_and_read_back(&stack, dir.path()).await;
    let run = stack.run("exports").unwrap();
    let uid = run["uid"].as_str().unwrap();
    let report = run["artifacts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["name"] == "report.txt")
        .unwrap()
        .clone();
    assert_eq!(
        report["uri"],
        format!("s3://artifacts/e2e/default/{uid}/files/report.txt")
    );
    // Read back with the store's own client.
    let got = s3
        .get_object("artifacts", &format!("e2e/default/{uid}/files/report.txt"))
        .await
        .unwrap();
    assert_eq!(got, b"hello artifacts");
    // The secret is nowhere a user could read it: not in the task's
    // environment (checked above), not in any log.
    let logs = stack.all_logs();
    assert!(
        !logs.contains(s3.secret_key()),
        "a log holds the secret key"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_away_during_the_export_is_waited_for_until_the_deadline() {
    let mut s3 = S3Server::start().await.unwrap();
    s3.create_bucket("artifacts").await.unwrap();
    let stack = s3_stack(&s3, &["--runtimed-flag=--artifact-export-timeout-secs=8"]).await;
    // Away, then back within the deadline: the Run succeeds.
    s3.stop();
    stack
        .add_run(
            "late.yaml",
            "apiVersion: kruntimes.io/v1alpha1\nkind: Run\nmetadata:\n  name: late\n  namespace: default\nspec:\n  runtime: bash\n  source:\n    inline: 'printf late > \"$KRUNTIME_ARTIFACTS_DIR/late.txt\"'\n  mode:\n    task: {}\n",
        )
        .unwrap();
    // The process has ended; the Run waits for its export.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(stack.run("late").unwrap()["phase"], "Running");
    s3.restart().await.unwrap();
    let run = stack.wait_phase("late", "Succeeded").await.unwrap();
    assert_eq!(run["artifacts"][0]["name"], "late.txt", "{run}");
    // Away past the deadline: the Run fails, saying so.
    s3.stop();
    let out = run_task(&stack, "lost", r#"printf x > "$KRUNTIME_ARTIFACTS_DIR/x""#);
    assert_ne!(out.status.code(), Some(0));
    let run = tokio::time::timeout(WITHIN, stack.wait_phase("lost", "Failed"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(run["reason"], "ArtifactExportFailed", "{run}");
    assert!(
        run["message"]
            .as_str()
            .unwrap()
            .contains("could not be exported in 8 s"),
        "{run}"
    );
    // Cancelled while its export waits for the store: the export stops and
    // the Run ends as the cancellation says, without artifacts.
    let manifest = |termination: &str| {
        task_yaml(
            "cancelled",
            r#"printf x > "$KRUNTIME_ARTIFACTS_DIR/x""#,
            termination,
        )
    };
    stack.add_run("cancelled.yaml", &manifest("")).unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(stack.run("cancelled").unwrap()["phase"], "Running");
    stack
        .add_run(
            "cancelled.yaml",
            &manifest("  termination:\n    mode: Immediate\n"),
        )
        .unwrap();
    let run = stack.wait_phase("cancelled", "Cancelled").await.unwrap();
    assert!(run.get("artifacts").is_none(), "{run}");
    let deadline = tokio::time::Instant::now() + WITHIN;
    while !stack
        .all_logs()
        .contains("artifact export stopped: the run ended first")
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the export was not stopped"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // A function, the store still away: a call that leaves nothing is
    // answered at once (it never reaches the store); one that leaves files
    // is answered `InvalidOutput` once the deadline passed — its handler
    // ran, so never a 503, which says a call did not run.
    stack
        .add_run(
            "writer.yaml",
            &function_run("writer", "python", "main.invoke", "main.py", WRITER_PY, ""),
        )
        .unwrap();
    stack.wait_phase("writer", "Ready").await.unwrap();
    let plain = invoke_as(&stack, "writer", None, "{}").await;
    assert_eq!(plain.status(), 200);
    assert!(plain.headers().get("x-kruntimes-artifacts").is_none());
    let failed = invoke_as(&stack, "writer", Some("w-1"), r#"{"write": {"f": "1"}}"#).await;
    let e = expect_error(failed, 500, "InvalidOutput").await;
    let message = e["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("could not be exported in 8 s"),
        "{message}"
    );
    // Back: the next call's files go in, and nothing of the failed one.
    s3.restart().await.unwrap();
    let v: serde_json::Value = invoke_as(&stack, "writer", Some("w-2"), r#"{"write": {"g": "2"}}"#)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(v["outputs"]["found"], serde_json::json!([]), "{v}");
    assert_eq!(v["artifactRefs"][0]["name"], "invocations/w-2/g", "{v}");
    assert!(
        s3.data_dir()
            .join("artifacts/e2e/default")
            .join(stack.run("writer").unwrap()["uid"].as_str().unwrap())
            .join("files/invocations/w-2/g")
            .is_file()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drained_session_exports_its_artifacts_before_it_succeeds() {
    let stack = start(1, vec![], &[]);
    let krt = |args: &[&str]| {
        let out = stack.krt(args).unwrap();
        (out.status.code(), text(&out.stdout), text(&out.stderr))
    };
    let (code, _, err) = krt(&["session", "create", "sb"]);
    assert_eq!(code, Some(0), "{err}");
    let (code, _, err) = krt(&[
        "session",
        "exec",
        "sb",
        "--shell",
        r#"mkdir -p "$KRUNTIME_ARTIFACTS_DIR/notes" && printf 'from the agent' > "$KRUNTIME_ARTIFACTS_DIR/notes/result.md" && env | grep -c ARTIFACT_ACCESS || true"#,
    ]);
    assert_eq!(code, Some(0), "{err}");
    // Drained: exported before the workspace goes, then Succeeded.
    let (code, out, err) = krt(&["session", "close", "sb"]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert_eq!(out.trim(), "Succeeded");
    let run = stack.run("sb").unwrap();
    assert_eq!(run["artifacts"][0]["name"], "notes/result.md", "{run}");
    assert_eq!(run["artifacts"][0]["sha256"], sha(b"from the agent"));
    let (code, body, err) = krt(&["artifacts", "get", "sb", "notes/result.md"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(body, "from the agent");
    let url = format!(
        "{}/v1/namespaces/default/runtimes/bash/runs/{}/artifacts",
        stack.gateway,
        run["uid"].as_str().unwrap()
    );
    let listed: serde_json::Value = get(&stack, &url, None).await.json().await.unwrap();
    assert_eq!(listed["artifacts"].as_array().unwrap().len(), 1);

    // An invalid directory fails the drained session, naming the file.
    let (code, _, err) = krt(&["session", "create", "sb2"]);
    assert_eq!(code, Some(0), "{err}");
    let (code, _, err) = krt(&[
        "session",
        "exec",
        "sb2",
        "--shell",
        r#"ln -s /etc/passwd "$KRUNTIME_ARTIFACTS_DIR/passwd""#,
    ]);
    assert_eq!(code, Some(0), "{err}");
    let (code, out, err) = krt(&["session", "close", "sb2"]);
    assert_eq!(code, Some(1), "{out}{err}");
    let run = stack.wait_phase("sb2", "Failed").await.unwrap();
    assert_eq!(run["reason"], "ArtifactInvalid", "{run}");
    let message = run["message"].as_str().unwrap();
    assert!(
        message.starts_with("drained; artifact \"passwd\""),
        "{message}"
    );
    // Cancelled sessions export nothing.
    let (code, _, err) = krt(&["session", "create", "sb3"]);
    assert_eq!(code, Some(0), "{err}");
    let (code, _, err) = krt(&[
        "session",
        "exec",
        "sb3",
        "--shell",
        r#"printf x > "$KRUNTIME_ARTIFACTS_DIR/x""#,
    ]);
    assert_eq!(code, Some(0), "{err}");
    let (code, out, err) = krt(&["session", "close", "sb3", "--cancel"]);
    assert_eq!(code, Some(0), "{out}{err}");
    let run = stack.run("sb3").unwrap();
    assert!(run.get("artifacts").is_none(), "{run}");
}

/// Polls until `path` is gone.
async fn gone(path: &std::path::Path) -> bool {
    let deadline = tokio::time::Instant::now() + WITHIN;
    while path.exists() {
        if tokio::time::Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    true
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_and_the_sweep_delete_what_is_due_and_nothing_else() {
    let stack = start(
        1,
        vec![],
        &[
            "--artifacts-sweep-secs=1",
            "--artifacts-orphan-grace-secs=2",
            "--artifacts-retain-secs=6",
        ],
    );
    let stored = |name: &str| {
        let uid = stack.run(name).unwrap()["uid"].as_str().unwrap().to_owned();
        stack.state_dir().join("artifacts/default").join(uid)
    };
    let script = r#"printf kept > "$KRUNTIME_ARTIFACTS_DIR/a.txt""#;
    for name in ["deleted", "retained"] {
        let out = run_task(&stack, name, script);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    }
    let (deleted, retained) = (stored("deleted"), stored("retained"));
    assert!(deleted.join("manifest.json").is_file());
    // A Run deleted: its artifacts go with it (after the grace).
    let out = stack.krt(&["delete", "run", "deleted"]).unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(gone(&deleted).await, "the deleted Run's artifacts stay");
    // The other is still served (ended less than its retention ago)...
    assert!(retained.join("files/a.txt").is_file());
    let url = artifacts_url(&stack, "retained");
    assert_eq!(
        get(&stack, &format!("{url}/a.txt"), None).await.status(),
        200
    );
    // ...until its retention passes: the Run stays, its artifacts go.
    assert!(gone(&retained).await, "retention did not delete");
    assert!(stack.run("retained").is_some());
    let after = get(&stack, &format!("{url}/a.txt"), None).await;
    assert_eq!(after.status(), 404);
    let body: serde_json::Value = get(&stack, &url, None).await.json().await.unwrap();
    assert_eq!(body["artifacts"], serde_json::json!([]));
}

/// A task Run manifest running a Bash `script` with `extra` spec lines
/// (indented by two).
fn task_yaml(name: &str, script: &str, extra: &str) -> String {
    format!(
        "apiVersion: kruntimes.io/v1alpha1\nkind: Run\nmetadata:\n  name: {name}\n  namespace: default\nspec:\n  runtime: bash\n  source:\n    inline: {script:?}\n  mode:\n    task: {{}}\n{extra}"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runs_artifacts_are_another_runs_inputs_checked_and_confined() {
    let stack = start(1, vec![], &[]);
    let out = run_task(
        &stack,
        "producer",
        r#"mkdir -p "$KRUNTIME_ARTIFACTS_DIR/out"; printf '{"rows": 3}' > "$KRUNTIME_ARTIFACTS_DIR/out/data.json"; head -c 2500000 /dev/urandom > "$KRUNTIME_ARTIFACTS_DIR/blob""#,
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let refs = stack.run("producer").unwrap()["artifacts"].clone();
    let by = |n: &str| {
        refs.as_array()
            .unwrap()
            .iter()
            .find(|a| a["name"] == n)
            .cloned()
            .unwrap()
    };
    let (data, blob) = (by("out/data.json"), by("blob"));
    // Staged into the consumer's working directory before it starts,
    // digests checked.
    let inputs = format!(
        "  inputs:\n    artifacts:\n      - uri: {}\n        path: in/data.json\n        sha256: {}\n      - uri: {}\n        path: blob.bin\n",
        data["uri"], data["sha256"], blob["uri"]
    );
    stack
        .add_run(
            "consumer.yaml",
            &task_yaml(
                "consumer",
                "cat in/data.json; echo; sha256sum blob.bin | cut -c1-64",
                &inputs,
            ),
        )
        .unwrap();
    let run = stack.wait_phase("consumer", "Succeeded").await.unwrap();
    assert_eq!(
        run["task"]["stdoutTail"],
        format!("{{\"rows\": 3}}\n{}\n", blob["sha256"].as_str().unwrap()),
        "{run}"
    );
    // A session gets them before it is Ready.
    stack
        .add_run(
            "sb.yaml",
            &format!(
                "apiVersion: kruntimes.io/v1alpha1\nkind: Run\nmetadata:\n  name: sb\n  namespace: default\nspec:\n  runtime: bash\n  mode:\n    session: {{}}\n{inputs}"
            ),
        )
        .unwrap();
    stack.wait_phase("sb", "Ready").await.unwrap();
    let got = stack
        .krt(&["session", "exec", "sb", "--shell", "cat in/data.json"])
        .unwrap();
    assert_eq!(text(&got.stdout), "{\"rows\": 3}", "{}", text(&got.stderr));
    // The Pod is the session's until it is deleted.
    stack.remove_run("sb.yaml").unwrap();

    // A digest that does not match, an artifact that is not there, one of
    // another namespace: the start fails, naming the input.
    let wrong = "0".repeat(64);
    let cases = [
        (
            "wrong-digest",
            format!(
                "  inputs:\n    artifacts:\n      - uri: {}\n        path: d.json\n        sha256: {wrong}\n",
                data["uri"]
            ),
            format!(
                "its SHA-256 is {}, not {wrong}",
                data["sha256"].as_str().unwrap()
            ),
        ),
        (
            "missing",
            format!(
                "  inputs:\n    artifacts:\n      - uri: {}\n        path: d.json\n",
                data["uri"]
                    .as_str()
                    .unwrap()
                    .replace("data.json", "nope.json")
            ),
            "is not in the store".to_owned(),
        ),
        (
            "elsewhere",
            format!(
                "  inputs:\n    artifacts:\n      - uri: {}\n        path: d.json\n",
                data["uri"]
                    .as_str()
                    .unwrap()
                    .replace("/default/", "/other/")
            ),
            "is not an artifact of namespace default".to_owned(),
        ),
    ];
    for (name, inputs, why) in cases {
        stack
            .add_run(
                &format!("{name}.yaml"),
                &task_yaml(
                    name,
                    "true",
                    &format!("{inputs}  retryPolicy:\n    maxRetries: 0\n"),
                ),
            )
            .unwrap();
        let run = stack.wait_phase(name, "Failed").await.unwrap();
        assert_eq!(run["reason"], "StartFailed", "{name}: {run}");
        let message = run["message"].as_str().unwrap();
        assert!(message.contains(&why), "{name}: {message}");
        assert!(message.contains("input \"d.json\""), "{name}: {message}");
    }
    // Refused before it is placed: a path that climbs out, on a function.
    stack
        .add_run(
            "climbs.yaml",
            &task_yaml(
                "climbs",
                "true",
                &format!(
                    "  inputs:\n    artifacts:\n      - uri: {}\n        path: ../x\n",
                    data["uri"]
                ),
            ),
        )
        .unwrap();
    let run = stack.wait_phase("climbs", "Failed").await.unwrap();
    assert_eq!(run["reason"], "InvalidSpec", "{run}");
}

/// A Python function that lists what its artifacts directory holds when
/// it starts, writes the files `write` names, links `/etc/passwd` on
/// `link`, puts a link to its working directory in the directory's place on
/// `swap`, raises on `raise`, and says which variables about artifacts or
/// AWS it can see, whether its source is still there and whether the
/// directory is a real one.
const WRITER_PY: &str = r#"import os

def invoke(request):
    d = os.environ["KRUNTIME_ARTIFACTS_DIR"]
    found = sorted(os.listdir(d))
    for name, text in request.get("write", {}).items():
        path = os.path.join(d, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
    if request.get("link"):
        os.symlink("/etc/passwd", os.path.join(d, "passwd"))
    if request.get("swap"):
        os.rmdir(d)
        os.symlink(os.getcwd(), d)
    if request.get("raise"):
        raise ValueError("after writing")
    keys = sorted(k for k in os.environ if "ARTIFACT" in k or k.startswith("AWS_"))
    real = os.path.isdir(d) and not os.path.islink(d)
    return {"found": found, "keys": keys, "summary": "1 pending pod found",
            "source": os.path.exists("main.py"), "real": real}
"#;

/// A Bash function that keeps its input as an artifact.
const WRITER_SH: &str = r#"keep() {
  printf '%s' "$1" > "$KRUNTIME_ARTIFACTS_DIR/input.json"
  printf '{"ok": true}\n'
}
"#;

/// Invokes `name` with invocation id `id` (when given).
async fn invoke_as(stack: &Stack, name: &str, id: Option<&str>, body: &str) -> reqwest::Response {
    let mut req = stack
        .http
        .post(stack.endpoint(name).unwrap())
        .bearer_auth(&stack.token)
        .body(body.to_owned());
    if let Some(id) = id {
        req = req.header("x-kruntimes-invocation-id", id);
    }
    req.send().await.unwrap()
}

/// A call of `writer` that writes nothing: it found its directory empty.
/// Its answer.
async fn starts_clean(stack: &Stack) -> serde_json::Value {
    let v: serde_json::Value = invoke_as(stack, "writer", None, "{}")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(v["found"], serde_json::json!([]), "{v}");
    v
}

/// The artifacts URL of function Run `name`.
fn function_artifacts_url(stack: &Stack, name: &str, runtime: &str) -> String {
    let run = stack.run(name).unwrap();
    format!(
        "{}/v1/namespaces/default/runtimes/{runtime}/runs/{}/artifacts",
        stack.gateway,
        run["uid"].as_str().unwrap()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invocations_artifacts_come_back_with_its_answer() {
    let runs = vec![
        (
            "writer.yaml".to_owned(),
            function_run(
                "writer",
                "python",
                "main.invoke",
                "main.py",
                WRITER_PY,
                "      invocationTimeoutSeconds: 3\n",
            ),
        ),
        (
            "keeper.yaml".to_owned(),
            function_run("keeper", "bash", "keep.keep", "keep.sh", WRITER_SH, ""),
        ),
    ];
    let stack = start(2, runs, &[]);
    stack.wait_phase("writer", "Ready").await.unwrap();
    stack.wait_phase("keeper", "Ready").await.unwrap();

    // Files written: the envelope, marked by its header, refs named in the
    // Run under the invocation's id, uploaded before the answer.
    let diagnosis = r#"{"cause": "insufficient cpu"}"#;
    let body = serde_json::json!({"write": {"diagnosis.json": diagnosis, "logs/a.txt": "a"}});
    let resp = invoke_as(&stack, "writer", Some("order-42"), &body.to_string()).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["x-kruntimes-artifacts"], "2");
    let v: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(v["outputs"]["summary"], "1 pending pod found", "{v}");
    assert_eq!(v["outputs"]["found"], serde_json::json!([]), "{v}");
    // The store's settings and credentials stay runtimed's.
    assert_eq!(
        v["outputs"]["keys"],
        serde_json::json!(["KRUNTIME_ARTIFACTS_DIR"]),
        "{v}"
    );
    let refs = v["artifactRefs"].as_array().unwrap();
    let names: Vec<&str> = refs.iter().map(|r| r["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "invocations/order-42/diagnosis.json",
            "invocations/order-42/logs/a.txt"
        ]
    );
    assert_eq!(refs[0]["sha256"], sha(diagnosis.as_bytes()));
    assert_eq!(refs[0]["size"], diagnosis.len());
    assert!(
        refs[0]["uri"]
            .as_str()
            .unwrap()
            .ends_with("/files/invocations/order-42/diagnosis.json"),
        "{v}"
    );
    // Nothing about invocations in the Run's status.
    assert!(stack.run("writer").unwrap().get("artifacts").is_none());

    // Read back through the gateway, ranges too, and with krt.
    let url = function_artifacts_url(&stack, "writer", "python");
    let got = get(&stack, &format!("{url}/{}", names[0]), None).await;
    assert_eq!(got.status(), 200);
    assert_eq!(got.text().await.unwrap(), diagnosis);
    let part = get(&stack, &format!("{url}/{}", names[0]), Some("bytes=2-6")).await;
    assert_eq!(part.status(), 206);
    assert_eq!(part.text().await.unwrap(), &diagnosis[2..=6]);
    let out = stack
        .krt(&["artifacts", "get", "writer", names[1]])
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(out.stdout, b"a");

    // Nothing written: the handler's value as it is, and the directory was
    // emptied for it.
    let resp = invoke_as(&stack, "writer", None, "{}").await;
    assert_eq!(resp.status(), 200);
    assert!(resp.headers().get("x-kruntimes-artifacts").is_none());
    let v: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(v["found"], serde_json::json!([]), "{v}");
    assert!(v.get("artifactRefs").is_none(), "{v}");

    // A handler that raised after writing: its error, and what it wrote is
    // gone before the next call.
    let raised = invoke_as(
        &stack,
        "writer",
        Some("r-1"),
        r#"{"write": {"x": "1"}, "raise": 1}"#,
    )
    .await;
    expect_error(raised, 500, "FunctionError").await;
    starts_clean(&stack).await;
    assert_eq!(
        get(&stack, &format!("{url}/invocations/r-1/x"), None)
            .await
            .status(),
        404
    );

    // An invalid file: the call fails naming it, and the next starts clean.
    let linked = invoke_as(
        &stack,
        "writer",
        Some("l-1"),
        r#"{"write": {"ok": "1"}, "link": true}"#,
    )
    .await;
    let e = expect_error(linked, 500, "InvalidOutput").await;
    let message = e["error"]["message"].as_str().unwrap();
    assert!(message.contains("\"passwd\""), "{message}");
    assert!(message.contains("symbolic link"), "{message}");
    starts_clean(&stack).await;

    // The directory swapped for a link to the working directory: not
    // followed — not exported, not emptied through — and made again, real
    // and empty, for the next call, with the source beside it intact.
    let swapped = invoke_as(&stack, "writer", Some("s-1"), r#"{"swap": true}"#).await;
    expect_error(swapped, 500, "InvalidOutput").await;
    let v = starts_clean(&stack).await;
    assert_eq!(v["real"], true, "{v}");
    assert_eq!(v["source"], true, "{v}");

    // An id that is no name segment is hashed; the same id again replaces
    // only that invocation's files.
    let v: serde_json::Value =
        invoke_as(&stack, "writer", Some("a/b:c"), r#"{"write": {"f": "1"}}"#)
            .await
            .json()
            .await
            .unwrap();
    let name = v["artifactRefs"][0]["name"].as_str().unwrap().to_owned();
    let seg = name.split('/').nth(1).unwrap();
    assert_eq!(seg.len(), 32, "{name}");
    assert!(seg.bytes().all(|b| b.is_ascii_hexdigit()), "{name}");
    assert_eq!(
        get(&stack, &format!("{url}/{name}"), None).await.status(),
        200
    );
    let again = invoke_as(
        &stack,
        "writer",
        Some("order-42"),
        r#"{"write": {"other": "2"}}"#,
    )
    .await;
    assert_eq!(again.headers()["x-kruntimes-artifacts"], "1");
    assert_eq!(
        get(&stack, &format!("{url}/{}", names[0]), None)
            .await
            .status(),
        404,
        "the earlier call of that id is replaced"
    );
    assert_eq!(
        get(&stack, &format!("{url}/{name}"), None).await.status(),
        200
    );

    // A Bash function: the same contract.
    let resp = invoke_as(&stack, "keeper", Some("b-1"), r#"{"n": 1}"#).await;
    assert_eq!(resp.status(), 200);
    let v: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(v["outputs"], serde_json::json!({"ok": true}), "{v}");
    assert_eq!(v["artifactRefs"][0]["name"], "invocations/b-1/input.json");
    let url = function_artifacts_url(&stack, "keeper", "bash");
    let got = get(&stack, &format!("{url}/invocations/b-1/input.json"), None).await;
    assert_eq!(got.text().await.unwrap(), r#"{"n": 1}"#);
}
