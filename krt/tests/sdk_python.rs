//! Runs the Python SDK's own pytest suites (`sdk/python/tests`): the unit
//! suite, then the live suite against a `krt up` stack and against the API
//! server harness (see `sdk/mod.rs` for what each target holds).
//!
//! The interpreter is `KRT_SDK_PYTHON` — `.ci/run` points it at a fresh
//! virtual environment with `pip install ./sdk/python[test]` — else
//! `python3` with `sdk/python/src` on `PYTHONPATH` (httpx, PyYAML and pytest
//! installed). No test may be skipped.

// Test helpers panic on failure: that is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod sdk;

use std::path::PathBuf;
use std::process::Command;

use sdk::Target;

fn sdk_dir() -> PathBuf {
    kruntimes_testkit::checkout().join("sdk/python")
}

fn pytest(args: &[&str], target: Option<&Target>, extra: &[(String, String)]) -> String {
    let sdk = sdk_dir();
    let mut cmd = match std::env::var("KRT_SDK_PYTHON") {
        Ok(python) if !python.is_empty() => Command::new(python),
        _ => {
            let mut c = Command::new("python3");
            c.env("PYTHONPATH", sdk.join("src"));
            c
        }
    };
    cmd.args(["-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider"])
        .args(args)
        .current_dir(&sdk);
    for (k, v) in target
        .map(|t| t.env.as_slice())
        .unwrap_or_default()
        .iter()
        .chain(extra)
    {
        cmd.env(k, v);
    }
    let out = cmd
        .output()
        .expect("run python -m pytest (set KRT_SDK_PYTHON, or install httpx, PyYAML and pytest)");
    let stdout = sdk::passed("pytest", &out, target);
    let last = stdout
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    assert!(last.contains(" passed"), "pytest ran no test:\n{stdout}");
    if let Some(line) = stdout.lines().find(|l| l.starts_with("SKIPPED")) {
        panic!("unexpected skip: {line}\n{stdout}");
    }
    stdout
}

#[test]
fn python_sdk_unit_suite_passes() {
    let tls = tempfile::tempdir().unwrap();
    sdk::tls_fixture(tls.path());
    let out = pytest(
        &["tests/unit"],
        None,
        &[("KRT_TEST_TLS_DIR".into(), tls.path().display().to_string())],
    );
    assert!(!out.contains("SKIPPED"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_passes_against_krt_up() {
    let target = Target::embedded().await;
    pytest(&["-m", "not kubernetes", "tests/live"], Some(&target), &[]);
    target.assert_no_token_in_logs().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_passes_against_the_api_server() {
    let target = Target::kubernetes().await;
    let out = pytest(&["tests/live"], Some(&target), &[]);
    assert!(out.contains("passed"), "{out}");
    target.assert_no_token_in_logs().await;
}
