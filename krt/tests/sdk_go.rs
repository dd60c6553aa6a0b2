//! Runs the Go SDK's own tests (`go test ./...` in `sdk/go`): its unit
//! tests and its live suite, against a `krt up` stack and against the API
//! server harness (see `sdk/mod.rs` for what each target holds). Needs `go`
//! on PATH (`.ci/run` checks it); modules come from the default GOMODCACHE.
//!
//! The only skips allowed are, against `krt up`, the tests that need the
//! API server.

// Test helpers panic on failure: that is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod sdk;

use std::process::Command;

use sdk::Target;

fn go_test(target: &Target) -> String {
    let out = Command::new("go")
        .args(["test", "-count=1", "-v", "./..."])
        .current_dir(kruntimes_testkit::checkout().join("sdk/go"))
        .envs(target.env.iter().map(|(k, v)| (k, v)))
        .output()
        .expect("run go test (install Go)");
    let stdout = sdk::passed("go test", &out, Some(target));
    assert!(stdout.contains("ok  \tkruntimes.io/sdk"), "{stdout}");
    let kubernetes = target
        .env
        .iter()
        .any(|(k, v)| k == "KRT_TEST_MODE" && v == "kubernetes");
    // `go test -v` prints a skipped test's reason on the line before its verdict.
    let lines: Vec<&str> = stdout.lines().collect();
    let mut passed = 0;
    for (i, line) in lines.iter().enumerate() {
        let verdict = line.trim_start();
        if verdict.starts_with("--- PASS: TestLive") {
            passed += 1;
        }
        if !verdict.starts_with("--- SKIP:") {
            continue;
        }
        let reason = lines[..i]
            .iter()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or(&"");
        let allowed = !kubernetes && reason.contains("kubernetes only");
        assert!(allowed, "unexpected skip: {line} ({reason})\n{stdout}");
    }
    assert!(passed > 0, "no live test passed:\n{stdout}");
    stdout
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn go_sdk_passes_against_krt_up() {
    let target = Target::embedded().await;
    go_test(&target);
    target.assert_no_token_in_logs().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn go_sdk_passes_against_the_api_server() {
    let target = Target::kubernetes().await;
    let out = go_test(&target);
    assert!(
        out.contains("--- PASS: TestLiveADeletedRoleBindingIsRefusedWithinTheAllowedTTL"),
        "{out}"
    );
    target.assert_no_token_in_logs().await;
}
