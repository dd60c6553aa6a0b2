//! One session's queue against a scripted Runtime Server: FIFO order,
//! bounds, cancellation (the server sees its call dropped), drain and
//! close, streamed output.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use super::*;
use crate::runtime::fake::{self, Served};
use crate::session::ops::Operation;
use crate::session::outcome::{OpState, OperationResult};

/// A scripted command (see [`crate::runtime::fake`]).
fn steps(steps: &[&str]) -> Operation {
    Operation::Command {
        argv: steps.iter().map(|s| s.to_string()).collect(),
        stdin: Vec::new(),
        cwd: String::new(),
        env: Default::default(),
        timeout_seconds: None,
    }
}

async fn open(limits: SessionLimits) -> (Served, Arc<Session>) {
    let server = fake::start().await;
    let s = Session::open("uid-1", server.link.clone(), limits);
    (server, s)
}

async fn run(s: &Session, op: Operation) -> OperationResult {
    let (_, rx) = s.submit(op, None).unwrap();
    rx.await.unwrap()
}

fn commands(server: &Served, prefix: &str) -> Vec<String> {
    server
        .fake
        .calls()
        .into_iter()
        .filter_map(|c| c.strip_prefix(prefix).map(str::to_owned))
        .collect()
}

#[tokio::test]
async fn commands_and_mutations_run_in_fifo_order() {
    let (server, s) = open(SessionLimits::default()).await;
    let mut rxs = Vec::new();
    for i in 0..6 {
        // Later operations are faster: only a FIFO queue keeps the order.
        let sleep = ((6 - i) * 20).to_string();
        let (_, rx) = s
            .submit(steps(&["sleep-ms", &sleep, "out", &i.to_string()]), None)
            .unwrap();
        rxs.push(rx);
    }
    for rx in rxs {
        assert_eq!(rx.await.unwrap().state, OpState::Succeeded);
    }
    let finished: Vec<String> = commands(&server, "finished ")
        .iter()
        .map(|c| c.rsplit(' ').next().unwrap().to_owned())
        .collect();
    assert_eq!(finished, ["0", "1", "2", "3", "4", "5"]);
}

#[tokio::test]
async fn command_results_carry_exit_code_and_output() {
    let (_server, s) = open(SessionLimits::default()).await;
    let r = run(&s, steps(&["out", "out\n", "err", "err\n", "exit", "3"])).await;
    assert_eq!((r.state, r.exit_code), (OpState::Failed, Some(3)));
    assert_eq!((r.stdout.as_str(), r.stderr.as_str()), ("out\n", "err\n"));
    let missing = run(
        &s,
        Operation::File(kruntimes_proto::runtime::FileOp::Delete {
            path: "missing".into(),
        }),
    )
    .await;
    assert_eq!(missing.state, OpState::Failed);
    assert_eq!(missing.error.as_deref(), Some("missing not found"));
}

#[tokio::test]
async fn a_full_queue_refuses_more_work() {
    let (_server, s) = open(SessionLimits {
        queue_size: 2,
        ..SessionLimits::default()
    })
    .await;
    let mut rxs = Vec::new();
    for _ in 0..3 {
        rxs.push(s.submit(steps(&["sleep-ms", "300"]), None).unwrap().1);
    }
    assert_eq!(
        s.submit(steps(&["exit", "0"]), None).unwrap_err(),
        SubmitError::QueueFull
    );
    for rx in rxs {
        assert_eq!(rx.await.unwrap().state, OpState::Succeeded);
    }
    assert!(
        s.submit(steps(&["exit", "0"]), None).is_ok(),
        "capacity returns"
    );
}

#[tokio::test]
async fn cancel_close_drops_the_running_command_and_cancels_queued_work() {
    let (server, s) = open(SessionLimits::default()).await;
    let (_, running) = s.submit(steps(&["sleep-ms", "30000"]), None).unwrap();
    let (_, queued) = s.submit(steps(&["out", "should-not-run"]), None).unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    s.close(Release::Cancel).await;
    assert_eq!(running.await.unwrap().state, OpState::Cancelled);
    assert_eq!(queued.await.unwrap().state, OpState::Cancelled);
    let calls = server.fake.calls();
    assert!(
        calls.contains(&"cancelled sleep-ms 30000".to_owned()),
        "{calls:?}"
    );
    assert!(
        !calls.iter().any(|c| c.contains("should-not-run")),
        "{calls:?}"
    );
    assert_eq!(calls.last().map(String::as_str), Some("close uid-1"));
    assert_eq!(
        s.submit(steps(&["exit", "0"]), None).unwrap_err(),
        SubmitError::Closed
    );
}

#[tokio::test]
async fn drain_close_finishes_accepted_work() {
    let (_server, s) = open(SessionLimits::default()).await;
    let (_, a) = s
        .submit(steps(&["sleep-ms", "200", "out", "a"]), None)
        .unwrap();
    let (_, b) = s.submit(steps(&["out", "b"]), None).unwrap();
    s.close(Release::Drain).await;
    assert_eq!(a.await.unwrap().stdout, "a");
    assert_eq!(b.await.unwrap().stdout, "b");
}

#[tokio::test]
async fn output_is_streamed_in_order_then_the_result() {
    let (_server, s) = open(SessionLimits::default()).await;
    let (tx, mut rx) = mpsc::channel(64);
    let (_, done) = s
        .submit(
            steps(&["out", "line1\n", "err", "e\n", "out", "line2\n"]),
            Some(tx),
        )
        .unwrap();
    let mut seen = Vec::new();
    while let Some(chunk) = rx.recv().await {
        seen.push((
            chunk.stream,
            String::from_utf8_lossy(&chunk.data).into_owned(),
        ));
    }
    assert_eq!(
        seen,
        [
            ("stdout", "line1\n".to_owned()),
            ("stderr", "e\n".to_owned()),
            ("stdout", "line2\n".to_owned())
        ]
    );
    assert_eq!(done.await.unwrap().stdout, "line1\nline2\n");
}

#[tokio::test]
async fn a_dropped_stream_does_not_cancel_admitted_work() {
    let (server, s) = open(SessionLimits::default()).await;
    let (tx, rx) = mpsc::channel(1);
    let (_, done) = s
        .submit(
            steps(&["out", "1", "out", "2", "out", "3", "out", "done"]),
            Some(tx),
        )
        .unwrap();
    drop(rx);
    assert_eq!(done.await.unwrap().state, OpState::Succeeded);
    assert_eq!(commands(&server, "finished ").len(), 1);
}

#[tokio::test]
async fn single_operations_can_be_cancelled_queued_or_running() {
    let (server, s) = open(SessionLimits::default()).await;
    let (running_id, running) = s.submit(steps(&["sleep-ms", "30000"]), None).unwrap();
    let (queued_id, queued) = s.submit(steps(&["out", "should-not-run"]), None).unwrap();
    let (_, after) = s.submit(steps(&["out", "after"]), None).unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(s.cancel_operation(&queued_id));
    assert!(s.cancel_operation(&running_id));
    assert_eq!(running.await.unwrap().state, OpState::Cancelled);
    assert_eq!(queued.await.unwrap().state, OpState::Cancelled);
    assert_eq!(after.await.unwrap().stdout, "after", "the session goes on");
    let calls = server.fake.calls();
    assert!(
        calls.contains(&"cancelled sleep-ms 30000".to_owned()),
        "the server saw the cancel: {calls:?}"
    );
    assert!(!calls.iter().any(|c| c.contains("should-not-run")));
    assert!(
        !s.cancel_operation(&running_id),
        "finished operations are unknown"
    );
}
