//! The session calls of the contract over the Unix socket, as runtimed
//! makes them: streamed commands, a cancelled command, a closed session and
//! a stopped server leaving no process behind, files, Reset.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use kruntimes_proto::runtime::v1 as pb;
use kruntimes_testkit::{read_pids, wait_gone};
use tokio_stream::StreamExt;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_stream_output_then_their_result_in_the_sessions_environment() {
    let mut s = start().await;
    s.open().await;
    let events = s.shell("echo $GREETING; echo err >&2; pwd; exit 3").await;
    let (out, r) = finish(events).await;
    assert_eq!(r.state, pb::CommandState::Failed as i32);
    assert_eq!(r.exit_code, Some(3));
    let stdout = format!("hi\n{}\n", s.workspace().display());
    assert_eq!(String::from_utf8_lossy(&r.stdout), stdout);
    assert_eq!(r.stderr, b"err\n");
    let missing = s
        .client
        .sessions
        .run_command(pb::RunCommandRequest {
            run_uid: UID.into(),
            argv: vec!["no-such-program-krt".into()],
            timeout_ms: 10_000,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let (_, r) = finish(missing).await;
    assert_eq!(
        (r.state, r.exit_code),
        (pb::CommandState::Failed as i32, Some(127))
    );
    assert_eq!(
        out.len(),
        stdout.len() + 4,
        "every byte was streamed: {out}"
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_command_leaves_no_process_behind() {
    let mut s = start().await;
    s.open().await;
    let mut events = s
        .shell("setsid sleep 2997 & echo $! >> pids; (sleep 2996 & echo $! >> pids); echo $$ >> pids; echo started; sleep 2995")
        .await;
    // Wait for the first output, then go away.
    let first = events.next().await.unwrap().unwrap();
    assert!(matches!(
        first.event,
        Some(pb::command_event::Event::Output(_))
    ));
    let pids = read_pids(&s.workspace().join("pids"), 3, WITHIN)
        .await
        .unwrap();
    drop(events);
    assert_eq!(wait_gone(&pids, WITHIN).await, Vec::<i32>::new());
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_a_session_kills_its_commands_and_removes_the_workspace() {
    let mut s = start().await;
    s.open().await;
    let events = s
        .shell("setsid sleep 2994 & echo $! >> pids; echo $$ >> pids; sleep 2993")
        .await;
    let pids = read_pids(&s.workspace().join("pids"), 2, WITHIN)
        .await
        .unwrap();
    let closed = s
        .client
        .sessions
        .close_session(pb::CloseSessionRequest {
            run_uid: UID.into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(closed.existed);
    assert_eq!(wait_gone(&pids, WITHIN).await, Vec::<i32>::new());
    assert!(!s.workspace().exists());
    drop(events);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_are_written_read_and_listed_beneath_the_workspace_only() {
    use pb::file_operation_request::Op;
    let mut s = start().await;
    s.open().await;
    let op = |op| pb::FileOperationRequest {
        run_uid: UID.into(),
        op: Some(op),
    };
    s.client
        .sessions
        .file_operation(op(Op::Mkdir(pb::PathRequest { path: "d".into() })))
        .await
        .unwrap();
    s.client
        .sessions
        .file_operation(op(Op::Write(pb::WriteFile {
            path: "d/f.txt".into(),
            content: b"hello".to_vec(),
        })))
        .await
        .unwrap();
    let read = s
        .client
        .sessions
        .read_file(pb::ReadFileRequest {
            run_uid: UID.into(),
            path: "d/f.txt".into(),
            max_bytes: 0,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(read.content, b"hello");
    let too_big = s
        .client
        .sessions
        .read_file(pb::ReadFileRequest {
            run_uid: UID.into(),
            path: "d/f.txt".into(),
            max_bytes: 2,
        })
        .await
        .unwrap_err();
    assert_eq!(too_big.code(), tonic::Code::OutOfRange);
    let listed = s
        .client
        .sessions
        .list_files(pb::ListFilesRequest {
            run_uid: UID.into(),
            path: "d".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(listed.entries.len(), 1);
    assert_eq!(
        (
            listed.entries[0].name.as_str(),
            listed.entries[0].r#type.as_str()
        ),
        ("f.txt", "file")
    );
    let escape = s
        .client
        .sessions
        .file_operation(op(Op::Write(pb::WriteFile {
            path: "../x".into(),
            content: vec![],
        })))
        .await
        .unwrap_err();
    assert_eq!(escape.code(), tonic::Code::InvalidArgument);
    let missing = s
        .client
        .sessions
        .file_operation(op(Op::Delete(pb::PathRequest {
            path: "nope".into(),
        })))
        .await
        .unwrap_err();
    assert_eq!(missing.code(), tonic::Code::NotFound);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reset_drops_every_session_and_stopping_removes_the_socket() {
    let mut s = start().await;
    s.open().await;
    let dropped = s
        .client
        .server
        .reset(pb::ResetRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(dropped.dropped, 1);
    assert!(!s.workspace().exists());
    let socket = s.dir.path().join("rs.sock");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&socket).unwrap().permissions().mode() & 0o777,
        0o600
    );
    s.stop().await;
    assert!(!socket.exists(), "the socket is removed on exit");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_the_server_ends_running_commands_instead_of_waiting_for_them() {
    let mut s = start().await;
    s.open().await;
    let events = s.shell("echo $$ >> pids; sleep 2992").await;
    let pids = read_pids(&s.workspace().join("pids"), 1, WITHIN)
        .await
        .unwrap();
    let stopped = tokio::time::timeout(Duration::from_secs(60), s.stop()).await;
    assert!(stopped.is_ok(), "the server waited for the command");
    assert_eq!(wait_gone(&pids, WITHIN).await, Vec::<i32>::new());
    drop(events);
}
