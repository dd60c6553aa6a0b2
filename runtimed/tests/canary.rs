//! Payloads never reach the stack's logs: a canary sent to a Python
//! handler that prints it and raises with it, and to a Bash handler that
//! writes it to stderr, is found in no file of `STATE_DIR/logs/` — only in
//! each Run's own bounded log, which `krt logs` shows its owner.

// Test helpers panic on failure: that is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use kruntimes_testkit::function_run;
use kruntimes_testkit::prelude::*;

const LOUD_PY: &str = r#"import sys

def invoke(r):
    print("handler saw", r["canary"])
    print("stderr saw", r["canary"], file=sys.stderr)
    if r.get("raise"):
        raise ValueError("bad " + r["canary"])
    return {"ok": True}
"#;

const LOUD_SH: &str = r#"loud() {
  echo "bash saw $1" >&2
  echo '{"ok": true}'
}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canary_payload_reaches_no_log_of_the_stack() {
    let stack = start(
        1,
        vec![
            (
                "py.yaml".into(),
                function_run("py", "python", "main.invoke", "main.py", LOUD_PY, ""),
            ),
            (
                "sh.yaml".into(),
                function_run("sh", "bash", "loud.loud", "loud.sh", LOUD_SH, ""),
            ),
        ],
        &[],
    );
    let py = stack.wait_phase("py", "Ready").await.unwrap();
    stack.wait_phase("sh", "Ready").await.unwrap();
    let canary = "canary-7f3a9c1e-payload";
    let body = format!(r#"{{"canary": "{canary}"}}"#);
    assert_eq!(stack.invoke("py", &body).await.unwrap().status(), 200);
    let raised = stack
        .invoke("py", &format!(r#"{{"canary": "{canary}", "raise": true}}"#))
        .await
        .unwrap();
    expect_error(raised, 500, "FunctionError").await;
    assert_eq!(stack.invoke("sh", &body).await.unwrap().status(), 200);

    // The Run's own log has it (the traceback included)...
    let uid = py["uid"].as_str().unwrap();
    let pod = py["assignedPod"].as_str().unwrap();
    let run_log = stack
        .state_dir()
        .join("work")
        .join(pod)
        .join(".logs")
        .join(format!("{uid}.log"));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let text = std::fs::read_to_string(&run_log).unwrap_or_default();
        if text.contains("Traceback") && text.contains(&format!("bad {canary}")) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no traceback in {}: {text}",
            run_log.display()
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    // ...and krt logs shows it to the Run's owner.
    let out = stack.krt(&["logs", "py"]).unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains(canary));

    // No log of the stack has it.
    let all = stack.settled_logs().await;
    for entry in std::fs::read_dir(stack.state_dir().join("logs")).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            !text.contains(canary),
            "the canary is in {}",
            path.display()
        );
    }
    assert!(!all.contains(canary), "the canary is in krt up's output");
}
