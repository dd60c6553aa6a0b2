//! `krt up`'s pool of runtimed instances following demand: a sandbox that
//! takes the free instance brings another, the ceiling holds and a waiting
//! sandbox says why, a freed instance takes it, idle instances stop after
//! the delay (their processes gone), and the flags' contradictions are
//! refused before anything starts.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use kruntimes_testkit::prelude::*;
use kruntimes_testkit::{Options, Stack, krt_binary, wait_gone};
use serde_json::{Value, json};

fn sandbox(name: &str) -> (String, String) {
    (
        format!("{name}.yaml"),
        format!(
            "apiVersion: kruntimes.io/v1alpha1\nkind: Run\nmetadata:\n  name: {name}\n  namespace: default\nspec:\n  runtime: bash\n  mode:\n    session:\n      queueSize: 1\n      operationTimeout: 30\n"
        ),
    )
}

/// The runtimed instances `processes.json` lists, with their pids.
fn instances(stack: &Stack) -> BTreeMap<String, i32> {
    stack
        .processes()
        .unwrap()
        .into_iter()
        .filter(|(name, _)| name.starts_with("runtimed-"))
        .map(|(name, v)| (name, v["pid"].as_i64().unwrap_or(0) as i32))
        .collect()
}

/// `runs.json`'s view of the pool.
fn pool(stack: &Stack) -> Value {
    let v: Value =
        serde_json::from_slice(&std::fs::read(stack.state_dir().join("runs.json")).unwrap())
            .unwrap();
    v["pool"].clone()
}

async fn wait_for(what: &str, mut ok: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !ok() {
        assert!(
            std::time::Instant::now() < deadline,
            "{what} did not happen within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pool_refills_holds_its_ceiling_and_gives_back_idle_instances() {
    let stack = Stack::start(
        krt_binary(),
        Options {
            env: Vec::new(),
            runtimed: 1,
            max_runtimed: Some(3),
            runs: vec![python_run("fn")],
            extra_args: vec![
                "--min-idle".into(),
                "1".into(),
                "--scale-down-delay-secs".into(),
                "2".into(),
            ],
        },
    )
    .unwrap();
    let f = stack.wait_phase("fn", "Ready").await.unwrap();
    // The function took the only instance: a second starts, kept free.
    wait_for("a second instance", || instances(&stack).len() == 2).await;
    let p = pool(&stack);
    assert_eq!(
        (
            &p["desired"],
            &p["minInstances"],
            &p["minIdle"],
            &p["maxInstances"]
        ),
        (&json!(2), &json!(1), &json!(1), &json!(3))
    );

    // Each sandbox takes a whole instance; the pool follows up to three.
    for name in ["s1", "s2"] {
        let (file, yaml) = sandbox(name);
        stack.add_run(&file, &yaml).unwrap();
        stack.wait_phase(name, "Ready").await.unwrap();
    }
    assert_eq!(instances(&stack).len(), 3, "never above --max-runtimed");
    let (file, yaml) = sandbox("s3");
    stack.add_run(&file, &yaml).unwrap();
    let waiting = stack
        .wait_run("s3", Duration::from_secs(30), |r| {
            r["reason"] == "NoIdlePod"
        })
        .await
        .unwrap();
    assert_eq!(waiting["phase"], "Pending");
    let message = waiting["message"].as_str().unwrap();
    assert!(message.contains("0/3"), "the reason counts: {message}");
    assert_eq!(instances(&stack).len(), 3);

    // A sandbox ends: its instance takes the waiting one.
    let s1 = stack.run("s1").unwrap();
    stack.remove_run("s1.yaml").unwrap();
    let s3 = stack.wait_phase("s3", "Ready").await.unwrap();
    assert_eq!(s3["assignedPod"], s1["assignedPod"]);

    // The function keeps answering while instances come and go.
    let r = stack.invoke("fn", r#"{"name": "pool"}"#).await.unwrap();
    assert_eq!(r.status(), 200);

    // Every sandbox ends: after the delay, back to the function's instance
    // and one free — the others' processes are gone.
    let before = instances(&stack);
    stack.remove_run("s2.yaml").unwrap();
    stack.remove_run("s3.yaml").unwrap();
    wait_for("the idle instances to stop", || {
        instances(&stack).len() == 2
    })
    .await;
    let after = instances(&stack);
    assert!(
        after.contains_key(f["assignedPod"].as_str().unwrap()),
        "the busy instance stays: {after:?}"
    );
    let gone: Vec<i32> = before
        .iter()
        .filter(|(name, _)| !after.contains_key(*name))
        .map(|(_, pid)| *pid)
        .collect();
    assert_eq!(gone.len(), 1);
    assert!(
        wait_gone(&gone, Duration::from_secs(10)).await.is_empty(),
        "a retired runtimed still runs"
    );
    assert_eq!(pool(&stack)["desired"], 2);
    let r = stack.invoke("fn", r#"{"name": "pool"}"#).await.unwrap();
    assert_eq!(r.status(), 200);
}

#[test]
fn contradicting_pool_flags_are_refused_before_anything_starts() {
    let dir = tempfile::tempdir().unwrap();
    for (args, expected) in [
        (
            vec!["--runtimed", "3", "--max-runtimed", "2"],
            "--max-runtimed 2 is below --runtimed 3",
        ),
        (vec!["--resources", "cpu"], "is not NAME=QUANTITY"),
        (vec!["--resources", "cpu=lots"], "--resources.cpu"),
    ] {
        let out = std::process::Command::new(krt_binary())
            .arg("--state-dir")
            .arg(dir.path().join("state"))
            .arg("up")
            .args(&args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} started");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
        assert!(
            !dir.path().join("state").join("client.json").exists(),
            "{args:?} wrote a stack's files"
        );
    }
}
