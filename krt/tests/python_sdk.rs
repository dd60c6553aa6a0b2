//! Runs the Python SDK's pytest suite against live `krt up` stacks (the
//! suite starts them with this workspace's `krt`). Python, httpx and pytest
//! must be installed (`.ci/run` installs them); a missing one fails the test.

use std::process::Command;

#[test]
fn python_sdk_suite_passes_against_a_live_stack() {
    let sdk = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../sdk/python");
    let out = Command::new("python3")
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"])
        .current_dir(&sdk)
        .env("KRT_BIN", env!("CARGO_BIN_EXE_krt"))
        .env("PYTHONPATH", sdk.join("src"))
        .env(
            "KRT_GATEWAY_PORT",
            kruntimes_testkit::free_port().to_string(),
        )
        .output()
        .expect("run python3 -m pytest (install httpx and pytest)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "pytest failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("passed"), "pytest ran no test:\n{stdout}");
}
