//! What user code can see of `krt up`, end to end through the gateway: from
//! a session command and from a Python function, runtimed's environment and
//! memory are out of reach, its command line names nothing of the stack,
//! the state directory (client.json with the admin token, every key) cannot
//! be read, no readable process entry holds the token, and the code runs
//! with no capabilities and `no_new_privs` — while ordinary work (files in
//! the workspace, a temporary file, a Python interpreter) still works.

// Test helpers panic on failure: that is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use base64::Engine as _;
use kruntimes_testkit::prelude::*;
use kruntimes_testkit::{Stack, function_run};
use serde_json::{Value, json};

const PROBE_PY: &str = r#"import os

def invoke(r):
    out = {}
    for path in r["paths"]:
        try:
            with open(path, "rb") as f:
                f.read(1)
            out[path] = "read"
        except OSError as e:
            out[path] = type(e).__name__
    return out
"#;

fn session(name: &str) -> (String, String) {
    (
        format!("{name}.yaml"),
        format!(
            "apiVersion: kruntimes.io/v1alpha1\nkind: Run\nmetadata:\n  name: {name}\n  namespace: default\nspec:\n  runtime: bash\n  mode:\n    session:\n      operationTimeout: 120\n"
        ),
    )
}

async fn shell(stack: &Stack, endpoint: &str, script: &str) -> Value {
    let r = stack
        .http
        .post(format!("{endpoint}/operations:execute"))
        .bearer_auth(&stack.token)
        .json(&json!({"command": {"shell": script}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    json(r).await
}

fn pid_of(stack: &Stack, name: &str) -> u32 {
    stack.processes().unwrap()[name]["pid"].as_u64().unwrap() as u32
}

/// The parent pid of `pid` (field 4 of /proc/PID/stat).
fn parent_of(pid: u32) -> u32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    after.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_code_reaches_no_secret_of_the_stack() {
    let stack = start(
        2,
        vec![
            session("probe"),
            (
                "fn.yaml".into(),
                function_run("fn", "python", "main.invoke", "main.py", PROBE_PY, ""),
            ),
        ],
        &[],
    );
    let run = stack.wait_phase("probe", "Ready").await.unwrap();
    let fn_run = stack.wait_phase("fn", "Ready").await.unwrap();
    let endpoint = run["endpoint"].as_str().unwrap().to_owned();
    let state = stack.state_dir();
    let runtimed = pid_of(&stack, run["assignedPod"].as_str().unwrap());
    let gateway = pid_of(&stack, "gateway");
    let up = parent_of(runtimed);
    let secret = &stack.token[stack.token.len() - 24..];

    // The other processes' environments and memory: refused.
    for pid in [runtimed, gateway, up] {
        for file in ["environ", "mem", "maps"] {
            let out = shell(
                &stack,
                &endpoint,
                &format!("head -c 64 /proc/{pid}/{file} | wc -c"),
            )
            .await;
            assert_eq!(
                out["stdout"], "0\n",
                "/proc/{pid}/{file} was readable: {out}"
            );
            assert!(
                out["stderr"]
                    .as_str()
                    .unwrap()
                    .contains("Permission denied"),
                "/proc/{pid}/{file}: {out}"
            );
        }
    }

    // runtimed's command line is readable (as for any process) but names
    // nothing of the stack: its settings travel in its environment.
    let cmdline = shell(
        &stack,
        &endpoint,
        &format!("tr '\\0' ' ' < /proc/{runtimed}/cmdline"),
    )
    .await;
    let cmdline = cmdline["stdout"].as_str().unwrap();
    assert!(cmdline.contains("runtimed"), "{cmdline:?}");
    for needle in [state.to_str().unwrap(), "pki", ".key", ".crt", "tls"] {
        assert!(!cmdline.contains(needle), "{needle} in {cmdline:?}");
    }

    // The state directory, client.json and every key: unreachable.
    let mut secrets = vec![state.join("client.json"), state.join("processes.json")];
    for entry in std::fs::read_dir(state.join("pki")).unwrap() {
        secrets.push(entry.unwrap().path());
    }
    assert!(
        secrets
            .iter()
            .any(|p| p.extension().is_some_and(|e| e == "key"))
    );
    for path in &secrets {
        let out = shell(&stack, &endpoint, &format!("cat '{}'", path.display())).await;
        assert_ne!(out["exitCode"], 0, "{} was readable: {out}", path.display());
        assert_eq!(out["stdout"], "", "{}", path.display());
    }
    let ls = shell(&stack, &endpoint, &format!("ls '{}'", state.display())).await;
    assert_ne!(ls["exitCode"], 0, "the state directory was listable: {ls}");

    // No readable process entry holds the token. (The pattern travels in
    // base64 into a file, so no command line of the probe holds it.)
    let pattern = base64::engine::general_purpose::STANDARD.encode(secret);
    let grep = shell(
        &stack,
        &endpoint,
        &format!(
            "echo {pattern} | base64 -d > pattern; grep -lsFf pattern /proc/[0-9]*/cmdline /proc/[0-9]*/environ; echo done"
        ),
    )
    .await;
    assert_eq!(grep["stdout"], "done\n", "the token was found: {grep}");

    // No capabilities, no privilege gain.
    let status = shell(
        &stack,
        &endpoint,
        "grep -E '^(CapEff|CapPrm|NoNewPrivs)' /proc/self/status",
    )
    .await;
    let status = status["stdout"].as_str().unwrap();
    assert!(status.contains("CapEff:\t0000000000000000"), "{status}");
    assert!(status.contains("CapPrm:\t0000000000000000"), "{status}");
    assert!(status.contains("NoNewPrivs:\t1"), "{status}");

    // Ordinary work still works: the workspace, a temporary file, Python.
    let work = shell(
        &stack,
        &endpoint,
        "set -e; mkdir -p a/b; echo hi > a/b/c; cat a/b/c; t=$(mktemp); echo tmp > \"$t\"; cat \"$t\"; python3 -c 'print(6 * 7)'",
    )
    .await;
    assert_eq!(work["exitCode"], 0, "{work}");
    assert_eq!(work["stdout"], "hi\ntmp\n42\n");

    // A Python function: the same refusals.
    let paths: Vec<String> = secrets
        .iter()
        .map(|p| p.display().to_string())
        .chain([format!("/proc/{runtimed}/environ")])
        .collect();
    let r = stack
        .invoke("fn", &json!({"paths": paths}).to_string())
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let seen = json(r).await;
    for p in &paths {
        assert_eq!(seen[p], "PermissionError", "{p}: {seen}");
    }
    assert_ne!(fn_run["assignedPod"], Value::Null);
}
