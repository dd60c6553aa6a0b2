use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use super::*;
use crate::session::ops::{self, Operation};
use crate::session::outcome::{OpState, OperationResult};

fn env() -> BTreeMap<String, String> {
    BTreeMap::from([
        ("PATH".to_owned(), std::env::var("PATH").unwrap_or_default()),
        ("LANG".to_owned(), "C.UTF-8".to_owned()),
    ])
}

fn shell(script: &str) -> Operation {
    ops::validate(ops::OperationRequest {
        command: Some(ops::CommandSpec {
            argv: None,
            shell: Some(script.into()),
        }),
        ..Default::default()
    })
    .unwrap()
}

fn open(limits: SessionLimits) -> (tempfile::TempDir, Arc<Session>) {
    let dir = tempfile::tempdir().unwrap();
    let s = Session::open("uid-1", &dir.path().join("ws"), env(), limits).unwrap();
    (dir, s)
}

async fn run(s: &Session, op: Operation) -> OperationResult {
    let (_, rx) = s.submit(op, None).unwrap();
    rx.await.unwrap()
}

/// Dead: no such process, or a zombie waiting for a reaper (an orphan's
/// reaper here may be a PID 1 that never reaps).
fn gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state == "Z" || state == "X"),
    }
}

#[tokio::test]
async fn commands_and_mutations_run_in_fifo_order() {
    let (_d, s) = open(SessionLimits::default());
    let mut rxs = Vec::new();
    for i in 0..10 {
        // Later operations are faster: only a FIFO queue keeps the order.
        let sleep = format!("0.0{}", 9 - i);
        let (_, rx) = s
            .submit(shell(&format!("sleep {sleep}; echo {i} >> order")), None)
            .unwrap();
        rxs.push(rx);
    }
    for rx in rxs {
        assert_eq!(rx.await.unwrap().state, OpState::Succeeded);
    }
    let order = std::fs::read_to_string(s.root().join("order")).unwrap();
    let got: Vec<u32> = order.lines().map(|l| l.parse().unwrap()).collect();
    assert_eq!(got, (0..10).collect::<Vec<_>>());
}

#[tokio::test]
async fn command_results_carry_exit_code_output_and_bounds() {
    let (_d, s) = open(SessionLimits::default());
    let r = run(&s, shell("echo out; echo err >&2; exit 3")).await;
    assert_eq!((r.state, r.exit_code), (OpState::Failed, Some(3)));
    assert_eq!((r.stdout.as_str(), r.stderr.as_str()), ("out\n", "err\n"));
    let big = run(&s, shell("head -c 3000000 /dev/zero | tr '\\0' x")).await;
    assert!(big.stdout_truncated && big.stdout.len() == ops::MAX_OUTPUT_BYTES);
    assert_eq!(big.state, OpState::Succeeded);
    let stdin = ops::validate(ops::OperationRequest {
        command: Some(ops::CommandSpec {
            argv: Some(vec!["cat".into()]),
            shell: None,
        }),
        stdin: Some("piped".into()),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(run(&s, stdin).await.stdout, "piped");
    let missing = ops::validate(ops::OperationRequest {
        command: Some(ops::CommandSpec {
            argv: Some(vec!["no-such-program-krt".into()]),
            shell: None,
        }),
        ..Default::default()
    })
    .unwrap();
    let r = run(&s, missing).await;
    assert_eq!((r.state, r.exit_code), (OpState::Failed, Some(127)));
    let r = run(&s, shell("pwd; echo $HOME")).await;
    let root = s.root().display().to_string();
    assert_eq!(r.stdout, format!("{root}\n{root}\n"));
}

#[tokio::test]
async fn timeout_kills_the_whole_process_tree() {
    let (_d, s) = open(SessionLimits::default());
    let op = ops::validate(ops::OperationRequest {
        command: Some(ops::CommandSpec {
            argv: None,
            // A child that ignores SIGTERM and a grandchild in the background.
            shell: Some("sleep 300 & echo $! > bg; trap '' TERM; echo $$ > fg; sleep 300".into()),
        }),
        timeout_seconds: Some(1),
        ..Default::default()
    })
    .unwrap();
    let r = run(&s, op).await;
    assert_eq!(r.state, OpState::TimedOut);
    for f in ["fg", "bg"] {
        let pid: i32 = std::fs::read_to_string(s.root().join(f))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let mut ok = false;
        for _ in 0..50 {
            if gone(pid) {
                ok = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(ok, "process {pid} ({f}) survived the timeout");
    }
}

#[tokio::test]
async fn a_full_queue_refuses_more_work() {
    let (_d, s) = open(SessionLimits {
        queue_size: 2,
        ..SessionLimits::default()
    });
    let mut rxs = Vec::new();
    for _ in 0..3 {
        rxs.push(s.submit(shell("sleep 0.3"), None).unwrap().1);
    }
    assert_eq!(
        s.submit(shell("true"), None).unwrap_err(),
        SubmitError::QueueFull
    );
    for rx in rxs {
        assert_eq!(rx.await.unwrap().state, OpState::Succeeded);
    }
    assert!(s.submit(shell("true"), None).is_ok(), "capacity returns");
}

#[tokio::test]
async fn cancel_close_terminates_running_and_cancels_queued_work() {
    let (_d, s) = open(SessionLimits::default());
    let (_, running) = s.submit(shell("echo $$ > pid; sleep 300"), None).unwrap();
    let (_, queued) = s.submit(shell("touch should-not-run"), None).unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let pid: i32 = std::fs::read_to_string(s.root().join("pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let root = s.root().to_path_buf();
    s.close(CloseMode::Cancel).await;
    assert_eq!(running.await.unwrap().state, OpState::Cancelled);
    assert_eq!(queued.await.unwrap().state, OpState::Cancelled);
    assert!(gone(pid));
    assert!(!root.exists(), "the workspace is removed");
    assert_eq!(
        s.submit(shell("true"), None).unwrap_err(),
        SubmitError::Closed
    );
}

#[tokio::test]
async fn drain_close_finishes_accepted_work() {
    let (_d, s) = open(SessionLimits::default());
    let (_, a) = s.submit(shell("sleep 0.2; echo a"), None).unwrap();
    let (_, b) = s.submit(shell("echo b"), None).unwrap();
    s.close(CloseMode::Drain).await;
    assert_eq!(a.await.unwrap().stdout, "a\n");
    assert_eq!(b.await.unwrap().stdout, "b\n");
}

#[tokio::test]
async fn files_round_trip_32_mib_and_stream_output_in_order() {
    let (_d, s) = open(SessionLimits::default());
    let content: Vec<u8> = (0..ops::MAX_FILE_BYTES).map(|i| (i % 251) as u8).collect();
    let w = run(
        &s,
        Operation::WriteFile {
            path: "big.bin".into(),
            content: content.clone(),
        },
    )
    .await;
    assert_eq!(w.state, OpState::Succeeded);
    assert_eq!(s.read_file("big.bin").unwrap(), content);
    let escape = run(
        &s,
        Operation::WriteFile {
            path: "../x".into(),
            content: vec![1],
        },
    )
    .await;
    assert_eq!(escape.state, OpState::Failed);

    let (tx, mut rx) = mpsc::channel(64);
    let (_, done) = s
        .submit(
            shell("for i in 1 2 3; do echo line$i; sleep 0.05; done"),
            Some(tx),
        )
        .unwrap();
    let mut text = String::new();
    while let Some(chunk) = rx.recv().await {
        assert_eq!(chunk.stream, "stdout");
        text.push_str(&String::from_utf8_lossy(&chunk.data));
    }
    assert_eq!(text, "line1\nline2\nline3\n");
    assert_eq!(done.await.unwrap().stdout, text);
}

#[tokio::test]
async fn a_dropped_stream_does_not_cancel_admitted_work() {
    let (_d, s) = open(SessionLimits::default());
    let (tx, rx) = mpsc::channel(1);
    let (_, done) = s
        .submit(
            shell("for i in $(seq 1 200); do echo $i; done; touch finished"),
            Some(tx),
        )
        .unwrap();
    drop(rx);
    assert_eq!(done.await.unwrap().state, OpState::Succeeded);
    assert!(s.root().join("finished").exists());
}

#[tokio::test]
async fn single_operations_can_be_cancelled_queued_or_running() {
    let (_d, s) = open(SessionLimits::default());
    let (running_id, running) = s.submit(shell("echo $$ > pid; sleep 300"), None).unwrap();
    let (queued_id, queued) = s.submit(shell("touch should-not-run"), None).unwrap();
    let (_, after) = s.submit(shell("echo after"), None).unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(s.cancel_operation(&queued_id));
    assert!(s.cancel_operation(&running_id));
    assert_eq!(running.await.unwrap().state, OpState::Cancelled);
    assert_eq!(queued.await.unwrap().state, OpState::Cancelled);
    assert_eq!(
        after.await.unwrap().stdout,
        "after\n",
        "the session goes on"
    );
    assert!(!s.root().join("should-not-run").exists());
    assert!(
        !s.cancel_operation(&running_id),
        "finished operations are unknown"
    );
}
