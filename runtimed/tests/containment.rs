//! The Runtime Pod boundary end to end, through the gateway: a caller that
//! gives up never shifts a function's answers onto the next caller, and
//! nothing user code starts outlives what started it — a client that
//! disconnects, a worker that crashes, a deadline, a cancelled session
//! command, a closed session. Processes are checked by PID, with generous
//! deadlines (containment is asserted, never its speed).

// Test helpers panic on failure: that is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use futures::{SinkExt, StreamExt};
use kruntimes_testkit::prelude::*;
use kruntimes_testkit::{Stack, function_run, read_pids, wait_gone};

/// Waits for a process to go (deadlines of 3 s, kill loops, a loaded
/// machine: generous on purpose).
const GONE_WITHIN: Duration = Duration::from_secs(30);

const WHO_PY: &str = r#"import time

def invoke(r):
    time.sleep(r.get("sleep", 0))
    return {"who": r["who"]}
"#;

const WHO_SH: &str = r#"who() {
  local s w
  s=$(printf '%s' "$1" | sed -n 's/.*"sleep"[[:space:]]*:[[:space:]]*\([0-9]*\).*/\1/p')
  w=$(printf '%s' "$1" | sed -n 's/.*"who"[[:space:]]*:[[:space:]]*"\([^"]*\)".*/\1/p')
  sleep "${s:-0}"
  printf '{"who": "%s"}\n' "$w"
}
"#;

/// Each call writes the pids it starts (its own, and a child that would
/// outlive it) to `pids` in its working directory.
const ESCAPE_PY: &str = r#"import os, subprocess, time

def invoke(r):
    child = subprocess.Popen(["setsid", "sleep", "2998"])
    with open("pids", "a") as f:
        f.write(f"{os.getpid()} {child.pid}\n")
    if r.get("crash"):
        os._exit(1)
    time.sleep(r.get("sleep", 0))
    return {"pid": os.getpid()}
"#;

const NAP_SH: &str = r#"nap() {
  sleep 2999 &
  echo $! >> pids
  echo $$ >> pids
  wait
}
"#;

fn run(name: &str, runtime: &str, handler: &str, file: &str, source: &str) -> (String, String) {
    (
        format!("{name}.yaml"),
        function_run(
            name,
            runtime,
            handler,
            file,
            source,
            "      invocationTimeoutSeconds: 3\n",
        ),
    )
}

/// Sleeps until something ends it, recording its pids, unless asked for a
/// quick answer.
const NAP_OR_ANSWER_SH: &str = r#"nap() {
  case "$1" in *quick*) printf '{"who": "next"}'; return ;; esac
  sleep 2999 &
  echo $! >> pids
  echo $$ >> pids
  wait
}
"#;

/// A Run whose calls may take ten minutes: only a caller that goes away can
/// end one sooner.
fn patient(name: &str, runtime: &str, handler: &str, file: &str, source: &str) -> (String, String) {
    (
        format!("{name}.yaml"),
        function_run(
            name,
            runtime,
            handler,
            file,
            source,
            "      invocationTimeoutSeconds: 600\n",
        ),
    )
}

fn session(name: &str) -> (String, String) {
    (
        format!("{name}.yaml"),
        format!(
            "apiVersion: kruntimes.io/v1alpha1\nkind: Run\nmetadata:\n  name: {name}\n  namespace: default\nspec:\n  runtime: bash\n  mode:\n    session:\n      operationTimeout: 600\n"
        ),
    )
}

/// Sends `body` and gives up after one second.
async fn give_up(stack: &Stack, name: &str, body: &str) {
    let r = stack
        .http
        .post(stack.endpoint(name).unwrap())
        .bearer_auth(&stack.token)
        .timeout(Duration::from_secs(1))
        .body(body.to_owned())
        .send()
        .await;
    assert!(
        r.is_err(),
        "the call should still run after a second: {r:?}"
    );
}

/// Calls until the function is free again (429 while an abandoned call
/// still holds it) and returns the answer's `who`.
async fn answer_of(stack: &Stack, name: &str, who: &str) -> String {
    let body = format!(r#"{{"who": "{who}"}}"#);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let r = stack.invoke(name, &body).await.unwrap();
        match r.status().as_u16() {
            200 => return json(r).await["who"].as_str().unwrap_or_default().to_owned(),
            429 if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            s => panic!(
                "{who}: unexpected {s}: {}",
                r.text().await.unwrap_or_default()
            ),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_that_gives_up_never_gets_its_answer_handed_to_the_next_callers() {
    let stack = start(
        1,
        vec![
            run("who-py", "python", "main.invoke", "main.py", WHO_PY),
            run("who-sh", "bash", "who.who", "who.sh", WHO_SH),
        ],
        &[],
    );
    for name in ["who-py", "who-sh"] {
        stack.wait_phase(name, "Ready").await.unwrap();
        give_up(&stack, name, r#"{"who": "alice", "sleep": 2}"#).await;
        for who in ["bob", "carol"] {
            assert_eq!(
                answer_of(&stack, name, who).await,
                who,
                "{name}: {who}'s own answer"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_outlives_a_call_whose_client_disconnected() {
    let stack = start(
        1,
        vec![
            run("nap", "bash", "nap.nap", "nap.sh", NAP_SH),
            run("escape", "python", "main.invoke", "main.py", ESCAPE_PY),
        ],
        &[],
    );
    for (name, body) in [("nap", "{}"), ("escape", r#"{"sleep": 60}"#)] {
        stack.wait_phase(name, "Ready").await.unwrap();
        give_up(&stack, name, body).await;
        let pids = read_pids(&stack.work_dir(name).unwrap().join("pids"), 2, GONE_WITHIN)
            .await
            .unwrap();
        assert_eq!(
            wait_gone(&pids, GONE_WITHIN).await,
            Vec::<i32>::new(),
            "{name}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_that_goes_away_ends_its_call_at_once_and_frees_the_function() {
    let stack = start(
        1,
        vec![
            patient("nap", "bash", "nap.nap", "nap.sh", NAP_OR_ANSWER_SH),
            patient("escape", "python", "main.invoke", "main.py", ESCAPE_PY),
        ],
        &[],
    );
    for (name, body, quick) in [
        ("nap", "{}", r#"{"quick": true}"#),
        ("escape", r#"{"sleep": 3000}"#, "{}"),
    ] {
        stack.wait_phase(name, "Ready").await.unwrap();
        give_up(&stack, name, body).await;
        // The call's whole tree goes, nine minutes before its deadline…
        let pids = read_pids(&stack.work_dir(name).unwrap().join("pids"), 2, GONE_WITHIN)
            .await
            .unwrap();
        assert_eq!(
            wait_gone(&pids, GONE_WITHIN).await,
            Vec::<i32>::new(),
            "{name}"
        );
        // …and the function serves the next caller (429 only while the
        // gateway and runtimed learn the caller left).
        let deadline = Instant::now() + GONE_WITHIN;
        loop {
            let r = stack.invoke(name, quick).await.unwrap();
            match r.status().as_u16() {
                200 => break,
                429 if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                s => panic!("{name}: {s}: {}", r.text().await.unwrap_or_default()),
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_outlives_a_crashed_worker_or_a_deadline() {
    let stack = start(
        1,
        vec![run("escape", "python", "main.invoke", "main.py", ESCAPE_PY)],
        &[],
    );
    stack.wait_phase("escape", "Ready").await.unwrap();
    let pids_file = stack.work_dir("escape").unwrap().join("pids");
    let crashed = stack.invoke("escape", r#"{"crash": true}"#).await.unwrap();
    expect_error(crashed, 500, "WorkerCrashed").await;
    let pids = read_pids(&pids_file, 2, GONE_WITHIN).await.unwrap();
    assert_eq!(
        wait_gone(&pids, GONE_WITHIN).await,
        Vec::<i32>::new(),
        "after the crash"
    );

    let late = stack.invoke("escape", r#"{"sleep": 60}"#).await.unwrap();
    expect_error(late, 504, "DeadlineExceeded").await;
    let pids = read_pids(&pids_file, 4, GONE_WITHIN).await.unwrap();
    assert_eq!(
        wait_gone(&pids, GONE_WITHIN).await,
        Vec::<i32>::new(),
        "after the deadline"
    );

    let ok = stack.invoke("escape", "{}").await.unwrap();
    assert_eq!(ok.status(), 200, "a fresh worker serves the next call");
}

/// A command that starts processes escaping its process group and session
/// and records their pids; it then runs until something ends it.
const ESCAPING_COMMAND: &str = "setsid sleep 2997 & echo $! >> pids; (sleep 2996 & echo $! >> pids); echo $$ >> pids; echo started; sleep 2995";

async fn session_pids(stack: &Stack, endpoint: &str) -> Vec<i32> {
    let deadline = Instant::now() + GONE_WITHIN;
    loop {
        let r = stack
            .http
            .get(format!("{endpoint}/files:content?path=pids"))
            .bearer_auth(&stack.token)
            .send()
            .await
            .unwrap();
        if r.status() == 200 {
            let text = r.text().await.unwrap();
            let pids: Vec<i32> = text
                .split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect();
            if pids.len() >= 3 {
                return pids;
            }
        }
        assert!(
            Instant::now() < deadline,
            "the command never wrote its pids"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_outlives_a_cancelled_session_command_or_a_closed_session() {
    use tokio_tungstenite::tungstenite::Message;
    let stack = start(2, vec![session("cancel"), session("close")], &[]);
    for name in ["cancel", "close"] {
        let run = stack.wait_phase(name, "Ready").await.unwrap();
        let endpoint = run["endpoint"].as_str().unwrap().to_owned();
        let mut ws = websocket(&stack, &endpoint, Some(&stack.token))
            .await
            .unwrap();
        ws.send(ws_send(
            serde_json::json!({"command": {"shell": ESCAPING_COMMAND}}),
        ))
        .await
        .unwrap();
        let pids = session_pids(&stack, &endpoint).await;
        if name == "cancel" {
            let cancel = serde_json::json!({"type": "cancel", "operationId": "op-1"});
            ws.send(Message::Text(cancel.to_string().into()))
                .await
                .unwrap();
            loop {
                let msg = tokio::time::timeout(GONE_WITHIN, ws.next()).await.unwrap();
                let Some(Ok(Message::Text(t))) = msg else {
                    panic!("the socket ended before the command did");
                };
                let ev: serde_json::Value = serde_json::from_str(t.as_str()).unwrap();
                if ev["type"] == "completed" {
                    assert_eq!(ev["state"], "Cancelled", "{ev}");
                    break;
                }
            }
        } else {
            stack.remove_run(&format!("{name}.yaml")).unwrap();
        }
        assert_eq!(
            wait_gone(&pids, GONE_WITHIN).await,
            Vec::<i32>::new(),
            "{name}"
        );
    }
}
