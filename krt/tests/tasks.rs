//! Task Runs end to end on `krt up`: `krt run` and its exit codes, output
//! and its bounds, timeout, cancel and delete killing a whole process tree,
//! a task waiting for a free Pod, retries on named exit codes, start
//! failures, and a task whose Runtime Server dies under it.

// Test helpers panic on failure: that is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use kruntimes_testkit::prelude::*;
use kruntimes_testkit::{read_pids, wait_gone};

const WITHIN: Duration = Duration::from_secs(60);

/// A task Run manifest: `spec` lines after `runtime`, indented by two.
fn task(name: &str, runtime: &str, spec: &str) -> (String, String) {
    (
        format!("{name}.yaml"),
        format!(
            "apiVersion: kruntimes.io/v1alpha1\nkind: Run\nmetadata:\n  name: {name}\n  namespace: default\nspec:\n  runtime: {runtime}\n{spec}"
        ),
    )
}

/// A Bash task running `script` (one line), with `extra` spec lines.
fn bash_task(name: &str, script: &str, extra: &str) -> (String, String) {
    task(
        name,
        "bash",
        &format!("  source:\n    inline: {script:?}\n  mode:\n    task: {{}}\n{extra}"),
    )
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A tree that outlives its shell unless it is killed whole: a `setsid`
/// child, a double-forked one and the shell, their pids in `pids`.
const TREE: &str = "setsid sleep 2981 & echo $! >> pids; (sleep 2982 & echo $! >> pids); echo $$ >> pids; sleep 2983";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn krt_run_prints_the_output_and_exits_with_the_tasks_code() {
    let stack = start(1, vec![], &[]);
    let run = |args: &[&str]| {
        let mut all = vec!["run"];
        all.extend_from_slice(args);
        stack.krt(&all).unwrap()
    };
    let ok = run(&[
        "--name",
        "hello",
        "--runtime",
        "python",
        "--inline",
        "import sys\nprint('hello')\nprint('careful', file=sys.stderr)",
    ]);
    assert_eq!(ok.status.code(), Some(0), "{}", text(&ok.stderr));
    assert_eq!(text(&ok.stdout), "hello\n");
    assert!(text(&ok.stderr).contains("careful"), "{}", text(&ok.stderr));
    for (script, code) in [("exit 3", 3), ("kill -9 $$", 137)] {
        let out = run(&["--rm", "--runtime", "bash", "--inline", script]);
        assert_eq!(
            out.status.code(),
            Some(code),
            "{script}: {}",
            text(&out.stderr)
        );
    }
    // Shell commands: the first failure ends them.
    let out = run(&[
        "--runtime",
        "bash",
        "--name",
        "steps",
        "--",
        "echo one",
        "false",
        "echo never",
    ]);
    assert_eq!(
        (out.status.code(), text(&out.stdout).as_str()),
        (Some(1), "one\n")
    );
    // Python runs a script, not commands: it cannot start.
    let out = run(&["--runtime", "python", "--name", "nostart", "--", "print(1)"]);
    assert_eq!(out.status.code(), Some(125), "{}", text(&out.stderr));
    // (retried with backoff three times first: the reason says so)
    assert!(
        text(&out.stderr).contains("StartFailed"),
        "{}",
        text(&out.stderr)
    );
    // The results stay in status until the Run is deleted; --rm deleted.
    let hello = stack.run("hello").unwrap();
    assert_eq!(hello["phase"], "Succeeded");
    assert_eq!(hello["reason"], "Completed");
    assert_eq!(hello["task"]["exitCode"], 0);
    assert_eq!(hello["task"]["stdoutTail"], "hello\n");
    assert_eq!(hello["task"]["stderrTail"], "careful\n");
    assert!(hello["task"]["startedAt"].is_string() && hello["task"]["finishedAt"].is_string());
    assert_eq!(stack.run("steps").unwrap()["task"]["exitCode"], 1);
    let runs = stack.runs().unwrap();
    assert_eq!(runs.len(), 3, "--rm removed two: {runs:?}");
    let table = text(&stack.krt(&["runs"]).unwrap().stdout);
    let steps = table.lines().find(|l| l.starts_with("steps ")).unwrap();
    assert_eq!(steps.split_whitespace().nth(8), Some("1"), "{table}");
    // Its log has both streams, labelled.
    let logs = text(&stack.krt(&["logs", "hello"]).unwrap().stdout);
    assert!(
        logs.contains("stdout hello") && logs.contains("stderr careful"),
        "{logs}"
    );
    // A name that exists is refused before anything runs.
    let again = run(&["--name", "hello", "--runtime", "bash", "--inline", "true"]);
    assert_eq!(again.status.code(), Some(1));
    assert!(text(&again.stderr).contains("already exists"));
    // Detached: created, then waited for like any Run.
    let out = run(&[
        "--detach",
        "--name",
        "later",
        "--runtime",
        "bash",
        "--inline",
        "exit 0",
    ]);
    assert_eq!(text(&out.stdout), "run.kruntimes.io/later created\n");
    let waited = stack
        .krt(&["wait", "run", "later", "--for", "Succeeded"])
        .unwrap();
    assert!(waited.status.success(), "{}", text(&waited.stderr));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_output_keeps_four_kib_in_status_and_a_rotated_log() {
    let stack = start(1, vec![], &[]);
    // 10 MiB in 80 lines, then a last one.
    let script = "import sys\nfor i in range(80):\n    sys.stdout.write(str(i % 10) * 131072 + '\\n')\nprint('end')";
    let out = stack
        .krt(&[
            "run",
            "--name",
            "flood",
            "--runtime",
            "python",
            "--inline",
            script,
        ])
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).ends_with("end\n"));
    let run = stack.run("flood").unwrap();
    let tail = run["task"]["stdoutTail"].as_str().unwrap();
    assert_eq!(tail.len(), 4096);
    assert!(tail.ends_with("9999\nend\n"));
    assert_eq!(run["task"]["stdoutTruncated"], true);
    let logs = stack
        .state_dir()
        .join("work")
        .join(run["assignedPod"].as_str().unwrap())
        .join(".logs");
    let uid = run["uid"].as_str().unwrap();
    for name in [format!("{uid}.log"), format!("{uid}.log.1")] {
        let size = std::fs::metadata(logs.join(&name)).unwrap().len();
        assert!(size <= 1024 * 1024 + 16 * 1024, "{name}: {size}");
    }
    // Deleting the Run removes its log.
    let deleted = stack.krt(&["delete", "run", "flood"]).unwrap();
    assert!(deleted.status.success(), "{}", text(&deleted.stderr));
    let gone = tokio::time::timeout(WITHIN, async {
        while logs.join(format!("{uid}.log")).exists() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(gone.is_ok(), "the log outlived its Run");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_termination_and_deletion_kill_the_whole_tree() {
    let stack = start(
        1,
        vec![
            bash_task("timed", TREE, "  timeout: 10\n"),
            bash_task("cancelled", TREE, ""),
            bash_task("deleted", TREE, ""),
        ],
        &[],
    );
    let mut trees = Vec::new();
    for name in ["timed", "cancelled", "deleted"] {
        // Its working directory exists once it has an owner.
        stack
            .wait_run(name, WITHIN, |r| r["assignedPod"].is_string())
            .await
            .unwrap();
        let pids = read_pids(&stack.work_dir(name).unwrap().join("pids"), 3, WITHIN)
            .await
            .unwrap();
        trees.push(pids);
    }
    let timed = stack.wait_phase("timed", "Timeout").await.unwrap();
    assert_eq!(timed["reason"], "RunTimeout");
    assert_eq!(wait_gone(&trees[0], WITHIN).await, Vec::<i32>::new());

    let (file, yaml) = bash_task("cancelled", TREE, "  termination:\n    mode: Immediate\n");
    stack.add_run(&file, &yaml).unwrap();
    let cancelled = stack.wait_phase("cancelled", "Cancelled").await.unwrap();
    assert_eq!(cancelled["reason"], "Terminated");
    assert_eq!(wait_gone(&trees[1], WITHIN).await, Vec::<i32>::new());

    stack.remove_run("deleted.yaml").unwrap();
    assert_eq!(wait_gone(&trees[2], WITHIN).await, Vec::<i32>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_waits_for_a_free_pod_and_the_pod_is_free_at_its_exit() {
    let stack = start(
        1,
        vec![bash_task(
            "first",
            "while [ ! -f go ]; do sleep 0.05; done",
            "",
        )],
        &["--capacity", "1"],
    );
    stack.wait_phase("first", "Running").await.unwrap();
    let (file, yaml) = bash_task("second", "echo second", "");
    stack.add_run(&file, &yaml).unwrap();
    let waiting = stack
        .wait_run("second", WITHIN, |r| {
            r["phase"] == "Pending" && r["reason"] != ""
        })
        .await
        .unwrap();
    assert!(waiting["assignedPod"].is_null(), "{waiting}");
    std::fs::write(stack.work_dir("first").unwrap().join("go"), "").unwrap();
    stack.wait_phase("first", "Succeeded").await.unwrap();
    let second = stack.wait_phase("second", "Succeeded").await.unwrap();
    assert_eq!(second["task"]["stdoutTail"], "second\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn named_exit_codes_are_retried_and_other_failures_are_final() {
    // The count of starts lives in the instance's TMPDIR, which outlives
    // an attempt's working directory.
    let counted = "n=$(cat $TMPDIR/starts-$KRUNTIMES_RUN_UID 2>/dev/null || echo 0); echo $((n+1)) > $TMPDIR/starts-$KRUNTIMES_RUN_UID; [ $n -ge 1 ] || exit 3";
    let stack = start(
        1,
        vec![
            bash_task(
                "flaky",
                counted,
                "  retryPolicy:\n    maxRetries: 2\n    onExitCodes: [3]\n",
            ),
            bash_task("failing", counted, "  retryPolicy:\n    onExitCodes: [4]\n"),
        ],
        &[],
    );
    let flaky = stack.wait_phase("flaky", "Succeeded").await.unwrap();
    assert_eq!(flaky["attempt"], 2);
    assert_eq!(flaky["task"]["attempt"], 2);
    let failing = stack.wait_phase("failing", "Failed").await.unwrap();
    assert_eq!(
        (&failing["reason"], &failing["attempt"], &failing["message"]),
        (
            &serde_json::json!("NonZeroExit"),
            &serde_json::json!(1),
            &serde_json::json!("exited with code 3")
        )
    );
    // A task that cannot start fails once its retries are spent.
    let (file, yaml) = task(
        "nostart",
        "python",
        "  mode:\n    task:\n      args: [\"echo hi\"]\n  retryPolicy:\n    maxRetries: 0\n",
    );
    stack.add_run(&file, &yaml).unwrap();
    let nostart = stack.wait_phase("nostart", "Failed").await.unwrap();
    assert_eq!(nostart["reason"], "StartFailed");
    assert!(
        nostart["message"]
            .as_str()
            .unwrap()
            .contains("runs a script"),
        "{nostart}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_whose_runtime_server_dies_runs_again_at_the_next_attempt() {
    let once = "n=$(cat $TMPDIR/lost-$KRUNTIMES_RUN_UID 2>/dev/null || echo 0); echo $((n+1)) > $TMPDIR/lost-$KRUNTIMES_RUN_UID; echo $$ > pids; [ $n -ge 1 ] || sleep 2980";
    let stack = start(1, vec![bash_task("lost", once, "")], &[]);
    stack.wait_phase("lost", "Running").await.unwrap();
    let pids = read_pids(&stack.work_dir("lost").unwrap().join("pids"), 1, WITHIN)
        .await
        .unwrap();
    stack.kill("runtime-server-0").unwrap();
    assert_eq!(wait_gone(&pids, WITHIN).await, Vec::<i32>::new());
    let done = stack.wait_phase("lost", "Succeeded").await.unwrap();
    assert_eq!(done["attempt"], 2, "{done}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_input_semantics_are_told_and_refused_in_words() {
    let stack = start(1, vec![], &[]);
    let dir = tempfile::tempdir().unwrap();
    let apply = |name: &str, spec: &str| {
        let (file, yaml) = task(name, "bash", spec);
        let path = dir.path().join(file);
        std::fs::write(&path, yaml).unwrap();
        stack.krt(&["apply", "-f", path.to_str().unwrap()]).unwrap()
    };
    // Inline wins; what it makes moot is said.
    let out = apply(
        "both",
        "  source:\n    inline: echo \"inline $#\"\n  mode:\n    task:\n      entrypoint: run.sh\n      args: [a]\n",
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains(
            "Warning: run default/both: spec.mode.task.entrypoint and args have no effect"
        ),
        "{}",
        text(&out.stderr)
    );
    let both = stack.wait_phase("both", "Succeeded").await.unwrap();
    assert_eq!(both["task"]["stdoutTail"], "inline 0\n");
    // An entrypoint with its arguments (one the workspace lacks: bash says so).
    let out = apply(
        "entry",
        "  mode:\n    task:\n      entrypoint: run.sh\n      args: [a]\n",
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let entry = stack.wait_phase("entry", "Failed").await.unwrap();
    assert_eq!(entry["task"]["exitCode"], 127);
    assert!(
        entry["task"]["stderrTail"]
            .as_str()
            .unwrap()
            .contains("run.sh")
    );
    // Refused before anything is written, each naming its field.
    for (name, spec, why) in [
        (
            "empty",
            "  mode:\n    task: {}\n",
            "a task needs something to run",
        ),
        (
            "escape",
            "  mode:\n    task:\n      entrypoint: ../run.sh\n",
            "spec.mode.task.entrypoint",
        ),
        (
            "zero",
            "  mode:\n    task:\n      args: [\"true\"]\n  retryPolicy:\n    onExitCodes: [0]\n",
            "spec.retryPolicy.onExitCodes",
        ),
    ] {
        let out = apply(name, spec);
        assert_eq!(out.status.code(), Some(1), "{name}");
        assert!(
            text(&out.stderr).contains(why),
            "{name}: {}",
            text(&out.stderr)
        );
        assert!(stack.run(name).is_none(), "{name} was written");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_task_is_deleted_with_its_log_once_its_ttl_passes() {
    // One in the user's manifests, which krt up never edits: it stays.
    let stack = start(
        1,
        vec![bash_task(
            "yours",
            "echo mine",
            "  ttlSecondsAfterFinished: 0\n",
        )],
        &[],
    );
    let dir = tempfile::tempdir().unwrap();
    let (file, yaml) = bash_task("brief", "echo brief", "  ttlSecondsAfterFinished: 1\n");
    let path = dir.path().join(file);
    std::fs::write(&path, yaml).unwrap();
    let out = stack.krt(&["apply", "-f", path.to_str().unwrap()]).unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let done = stack
        .wait_run("brief", WITHIN, |r| r["phase"] == "Succeeded")
        .await
        .unwrap();
    let log = stack
        .state_dir()
        .join("work")
        .join(done["assignedPod"].as_str().unwrap())
        .join(".logs")
        .join(format!("{}.log", done["uid"].as_str().unwrap()));
    let gone = tokio::time::timeout(WITHIN, async {
        while stack.run("brief").is_some() || log.exists() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(gone.is_ok(), "the Run or its log outlived its TTL");
    let yours = stack.wait_phase("yours", "Succeeded").await.unwrap();
    assert_eq!(yours["task"]["stdoutTail"], "mine\n");
    // Its TTL passed long ago; it is still served, as its file says.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(stack.run("yours").is_some());
    // krt run of a Run its TTL deletes at once: it ends either way, with
    // the exit code when it saw the end, else saying the Run went first.
    let (file, yaml) = bash_task("gone", "echo gone", "  ttlSecondsAfterFinished: 0\n");
    let path = dir.path().join(file);
    std::fs::write(&path, yaml).unwrap();
    let out = std::process::Command::new("timeout")
        .arg("120")
        .arg(kruntimes_testkit::krt_binary())
        .arg("--state-dir")
        .arg(stack.state_dir())
        .args(["run", "-f", path.to_str().unwrap()])
        .output()
        .unwrap();
    match out.status.code() {
        Some(0) => assert_eq!(text(&out.stdout), "gone\n"),
        Some(1) => assert!(
            text(&out.stderr).contains("was deleted before krt run saw it end"),
            "{}",
            text(&out.stderr)
        ),
        other => panic!("{other:?}: {}", text(&out.stderr)),
    }
    // Arguments beside a manifest would be ignored: refused.
    let out = stack
        .krt(&["run", "-f", path.to_str().unwrap(), "--", "echo"])
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    // A TTL is a task's only, refused elsewhere in words.
    let (file, yaml) = task(
        "fn-ttl",
        "python",
        "  mode:\n    function:\n      handler: main.invoke\n  ttlSecondsAfterFinished: 5\n",
    );
    let path = dir.path().join(file);
    std::fs::write(&path, yaml).unwrap();
    let out = stack.krt(&["apply", "-f", path.to_str().unwrap()]).unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("spec.ttlSecondsAfterFinished applies to task Runs only"),
        "{}",
        text(&out.stderr)
    );
}
