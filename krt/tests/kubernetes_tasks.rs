//! Task Runs on a real kube-apiserver with the operator and runtimed as on
//! a cluster (kubetest's harness): every phase and reason of a task — exit
//! codes, bounded output in status, retries on named codes, start failure,
//! timeout and cancel killing a whole tree, a Pod at capacity, owner loss
//! retried at attempt + 1 with the old attempt fenced, TTL deletion.

// Test helpers panic on failure: that is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[allow(dead_code)]
#[path = "kubernetes/support.rs"]
mod support;

use std::path::PathBuf;
use std::time::Duration;

use kruntimes_api::Run;
use kruntimes_kubetest::cluster::Cluster;
use kruntimes_testkit::{read_pids, wait_gone};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use support::{run_in_a, runs, setup};

const WITHIN: Duration = Duration::from_secs(60);

/// A Python task Run in namespace `a` running `script`, with `extra` spec
/// fields.
fn task(name: &str, script: &str, extra: Value) -> Run {
    let mut spec = json!({
        "runtime": "python",
        "source": {"inline": script},
        "mode": {"task": {}},
    });
    for (k, val) in extra.as_object().unwrap() {
        spec[k] = val.clone();
    }
    run_in_a(name, spec)
}

/// A tree that outlives its parent unless it is killed whole: a `setsid`
/// child, a double-forked one and the shell, their pids in `pids`.
const TREE: &str = "import subprocess\nsubprocess.run(['bash', '-c', 'setsid sleep 2971 & echo $! >> pids; (sleep 2972 & echo $! >> pids); echo $$ >> pids; sleep 2973'])\n";

/// Waits for a file named `go` in the working directory.
const WAITS: &str = "import os, time\nwhile not os.path.exists('go'):\n    time.sleep(0.05)\n";

/// The working directory of Run `name`'s current attempt, once placed.
async fn work_dir(cluster: &Cluster, name: &str) -> PathBuf {
    let run = cluster
        .wait_run("a", name, WITHIN, "an owner", |v| {
            v["status"]["assignedPod"].is_string()
        })
        .await
        .unwrap();
    cluster.work_dir(
        run["status"]["assignedPod"].as_str().unwrap(),
        run["metadata"]["uid"].as_str().unwrap(),
    )
}

async fn create(api: &Api<Run>, run: &Run) {
    api.create(&PostParams::default(), run).await.unwrap();
}

async fn ended(cluster: &Cluster, name: &str) -> Value {
    cluster
        .wait_run("a", name, WITHIN, "a terminal phase", |v| {
            matches!(
                v["status"]["phase"].as_str(),
                Some("Succeeded" | "Failed" | "Timeout" | "Cancelled")
            )
        })
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_runs_end_with_their_exit_code_and_bounded_output_on_the_api_server() {
    let (server, cluster) = setup(2).await;
    let api = runs(&server).await;
    // Exits 3 at its first attempt.
    let counted = "import os, sys\nn = int(os.environ['KRUNTIMES_ATTEMPT'])\nprint('start', n)\nsys.exit(0 if n >= 2 else 3)\n";
    for run in [
        task(
            "hello",
            "import sys\nprint('hello')\nprint('careful', file=sys.stderr)\n",
            json!({}),
        ),
        task("three", "import sys\nsys.exit(3)\n", json!({})),
        task(
            "killed",
            "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n",
            json!({}),
        ),
        task(
            "flood",
            "import sys\nfor i in range(80):\n    sys.stdout.write(str(i % 10) * 131072 + '\\n')\nprint('end \u{e9}')\n",
            json!({}),
        ),
        task(
            "flaky",
            counted,
            json!({"retryPolicy": {"maxRetries": 2, "onExitCodes": [3]}}),
        ),
        task(
            "nostart",
            "",
            json!({"source": {}, "mode": {"task": {"args": ["print(1)"]}}, "retryPolicy": {"maxRetries": 0}}),
        ),
        task(
            "brief",
            "print('brief')\n",
            json!({"ttlSecondsAfterFinished": 1}),
        ),
    ] {
        create(&api, &run).await;
    }
    let hello = ended(&cluster, "hello").await;
    let s = &hello["status"];
    assert_eq!(
        (&s["phase"], &s["reason"]),
        (&json!("Succeeded"), &json!("Completed")),
        "{hello}"
    );
    assert_eq!(s["task"]["exitCode"], 0);
    assert_eq!(s["task"]["attempt"], 1);
    assert_eq!(s["task"]["stdoutTail"], "hello\n");
    assert_eq!(s["task"]["stderrTail"], "careful\n");
    assert!(s["task"]["startedAt"].is_string() && s["task"]["finishedAt"].is_string());
    assert!(s["completionTime"].is_string());
    // A task is never called: its endpoint is where its artifacts are read.
    let url = s["endpoint"]["url"].as_str().unwrap();
    assert!(url.ends_with("/artifacts"), "{s}");

    let three = ended(&cluster, "three").await;
    let s = &three["status"];
    assert_eq!(
        (&s["phase"], &s["reason"]),
        (&json!("Failed"), &json!("NonZeroExit")),
        "{three}"
    );
    assert_eq!(s["message"], "exited with code 3");
    assert_eq!(s["task"]["exitCode"], 3);
    assert_eq!(
        s["attempt"], 1,
        "a code the policy does not name is not retried"
    );

    let killed = ended(&cluster, "killed").await;
    assert_eq!(killed["status"]["task"]["exitCode"], 137, "{killed}");

    let flood = ended(&cluster, "flood").await;
    let t = &flood["status"]["task"];
    assert_eq!(flood["status"]["phase"], "Succeeded", "{flood}");
    let tail = t["stdoutTail"].as_str().unwrap();
    assert!(tail.len() <= 4096 && tail.len() >= 4090, "{}", tail.len());
    assert!(tail.ends_with("9999\nend \u{e9}\n"));
    assert_eq!(t["stdoutTruncated"], true);

    let flaky = ended(&cluster, "flaky").await;
    let s = &flaky["status"];
    assert_eq!(
        (&s["phase"], &s["attempt"]),
        (&json!("Succeeded"), &json!(2)),
        "{flaky}"
    );
    assert_eq!(s["task"]["attempt"], 2);
    assert_eq!(s["task"]["stdoutTail"], "start 2\n");

    let nostart = ended(&cluster, "nostart").await;
    let s = &nostart["status"];
    assert_eq!(
        (&s["phase"], &s["reason"]),
        (&json!("Failed"), &json!("StartFailed")),
        "{nostart}"
    );
    assert!(
        s["message"].as_str().unwrap().contains("runs a script"),
        "{s}"
    );

    // TTL: deleted (through its owner's finalizer) a second after it ended.
    let deadline = std::time::Instant::now() + WITHIN;
    while api.get_opt("brief").await.unwrap().is_some() {
        assert!(
            std::time::Instant::now() < deadline,
            "brief outlived its TTL\n{}",
            cluster.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Nothing of the output reached a stack log.
    let logs = cluster.logs();
    assert!(
        !logs.contains("careful") && !logs.contains("9999999999"),
        "output in the logs"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_and_cancel_kill_the_tree_and_a_full_pod_makes_a_task_wait() {
    let (server, cluster) = setup(1).await;
    let api = runs(&server).await;
    // Four fill the Pod (capacity 4): two trees, two that wait for a file.
    create(&api, &task("timed", TREE, json!({"timeout": 15}))).await;
    create(&api, &task("cancelled", TREE, json!({}))).await;
    for name in ["w1", "w2"] {
        create(&api, &task(name, WAITS, json!({}))).await;
    }
    let mut trees = Vec::new();
    for name in ["timed", "cancelled"] {
        let pids = work_dir(&cluster, name).await.join("pids");
        trees.push(read_pids(&pids, 3, WITHIN).await.unwrap());
    }
    for name in ["w1", "w2"] {
        cluster.wait_phase("a", name, "Running").await.unwrap();
    }
    create(&api, &task("fifth", "print('fifth')\n", json!({}))).await;
    let waiting = cluster
        .wait_run("a", "fifth", WITHIN, "NoIdlePod", |v| {
            v["status"]["reason"] == "NoIdlePod"
        })
        .await
        .unwrap();
    assert_eq!(waiting["status"]["phase"], "Pending");

    api.patch(
        "cancelled",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"termination": {"mode": "Immediate"}}})),
    )
    .await
    .unwrap();
    let cancelled = ended(&cluster, "cancelled").await;
    assert_eq!(
        (
            &cancelled["status"]["phase"],
            &cancelled["status"]["reason"]
        ),
        (&json!("Cancelled"), &json!("Terminated")),
        "{cancelled}"
    );
    assert_eq!(wait_gone(&trees[1], WITHIN).await, Vec::<i32>::new());
    // Its slot is free at once: the fifth runs.
    let fifth = ended(&cluster, "fifth").await;
    assert_eq!(fifth["status"]["task"]["stdoutTail"], "fifth\n", "{fifth}");

    let timed = ended(&cluster, "timed").await;
    assert_eq!(
        (&timed["status"]["phase"], &timed["status"]["reason"]),
        (&json!("Timeout"), &json!("RunTimeout")),
        "{timed}"
    );
    assert_eq!(wait_gone(&trees[0], WITHIN).await, Vec::<i32>::new());
    for name in ["w1", "w2"] {
        std::fs::write(work_dir(&cluster, name).await.join("go"), "").unwrap();
    }
    for name in ["w1", "w2"] {
        assert_eq!(ended(&cluster, name).await["status"]["phase"], "Succeeded");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_whose_owner_pod_is_lost_runs_again_and_the_old_attempt_is_fenced() {
    let (server, cluster) = setup(2).await;
    let api = runs(&server).await;
    // The first attempt waits for `go`, then exits 7; the second exits 0.
    let script = "import os, sys, time\nif os.environ['KRUNTIMES_ATTEMPT'] == '1':\n    open('pids', 'w').write(str(os.getpid()))\n    while not os.path.exists('go'):\n        time.sleep(0.05)\n    sys.exit(7)\nprint('second')\n";
    create(
        &api,
        &task("moved", script, json!({"retryPolicy": {"maxRetries": 1}})),
    )
    .await;
    let first_dir = work_dir(&cluster, "moved").await;
    read_pids(&first_dir.join("pids"), 1, WITHIN).await.unwrap();
    let first = cluster.run("a", "moved").await.unwrap();
    let owner = first["status"]["assignedPod"].as_str().unwrap().to_owned();
    cluster.delete_pod(&owner).await.unwrap();
    let moved = ended(&cluster, "moved").await;
    let s = &moved["status"];
    assert_eq!(
        (&s["phase"], &s["attempt"]),
        (&json!("Succeeded"), &json!(2)),
        "{moved}"
    );
    assert_ne!(s["assignedPod"], json!(owner));
    assert_eq!(s["task"]["stdoutTail"], "second\n");
    // The first attempt's late end changes nothing.
    // (Its owner may have killed it and removed its directory already.)
    let _ = std::fs::write(first_dir.join("go"), "");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = cluster.run("a", "moved").await.unwrap();
    assert_eq!(after["status"]["task"], moved["status"]["task"], "{after}");
    assert_eq!(after["status"]["phase"], "Succeeded");
}
