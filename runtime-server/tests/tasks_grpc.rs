//! The task calls of the contract over the Unix socket, as runtimed makes
//! them: the input semantics per backend, exit codes and bounded tails,
//! streamed output, idempotent and superseding starts, cancel and close
//! leaving no process behind, the Run's log rotating under a flood.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use kruntimes_proto::runtime::v1 as pb;
use kruntimes_testkit::{read_pids, wait_gone};
use tokio_stream::StreamExt;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inline_task_runs_once_with_its_exit_code_output_and_environment() {
    let mut s = start().await;
    // It waits for a file, so the watch below sees all of its output.
    let script = "while [ ! -f go ]; do sleep 0.02; done\necho \"$GREETING from $PWD\"\necho \"oops $KRUNTIMES_ATTEMPT\" >&2\nexit 3\n";
    let started = s
        .client
        .tasks
        .start_task(inline("bash", 1, script))
        .await
        .unwrap()
        .into_inner();
    let again = s
        .client
        .tasks
        .start_task(inline("bash", 1, script))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(started, again, "the same attempt is not started twice");
    let mut events = s
        .client
        .tasks
        .watch_task(pb::WatchTaskRequest {
            run_uid: UID.into(),
            attempt: 1,
            output: true,
        })
        .await
        .unwrap()
        .into_inner();
    std::fs::write(s.workspace().join("go"), "").unwrap();
    let (mut out, mut result) = (String::new(), None);
    while let Some(ev) = events.next().await {
        match ev.unwrap().event.unwrap() {
            pb::task_event::Event::Output(o) => out.push_str(&String::from_utf8_lossy(&o.data)),
            pb::task_event::Event::Dropped(n) => panic!("{n} dropped"),
            pb::task_event::Event::Result(r) => result = Some(r),
        }
    }
    let r = result.unwrap();
    let expected = format!("hi from {}\n", s.workspace().display());
    assert_eq!(out.lines().count(), 2, "{out}");
    // Its attempt is in its environment.
    assert!(out.contains(&expected) && out.contains("oops 1\n"), "{out}");
    assert_eq!((r.end, r.exit_code), (pb::TaskEnd::Exited as i32, 3));
    assert_eq!(
        (r.stdout_tail.as_str(), r.stderr_tail.as_str()),
        (expected.as_str(), "oops 1\n")
    );
    assert!(!r.stdout_truncated && !r.stderr_truncated);
    assert_eq!(r.started_unix_ms, started.started_unix_ms);
    assert!(r.finished_unix_ms >= r.started_unix_ms);
    // An ended task answers at once, status included.
    let (_, again) = watch(&mut s, 1, true).await;
    assert_eq!(again, r);
    let status = s
        .client
        .tasks
        .task_status(pb::TaskStatusRequest {
            run_uid: UID.into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((status.attempt, status.result), (1, Some(r)));
    // Its output is in the Run's log, one record per line, labelled.
    let log = std::fs::read_to_string(s.dir.path().join("work/.logs").join(format!("{UID}.log")))
        .unwrap();
    assert!(
        log.contains("\"stream\":\"stdout\"") && log.contains("\"stream\":\"stderr\""),
        "{log}"
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_input_runs_as_the_seeds_say_per_backend() {
    let mut s = start().await;
    // Python: inline is a script.
    s.client
        .tasks
        .start_task(inline(
            "python",
            1,
            "import sys\nprint('py', sys.argv[1:])\n",
        ))
        .await
        .unwrap();
    let (_, r) = watch(&mut s, 1, false).await;
    assert_eq!((r.exit_code, r.stdout_tail.as_str()), (0, "py []\n"));
    // Python: an entrypoint that is not there is the interpreter's exit.
    let mut req = start_req("python", 2);
    req.entrypoint = "nope.py".into();
    req.args = vec!["a".into()];
    s.client.tasks.start_task(req).await.unwrap();
    let (_, r) = watch(&mut s, 2, false).await;
    assert_eq!(r.exit_code, 2);
    assert!(r.stderr_tail.contains("nope.py"), "{}", r.stderr_tail);
    // Python: args alone are shell commands, which it does not run.
    let mut req = start_req("python", 3);
    req.args = vec!["echo hi".into()];
    let refused = s.client.tasks.start_task(req).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::FailedPrecondition);
    assert!(
        refused.message().contains("runs a script"),
        "{}",
        refused.message()
    );
    // Bash: args alone are commands, the first failure ends them.
    let mut req = start_req("bash", 4);
    req.args = vec![
        "echo one".into(),
        "false | true".into(),
        "false".into(),
        "echo never".into(),
    ];
    s.client.tasks.start_task(req).await.unwrap();
    let (_, r) = watch(&mut s, 4, false).await;
    assert_eq!((r.exit_code, r.stdout_tail.as_str()), (1, "one\n"));
    // Bash: inline wins over entrypoint and args.
    let mut req = inline("bash", 5, "echo \"inline $#\"");
    req.entrypoint = "other.sh".into();
    req.args = vec!["x".into()];
    s.client.tasks.start_task(req).await.unwrap();
    let (_, r) = watch(&mut s, 5, false).await;
    assert_eq!((r.exit_code, r.stdout_tail.as_str()), (0, "inline 0\n"));
    // Nothing to run, a bad entrypoint, an older attempt: refused.
    for (req, code) in [
        (start_req("bash", 6), tonic::Code::InvalidArgument),
        (
            pb::StartTaskRequest {
                entrypoint: "../x.sh".into(),
                ..start_req("bash", 6)
            },
            tonic::Code::InvalidArgument,
        ),
        (inline("bash", 1, "true"), tonic::Code::FailedPrecondition),
        (inline("ruby", 6, "true"), tonic::Code::InvalidArgument),
    ] {
        let e = s.client.tasks.start_task(req).await.unwrap_err();
        assert_eq!(e.code(), code, "{}", e.message());
    }
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_and_a_newer_attempt_kill_the_whole_tree() {
    let mut s = start().await;
    let tree = "setsid sleep 2991 & echo $! >> pids; (sleep 2990 & echo $! >> pids); echo $$ >> pids; sleep 2989";
    s.client
        .tasks
        .start_task(inline("bash", 1, tree))
        .await
        .unwrap();
    let pids = read_pids(&s.workspace().join("pids"), 3, WITHIN)
        .await
        .unwrap();
    let cancelled = s
        .client
        .tasks
        .cancel_task(pb::CancelTaskRequest {
            run_uid: UID.into(),
            attempt: 1,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(cancelled.running);
    assert_eq!(wait_gone(&pids, WITHIN).await, Vec::<i32>::new());
    let (_, r) = watch(&mut s, 1, false).await;
    assert_eq!(r.end, pb::TaskEnd::Cancelled as i32);
    assert!(r.exit_code > 128, "{}", r.exit_code);
    // Cancelling again, or an ended task, finds nothing running.
    let again = s
        .client
        .tasks
        .cancel_task(pb::CancelTaskRequest {
            run_uid: UID.into(),
            attempt: 0,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!again.running);
    // A newer attempt replaces a running one, tree and all.
    s.client
        .tasks
        .start_task(inline("bash", 2, tree))
        .await
        .unwrap();
    let pids = read_pids(&s.workspace().join("pids"), 3, WITHIN)
        .await
        .unwrap();
    s.client
        .tasks
        .start_task(inline("bash", 3, "echo third"))
        .await
        .unwrap();
    assert_eq!(wait_gone(&pids, WITHIN).await, Vec::<i32>::new());
    let (_, r) = watch(&mut s, 3, false).await;
    assert_eq!(r.stdout_tail, "third\n");
    let old = s
        .client
        .tasks
        .watch_task(pb::WatchTaskRequest {
            run_uid: UID.into(),
            attempt: 2,
            output: false,
        })
        .await
        .unwrap_err();
    assert_eq!(old.code(), tonic::Code::NotFound);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_keeps_a_bounded_utf8_tail_and_a_rotated_log() {
    let mut s = start().await;
    // 10 MiB of "é" (two bytes each) and a last line, once told to.
    let script = "import os, sys, time\nwhile not os.path.exists('go'):\n    time.sleep(0.02)\nw = sys.stdout.write\nfor _ in range(80):\n    w('é' * 65536 + '\\n')\nw('end\\n')\n";
    s.client
        .tasks
        .start_task(inline("python", 1, script))
        .await
        .unwrap();
    // A watcher that reads nothing until the end: what it missed is
    // counted, to the byte.
    let mut slow = s
        .client
        .tasks
        .watch_task(pb::WatchTaskRequest {
            run_uid: UID.into(),
            attempt: 1,
            output: true,
        })
        .await
        .unwrap()
        .into_inner();
    std::fs::write(s.workspace().join("go"), "").unwrap();
    let (_, r) = watch(&mut s, 1, false).await;
    let (mut seen, mut dropped, mut ended) = (0u64, 0u64, false);
    while let Some(ev) = slow.next().await {
        match ev.unwrap().event.unwrap() {
            pb::task_event::Event::Output(o) => seen += o.data.len() as u64,
            pb::task_event::Event::Dropped(n) => dropped += n,
            pb::task_event::Event::Result(_) => ended = true,
        }
    }
    assert!(ended && dropped > 0, "{seen} seen, {dropped} dropped");
    assert_eq!(seen + dropped, 80 * (65536 * 2 + 1) + 4);
    assert_eq!(r.exit_code, 0);
    assert!(r.stdout_truncated);
    assert!(
        r.stdout_tail.len() <= 4096 && r.stdout_tail.len() >= 4090,
        "{}",
        r.stdout_tail.len()
    );
    assert!(r.stdout_tail.ends_with("é\nend\n"));
    let logs = s.dir.path().join("work/.logs");
    let now = std::fs::metadata(logs.join(format!("{UID}.log")))
        .unwrap()
        .len();
    let old = std::fs::metadata(logs.join(format!("{UID}.log.1")))
        .unwrap()
        .len();
    assert!(now <= 1100 * 1024 && old <= 1100 * 1024, "{now} {old}");
    // Closing removes the working directory and the log.
    let closed = s
        .client
        .tasks
        .close_task(pb::CloseTaskRequest {
            run_uid: UID.into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(closed.existed);
    assert!(!s.workspace().exists());
    assert!(!logs.join(format!("{UID}.log")).exists());
    let again = s
        .client
        .tasks
        .close_task(pb::CloseTaskRequest {
            run_uid: UID.into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!again.existed);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reset_and_stop_end_running_tasks() {
    let mut s = start().await;
    s.client
        .tasks
        .start_task(inline("bash", 1, "echo $$ >> pids; sleep 2988"))
        .await
        .unwrap();
    let pids = read_pids(&s.workspace().join("pids"), 1, WITHIN)
        .await
        .unwrap();
    let dropped = s
        .client
        .server
        .reset(pb::ResetRequest {})
        .await
        .unwrap()
        .into_inner()
        .dropped;
    assert_eq!(dropped, 1);
    assert_eq!(wait_gone(&pids, WITHIN).await, Vec::<i32>::new());
    s.client
        .tasks
        .start_task(inline("bash", 1, "echo $$ >> pids; sleep 2987"))
        .await
        .unwrap();
    let pids = read_pids(&s.workspace().join("pids"), 1, WITHIN)
        .await
        .unwrap();
    s.stop().await;
    assert_eq!(wait_gone(&pids, WITHIN).await, Vec::<i32>::new());
}
