//! The contract over the Unix socket, as runtimed calls it: Info and Reset,
//! a function registered and invoked, and sessions — streamed commands, a
//! cancelled command and a closed session leaving no process behind, files.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use kruntimes_proto::runtime::v1 as pb;
use kruntimes_proto::runtime::v1::runtime_server_client::RuntimeServerClient;
use kruntimes_runtime_server::cli::{ServeArgs, serve};
use kruntimes_runtime_server::contain::Shim;
use kruntimes_testkit::{read_pids, wait_gone};
use tokio_stream::StreamExt;
use tonic::transport::Channel;

const UID: &str = "0f0e0d0c-0000-4000-8000-0000000000aa";
const WITHIN: Duration = Duration::from_secs(20);

struct Server {
    dir: tempfile::TempDir,
    client: RuntimeServerClient<Channel>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
}

async fn start() -> Server {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("rs.sock");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let args = ServeArgs {
        socket: Some(socket.clone()),
        work_root: Some(dir.path().join("work")),
        python: "python3".into(),
        python_spares: 0,
    };
    let shim = Shim::new(env!("CARGO_BIN_EXE_runtime-server"), &[]);
    let task = tokio::spawn(serve(args, shim, async move {
        let _ = stopped.await;
    }));
    while !socket.exists() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Server {
        client: kruntimes_proto::runtime::client(&socket),
        dir,
        stop: Some(stop),
        task: Some(task),
    }
}

impl Server {
    fn workspace(&self) -> std::path::PathBuf {
        self.dir
            .path()
            .join("work")
            .canonicalize()
            .unwrap()
            .join(UID)
    }

    async fn open(&mut self) {
        self.client
            .open_session(pb::OpenSessionRequest {
                run: Some(pb::RunRef {
                    namespace: "default".into(),
                    name: "sandbox".into(),
                    uid: UID.into(),
                    runtime: "bash".into(),
                }),
                attempt: 1,
                source: None,
                env: [("GREETING".to_owned(), "hi".to_owned())].into(),
            })
            .await
            .unwrap();
    }

    /// Registers a Python function with `source` as `main.py`; its handle.
    async fn register(&mut self, source: &str) -> String {
        self.client
            .register_function(pb::RegisterFunctionRequest {
                run: Some(pb::RunRef {
                    namespace: "default".into(),
                    name: "f".into(),
                    uid: UID.into(),
                    runtime: "python".into(),
                }),
                attempt: 1,
                handler: "main.invoke".into(),
                source: Some(pb::Source {
                    inline: source.into(),
                    path: String::new(),
                }),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .handle
    }

    /// An invocation of `handle` with `input`.
    fn call(handle: &str, input: &[u8], timeout_ms: u32) -> pb::InvokeFunctionRequest {
        pb::InvokeFunctionRequest {
            run_uid: UID.into(),
            handle: handle.into(),
            invocation_id: "inv-1".into(),
            input: input.to_vec(),
            timeout_ms,
            max_output_bytes: 0,
        }
    }

    async fn shell(&mut self, script: &str) -> tonic::Streaming<pb::CommandEvent> {
        self.client
            .run_command(pb::RunCommandRequest {
                run_uid: UID.into(),
                argv: vec!["bash".into(), "-c".into(), script.into()],
                timeout_ms: 60_000,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
    }

    async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.task.take() {
            t.await.unwrap().unwrap();
        }
    }
}

/// Output text and the result of a finished command stream.
async fn finish(mut events: tonic::Streaming<pb::CommandEvent>) -> (String, pb::CommandResult) {
    let mut out = String::new();
    while let Some(ev) = events.next().await {
        match ev.unwrap().event.unwrap() {
            pb::command_event::Event::Output(o) => out.push_str(&String::from_utf8_lossy(&o.data)),
            pb::command_event::Event::Result(r) => return (out, r),
        }
    }
    panic!("the stream ended without a result");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn info_names_the_server_and_its_instance() {
    let mut s = start().await;
    let info = s
        .client
        .info(pb::InfoRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(info.runtimes, ["python", "bash"]);
    assert!(info.sessions && !info.instance_id.is_empty());
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_function_answers_with_output_or_a_handler_error() {
    let mut s = start().await;
    let handle = s
        .register(
            "def invoke(r):\n    if r.get('bad'):\n        raise KeyError('k')\n    return r\n",
        )
        .await;
    let call = |input: &str| Server::call(&handle, input.as_bytes(), 10_000);
    use pb::invoke_function_response::Outcome;
    let out = s
        .client
        .invoke_function(call(r#"{"a":1}"#))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(out.outcome, Some(Outcome::Output(br#"{"a": 1}"#.to_vec())));
    let raised = s
        .client
        .invoke_function(call(r#"{"bad":1}"#))
        .await
        .unwrap()
        .into_inner();
    assert!(
        matches!(raised.outcome, Some(Outcome::Error(ref e)) if e.kind == "KeyError"),
        "{raised:?}"
    );
    let stale = s
        .client
        .invoke_function(pb::InvokeFunctionRequest {
            handle: "fn-other".into(),
            ..call("{}")
        })
        .await
        .unwrap_err();
    assert_eq!(stale.code(), tonic::Code::NotFound);
    s.stop().await;
}

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
        .file_operation(op(Op::Mkdir(pb::PathRequest { path: "d".into() })))
        .await
        .unwrap();
    s.client
        .file_operation(op(Op::Write(pb::WriteFile {
            path: "d/f.txt".into(),
            content: b"hello".to_vec(),
        })))
        .await
        .unwrap();
    let read = s
        .client
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
        .file_operation(op(Op::Write(pb::WriteFile {
            path: "../x".into(),
            content: vec![],
        })))
        .await
        .unwrap_err();
    assert_eq!(escape.code(), tonic::Code::InvalidArgument);
    let missing = s
        .client
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
async fn a_leased_worker_answers_on_its_own_pipes_and_dies_with_its_lease() {
    use kruntimes_proto::runtime::lease::{recv, send};
    use kruntimes_proto::runtime::worker::{self, Answer};
    let mut s = start().await;
    let source = "import os\ndef invoke(r):\n    if r.get('crash'):\n        os._exit(4)\n    return {'pid': os.getpid(), **r}\n";
    let handle = s.register(source).await;
    let info = s
        .client
        .info(pb::InfoRequest {})
        .await
        .unwrap()
        .into_inner();
    let socket = s.dir.path().join(&info.worker_socket);
    let lease = |handle: String| {
        let socket = socket.clone();
        async move {
            let conn = tokio::net::UnixStream::connect(&socket).await.unwrap();
            let req = pb::WorkerLeaseRequest {
                run_uid: UID.into(),
                handle,
            };
            send(&conn, &req, &[]).await.unwrap();
            let (answer, fds) = recv::<pb::WorkerLease>(&conn).await.unwrap();
            (conn, answer, fds)
        }
    };
    let (refused, answer, fds) = lease("fn-other".into()).await;
    assert_eq!(
        (answer.code, fds.len()),
        (tonic::Code::NotFound as i32, 0),
        "{answer:?}"
    );
    drop(refused);

    let (conn, answer, fds) = lease(handle.clone()).await;
    assert!(answer.error.is_empty(), "{answer:?}");
    let [stdin, stdout]: [std::os::fd::OwnedFd; 2] = fds.try_into().unwrap();
    let mut stdin = tokio::net::unix::pipe::Sender::from_owned_fd(stdin).unwrap();
    let mut stdout = tokio::net::unix::pipe::Receiver::from_owned_fd(stdout).unwrap();
    let Answer::Output(out) = worker::exchange(&mut stdin, &mut stdout, 1, b"{\"a\": 1}", 1 << 20)
        .await
        .unwrap()
    else {
        panic!("no output");
    };
    let out: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(out["a"], 1);
    let pid = out["pid"].as_i64().unwrap() as i32;
    let busy = s
        .client
        .invoke_function(Server::call(&handle, b"{}", 5_000))
        .await
        .unwrap_err();
    assert_eq!(
        busy.code(),
        tonic::Code::FailedPrecondition,
        "leased: {busy:?}"
    );

    // A crash on the leased pipes: the release reports how the worker ended.
    assert!(
        worker::exchange(&mut stdin, &mut stdout, 2, b"{\"crash\": true}", 1 << 20)
            .await
            .is_err()
    );
    send(&conn, &pb::WorkerRelease {}, &[]).await.unwrap();
    let (released, _) = recv::<pb::WorkerReleased>(&conn).await.unwrap();
    assert_eq!(released.exit, "exit status: 4");
    assert_eq!(wait_gone(&[pid], WITHIN).await, Vec::<i32>::new());

    // The next lease gets a fresh worker; closing it kills that one too.
    let (conn, _, fds) = lease(handle.clone()).await;
    let [stdin, stdout]: [std::os::fd::OwnedFd; 2] = fds.try_into().unwrap();
    let mut stdin = tokio::net::unix::pipe::Sender::from_owned_fd(stdin).unwrap();
    let mut stdout = tokio::net::unix::pipe::Receiver::from_owned_fd(stdout).unwrap();
    let Ok(Answer::Output(out)) =
        worker::exchange(&mut stdin, &mut stdout, 1, b"{}", 1 << 20).await
    else {
        panic!("no output from the fresh worker");
    };
    let fresh: serde_json::Value = serde_json::from_slice(&out).unwrap();
    let fresh = fresh["pid"].as_i64().unwrap() as i32;
    assert_ne!(fresh, pid);
    drop((conn, stdin, stdout));
    assert_eq!(wait_gone(&[fresh], WITHIN).await, Vec::<i32>::new());
    let after = s
        .client
        .invoke_function(Server::call(&handle, b"{}", 10_000))
        .await;
    assert!(after.is_ok(), "served through the server again: {after:?}");
    s.stop().await;
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
