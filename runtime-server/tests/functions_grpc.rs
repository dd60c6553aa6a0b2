//! The function calls of the contract over the Unix socket, as runtimed
//! makes them: Info, a function registered and invoked, the worker fast
//! path — a leased worker answering on its own pipes and dying with its
//! lease — and the direct invoke path, answering as InvokeFunction does.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use kruntimes_proto::runtime::v1 as pb;
use kruntimes_proto::runtime::{InvokeError, invoke};
use kruntimes_testkit::wait_gone;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn info_names_the_server_and_its_instance() {
    let mut s = start().await;
    let info = s
        .client
        .server
        .info(pb::InfoRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(info.runtimes, ["python", "bash"]);
    assert_eq!(
        info.services,
        [
            kruntimes_proto::runtime::FUNCTION_RUNTIME,
            kruntimes_proto::runtime::SESSION_RUNTIME,
            kruntimes_proto::runtime::TASK_RUNTIME,
            kruntimes_proto::runtime::ARTIFACT_RUNTIME
        ]
    );
    assert_eq!(info.contract, kruntimes_proto::runtime::CONTRACT);
    assert!(!info.instance_id.is_empty());
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
        .functions
        .invoke_function(call(r#"{"a":1}"#))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(out.outcome, Some(Outcome::Output(br#"{"a": 1}"#.to_vec())));
    let raised = s
        .client
        .functions
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
        .functions
        .invoke_function(pb::InvokeFunctionRequest {
            handle: "fn-other".into(),
            ..call("{}")
        })
        .await
        .unwrap()
        .into_inner();
    let stale = invoke::decode(stale);
    assert!(
        matches!(stale, Err(InvokeError::NotRegistered(_))),
        "{stale:?}"
    );
    s.stop().await;
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
        .server
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
    let refusal = answer.refusal.map(InvokeError::from_failure);
    assert!(
        matches!(refusal, Some(InvokeError::NotRegistered(_))) && fds.is_empty(),
        "{refusal:?}"
    );
    drop(refused);

    let (conn, answer, fds) = lease(handle.clone()).await;
    assert!(answer.refusal.is_none(), "{answer:?}");
    let [stdin, stdout]: [std::os::fd::OwnedFd; 2] = fds.try_into().unwrap();
    let mut stdin = tokio::net::unix::pipe::Sender::from_owned_fd(stdin).unwrap();
    let mut stdout = tokio::net::unix::pipe::Receiver::from_owned_fd(stdout).unwrap();
    let Answer::Output { body: out, .. } =
        worker::exchange(&mut stdin, &mut stdout, 1, b"{\"a\": 1}", 1 << 20)
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
        .functions
        .invoke_function(Server::call(&handle, b"{}", 5_000))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        invoke::decode(busy),
        Err(InvokeError::Leased),
        "an invocation of a leased worker"
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
    let Ok(Answer::Output { body: out, .. }) =
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
        .functions
        .invoke_function(Server::call(&handle, b"{}", 10_000))
        .await
        .unwrap()
        .into_inner();
    let after = invoke::decode(after);
    assert!(after.is_ok(), "served through the server again: {after:?}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_direct_path_answers_as_invoke_function_and_a_hang_up_cancels_the_call() {
    use kruntimes_proto::runtime::lease::{recv_bounded, send};
    let mut s = start().await;
    let sh = r#"run() {
  case "$1" in
    '{"fail": 1}') echo "no luck" >&2; return 3 ;;
    '{"nap": 1}') sleep 30 & echo "$!" > nap.pid; wait ;;
    *) printf '{"got": %s}' "$1" ;;
  esac
}
"#;
    let handle = s.register_as("bash", "main.run", sh).await;
    let info = s
        .client
        .server
        .info(pb::InfoRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(info.invoke_socket, "rs.sock.invoke");
    let socket = s.dir.path().join(&info.invoke_socket);
    let conn = tokio::net::UnixStream::connect(&socket).await.unwrap();
    let ask = async |req: pb::InvokeFunctionRequest| {
        send(&conn, &req, &[]).await.unwrap();
        let answer = recv_bounded::<pb::InvokeFunctionResponse>(&conn, 1 << 20)
            .await
            .unwrap();
        invoke::decode(answer)
    };

    // Call after call on one connection: output, a handler error, refusals.
    for input in [r#"{"a": 1}"#, r#"{"b": [2]}"#] {
        let answer = ask(Server::call(&handle, input.as_bytes(), 10_000)).await;
        let expected = format!(r#"{{"got": {input}}}"#).into_bytes();
        assert_eq!(answer, Ok(expected));
    }
    let failed = ask(Server::call(&handle, br#"{"fail": 1}"#, 10_000)).await;
    match failed {
        Err(InvokeError::Function { kind, message }) => {
            assert_eq!(kind, "ExitStatus");
            assert!(message.contains("no luck"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    let stale = ask(pb::InvokeFunctionRequest {
        handle: "fn-other".into(),
        ..Server::call(&handle, b"{}", 10_000)
    })
    .await;
    assert!(
        matches!(stale, Err(InvokeError::NotRegistered(_))),
        "{stale:?}"
    );
    let invalid = ask(Server::call(&handle, b"{}", 0)).await;
    assert!(
        matches!(invalid, Err(InvokeError::InvalidInput(_))),
        "{invalid:?}"
    );

    // A caller that hangs up mid-call cancels it: the tree is killed.
    send(&conn, &Server::call(&handle, br#"{"nap": 1}"#, 60_000), &[])
        .await
        .unwrap();
    let pid_file = s.workspace().join("nap.pid");
    let deadline = std::time::Instant::now() + WITHIN;
    let pid = loop {
        assert!(
            std::time::Instant::now() < deadline,
            "the call never started"
        );
        if let Some(pid) = std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|t| t.trim().parse::<i32>().ok())
        {
            break pid;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    };
    drop(conn);
    assert_eq!(wait_gone(&[pid], WITHIN).await, Vec::<i32>::new());

    // A new connection is served as before.
    let conn = tokio::net::UnixStream::connect(&socket).await.unwrap();
    send(&conn, &Server::call(&handle, b"[]", 10_000), &[])
        .await
        .unwrap();
    let again = recv_bounded::<pb::InvokeFunctionResponse>(&conn, 1 << 20)
        .await
        .unwrap();
    assert!(invoke::decode(again.clone()).is_ok(), "{again:?}");
    s.stop().await;
}
