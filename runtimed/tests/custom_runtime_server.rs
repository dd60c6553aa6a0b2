//! The example custom Runtime Server (`examples/runtime-servers/python`),
//! run with real Python on a temporary socket and driven as runtimed drives
//! a Runtime Server: the `kruntimes.runtime.v1` services over a Unix
//! socket — its functions and its tasks — and its tasks once more through a
//! real `runtimed`, whose ownership table carries their results as it does
//! the built-in server's. Its stubs are generated from the contract first,
//! as its Dockerfile does. Python with grpcio and grpcio-tools must be
//! installed (`.ci/run` installs them); a missing one fails the test.

// Test helpers panic on failure: that is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod example;

use std::os::unix::fs::PermissionsExt as _;

use example::{WITHIN, client, runtimed, start};
use kruntimes_proto::agent::v1 as agent;
use kruntimes_proto::ownership::v1 as own;
use kruntimes_proto::runtime::v1 as rt;
use kruntimes_proto::runtime::{Clients, InvokeError, invoke};
use kruntimes_testkit::{read_pids, wait_gone};
use tokio_stream::StreamExt as _;
use tonic::Code;

fn register(uid: &str, attempt: u64, handler: &str) -> rt::RegisterFunctionRequest {
    rt::RegisterFunctionRequest {
        run: Some(rt::RunRef {
            namespace: "team-a".into(),
            name: "shout".into(),
            uid: uid.into(),
            runtime: "upper".into(),
        }),
        attempt,
        handler: handler.into(),
        source: Some(rt::Source {
            inline: "notes for the handler\n".into(),
            path: "docs/notes.txt".into(),
        }),
        env: [("GREETING".to_string(), "hi".to_string())].into(),
        start_timeout_ms: 5000,
        // What runtimed sends for a custom Runtime: no built-in backend.
        backend: String::new(),
        artifacts: false,
    }
}

fn invoke(uid: &str, handle: &str, input: &str) -> rt::InvokeFunctionRequest {
    rt::InvokeFunctionRequest {
        run_uid: uid.into(),
        handle: handle.into(),
        invocation_id: "inv-1".into(),
        input: input.as_bytes().to_vec(),
        timeout_ms: 5000,
        max_output_bytes: 1 << 20,
    }
}

fn output(r: rt::InvokeFunctionResponse) -> serde_json::Value {
    match invoke::decode(r) {
        Ok(out) => serde_json::from_slice(&out).unwrap(),
        other => panic!("not an output: {other:?}"),
    }
}

/// The outcome of one invocation (never a status).
async fn outcome(c: &mut Clients, req: rt::InvokeFunctionRequest) -> Result<Vec<u8>, InvokeError> {
    invoke::decode(c.functions.invoke_function(req).await.unwrap().into_inner())
}

/// Registers `uid` at `attempt` (handler `text`), returning the handle.
async fn registered(c: &mut Clients, uid: &str, attempt: u64) -> String {
    c.functions
        .register_function(register(uid, attempt, "text"))
        .await
        .unwrap()
        .into_inner()
        .handle
}

/// Unregisters `uid`'s registration named `handle`; whether it existed.
async fn unregistered(c: &mut Clients, uid: &str, handle: &str) -> bool {
    c.functions
        .unregister_function(rt::UnregisterFunctionRequest {
            run_uid: uid.into(),
            handle: handle.into(),
        })
        .await
        .unwrap()
        .into_inner()
        .existed
}

fn status(uid: &str) -> rt::FunctionStatusRequest {
    rt::FunctionStatusRequest {
        run_uid: uid.into(),
    }
}

fn code<T: std::fmt::Debug>(r: Result<tonic::Response<T>, tonic::Status>) -> (Code, String) {
    let status = r.expect_err("the call succeeded");
    (status.code(), status.message().to_owned())
}

#[tokio::test]
async fn info_names_the_example_on_a_socket_its_group_may_connect_to() {
    let server = start().await;
    let info = client(&server)
        .server
        .info(rt::InfoRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(info.name, "example-upper");
    assert_eq!(info.runtimes, ["upper"]);
    assert_eq!(
        info.services,
        [
            kruntimes_proto::runtime::FUNCTION_RUNTIME,
            kruntimes_proto::runtime::TASK_RUNTIME
        ]
    );
    assert_eq!(info.contract, kruntimes_proto::runtime::CONTRACT);
    let mode = std::fs::metadata(server.socket())
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o660, "{mode:o}");
}

#[tokio::test]
async fn a_registered_function_is_invoked_many_times() {
    let server = start().await;
    let mut c = client(&server);
    let handle = registered(&mut c, "f-1", 1).await;
    assert!(!handle.is_empty());
    let notes = server.work_root().join("f-1/1/docs/notes.txt");
    assert_eq!(
        std::fs::read_to_string(notes).unwrap(),
        "notes for the handler\n"
    );
    for word in ["hello", "wörld"] {
        let input = serde_json::json!({"text": word, "n": 1}).to_string();
        let out = output(
            c.functions
                .invoke_function(invoke("f-1", &handle, &input))
                .await
                .unwrap()
                .into_inner(),
        );
        assert_eq!(
            out,
            serde_json::json!({"text": word.to_uppercase(), "n": 1})
        );
    }
    let status = c
        .functions
        .function_status(status("f-1"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((status.attempt, status.handle), (1, handle));
    assert!(!status.worker_running);
}

#[tokio::test]
async fn a_higher_attempt_supersedes_and_a_stale_handle_touches_nothing() {
    let server = start().await;
    let mut c = client(&server);
    let first = registered(&mut c, "f-2", 1).await;
    let again = registered(&mut c, "f-2", 1).await;
    assert_eq!(again, first, "the same attempt is idempotent");
    let second = registered(&mut c, "f-2", 2).await;
    assert_ne!(second, first);
    assert!(!server.work_root().join("f-2/1").exists());

    let stale = outcome(&mut c, invoke("f-2", &first, "{}")).await;
    assert!(
        matches!(stale, Err(InvokeError::NotRegistered(_))),
        "{stale:?}"
    );
    let (code_, msg) = code(
        c.functions
            .register_function(register("f-2", 1, "text"))
            .await,
    );
    assert_eq!(code_, Code::FailedPrecondition, "{msg}");
    assert!(!unregistered(&mut c, "f-2", &first).await, "a stale handle");
    let out = c
        .functions
        .invoke_function(invoke("f-2", &second, r#"{"text": "still here"}"#))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(output(out)["text"], "STILL HERE");

    assert!(unregistered(&mut c, "f-2", &second).await);
    assert!(!server.work_root().join("f-2").exists());
    let (code_, _) = code(c.functions.function_status(status("f-2")).await);
    assert_eq!(code_, Code::NotFound);
    assert!(
        !unregistered(&mut c, "f-2", "").await,
        "absent registrations succeed"
    );
}

#[tokio::test]
async fn bad_requests_get_typed_errors() {
    let server = start().await;
    let mut c = client(&server);
    let handle = registered(&mut c, "f-3", 1).await;

    // Unknown handle, unknown Run: outcomes, not statuses.
    for (uid, h) in [("f-3", "made-up"), ("f-9", handle.as_str())] {
        let r = outcome(&mut c, invoke(uid, h, "{}")).await;
        assert!(matches!(r, Err(InvokeError::NotRegistered(_))), "{r:?}");
    }
    // Input that is not JSON is the caller's error…
    let r = outcome(&mut c, invoke("f-3", &handle, "{not json")).await;
    assert!(matches!(r, Err(InvokeError::InvalidInput(_))), "{r:?}");
    // …a valid document the handler cannot use is the handler's.
    let r = outcome(&mut c, invoke("f-3", &handle, r#"{"other": 1}"#)).await;
    match r {
        Err(InvokeError::Function { kind, message }) => {
            assert_eq!(kind, "KeyError");
            assert!(message.contains("'text'"), "{message}");
        }
        other => panic!("not a FunctionError: {other:?}"),
    }
    // Output over the caller's bound.
    let mut small = invoke("f-3", &handle, r#"{"text": "a long enough text"}"#);
    small.max_output_bytes = 8;
    let r = outcome(&mut c, small).await;
    assert!(matches!(r, Err(InvokeError::InvalidOutput(_))), "{r:?}");
    // A handler that is no field name, a source path escaping the workdir.
    let (code_, msg) = code(
        c.functions
            .register_function(register("f-4", 1, "a.b"))
            .await,
    );
    assert_eq!(code_, Code::InvalidArgument, "{msg}");
    let mut escape = register("f-5", 1, "text");
    escape.source.as_mut().unwrap().path = "../../outside.txt".into();
    let (code_, msg) = code(c.functions.register_function(escape).await);
    assert_eq!(code_, Code::InvalidArgument, "{msg}");
    assert!(!server.dir.path().join("outside.txt").exists());
    // Sessions are not served, as Info says.
    let (code_, _) = code(
        c.sessions
            .close_session(rt::CloseSessionRequest {
                run_uid: "f-3".into(),
            })
            .await,
    );
    assert_eq!(code_, Code::Unimplemented);
}

// ---- TaskRuntime ----

/// A tree that outlives its shell unless it is killed whole: a `setsid`
/// child, a double-forked one and the shell, their pids in `pids`.
const TREE: &str = "setsid sleep 2981 & echo $! >> pids; (sleep 2982 & echo $! >> pids); echo $$ >> pids; sleep 2983";

fn run_ref(uid: &str) -> rt::RunRef {
    rt::RunRef {
        namespace: "team-a".into(),
        name: "job".into(),
        uid: uid.into(),
        runtime: "upper".into(),
    }
}

/// A task running `inline` (a Bash script at the default path).
fn start_task(uid: &str, attempt: u64, inline: &str) -> rt::StartTaskRequest {
    rt::StartTaskRequest {
        run: Some(run_ref(uid)),
        attempt,
        source: Some(rt::Source {
            inline: inline.into(),
            path: String::new(),
        }),
        env: [("GREETING".to_string(), "hi".to_string())].into(),
        // What runtimed sends for a custom Runtime: no built-in backend.
        backend: String::new(),
        ..Default::default()
    }
}

/// A task without inline source: `entrypoint` with `args`, or `args` alone.
fn start_program(uid: &str, attempt: u64, entrypoint: &str, args: &[&str]) -> rt::StartTaskRequest {
    rt::StartTaskRequest {
        source: None,
        entrypoint: entrypoint.into(),
        args: args.iter().map(|a| a.to_string()).collect(),
        ..start_task(uid, attempt, "")
    }
}

/// Starts a task; when it started.
async fn started(c: &mut Clients, req: rt::StartTaskRequest) -> i64 {
    c.tasks
        .start_task(req)
        .await
        .unwrap()
        .into_inner()
        .started_unix_ms
}

fn watch_req(uid: &str, attempt: u64, output: bool) -> rt::WatchTaskRequest {
    rt::WatchTaskRequest {
        run_uid: uid.into(),
        attempt,
        output,
    }
}

/// A watch of a task, answered once the server has subscribed it.
async fn follow(
    c: &mut Clients,
    uid: &str,
    attempt: u64,
    output: bool,
) -> tonic::Streaming<rt::TaskEvent> {
    c.tasks
        .watch_task(watch_req(uid, attempt, output))
        .await
        .unwrap()
        .into_inner()
}

/// What a watch streams: stdout, stderr (when asked for) and the result.
async fn collect(mut events: tonic::Streaming<rt::TaskEvent>) -> (String, String, rt::TaskResult) {
    let (mut out, mut err) = (String::new(), String::new());
    while let Some(ev) = events.next().await {
        match ev.unwrap().event.unwrap() {
            rt::task_event::Event::Output(o) => {
                let text = String::from_utf8_lossy(&o.data);
                if o.stream == rt::CommandStream::Stderr as i32 {
                    err.push_str(&text);
                } else {
                    out.push_str(&text);
                }
            }
            rt::task_event::Event::Dropped(n) => panic!("{n} bytes dropped"),
            rt::task_event::Event::Result(r) => return (out, err, r),
        }
    }
    panic!("the stream ended without a result");
}

/// How a task ended, waiting for it.
async fn result(c: &mut Clients, uid: &str, attempt: u64) -> rt::TaskResult {
    collect(follow(c, uid, attempt, false).await).await.2
}

async fn cancelled(c: &mut Clients, uid: &str, attempt: u64) -> bool {
    c.tasks
        .cancel_task(rt::CancelTaskRequest {
            run_uid: uid.into(),
            attempt,
        })
        .await
        .unwrap()
        .into_inner()
        .running
}

async fn closed(c: &mut Clients, uid: &str) -> bool {
    c.tasks
        .close_task(rt::CloseTaskRequest {
            run_uid: uid.into(),
        })
        .await
        .unwrap()
        .into_inner()
        .existed
}

fn task_status(uid: &str) -> rt::TaskStatusRequest {
    rt::TaskStatusRequest {
        run_uid: uid.into(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_starts_once_per_attempt_and_streams_its_output_then_its_result() {
    let server = start().await;
    let mut c = client(&server);
    // It waits for a file, so the watch below sees all of its output.
    let script = "while [ ! -f go ]; do sleep 0.02; done\n\
                  echo \"$GREETING $KRUNTIMES_RUN_UID $KRUNTIMES_ATTEMPT $HOME $PWD\"\n\
                  echo oops >&2\nexit 3\n";
    let first = started(&mut c, start_task("7a5c-1", 1, script)).await;
    let again = started(&mut c, start_task("7a5c-1", 1, "exit 0")).await;
    assert_eq!(again, first, "the same attempt is not started twice");
    let workdir = server.work_root().join("7a5c-1/1").canonicalize().unwrap();
    assert_eq!(
        std::fs::read_to_string(workdir.join("main.sh")).unwrap(),
        script
    );
    // The watch sees what is written from now on: all of it.
    let events = follow(&mut c, "7a5c-1", 1, true).await;
    std::fs::write(workdir.join("go"), "").unwrap();
    let (out, err, r) = collect(events).await;
    let home = workdir.display();
    assert_eq!(out, format!("hi 7a5c-1 1 {home} {home}\n"));
    assert_eq!(err, "oops\n");
    assert_eq!(
        (r.attempt, r.end, r.exit_code),
        (1, rt::TaskEnd::Exited as i32, 3)
    );
    assert_eq!(
        (r.stdout_tail.as_str(), r.stderr_tail.as_str()),
        (out.as_str(), "oops\n")
    );
    assert!(!r.stdout_truncated && !r.stderr_truncated);
    assert_eq!(r.started_unix_ms, first);
    assert!(r.finished_unix_ms >= r.started_unix_ms);
    // An ended task answers with its result at once, status included.
    let (out, _, at_once) = collect(follow(&mut c, "7a5c-1", 0, true).await).await;
    assert_eq!((out.as_str(), &at_once), ("", &r));
    let status = c
        .tasks
        .task_status(task_status("7a5c-1"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((status.attempt, status.started_unix_ms), (1, first));
    assert_eq!(status.result, Some(r));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_attempt_kills_the_older_tree_and_an_older_one_is_refused() {
    let mut server = start().await;
    let mut c = client(&server);
    let uid = "7a5c-2";
    started(&mut c, start_task(uid, 1, TREE)).await;
    let pids = read_pids(&server.work_root().join(uid).join("1/pids"), 3, WITHIN)
        .await
        .unwrap();
    started(&mut c, start_task(uid, 2, "echo second")).await;
    assert_eq!(wait_gone(&pids, WITHIN).await, Vec::<i32>::new());
    assert!(!server.work_root().join(uid).join("1").exists());
    let r = result(&mut c, uid, 2).await;
    assert_eq!((r.attempt, r.exit_code), (2, 0));
    assert_eq!(r.stdout_tail, "second\n");
    // The older attempt is gone, and starting it again is refused.
    let (code_, _) = code(c.tasks.watch_task(watch_req(uid, 1, false)).await);
    assert_eq!(code_, Code::NotFound);
    let (code_, msg) = code(c.tasks.start_task(start_task(uid, 1, "true")).await);
    assert_eq!(code_, Code::FailedPrecondition, "{msg}");
    // An ended task has nothing to cancel.
    assert!(!cancelled(&mut c, uid, 0).await);
    // Closing forgets it and removes its directory; an absent one succeeds.
    assert!(closed(&mut c, uid).await);
    assert!(!server.work_root().join(uid).exists());
    let (code_, _) = code(c.tasks.task_status(task_status(uid)).await);
    assert_eq!(code_, Code::NotFound);
    assert!(!closed(&mut c, uid).await);
    // Reset, and a server told to stop, kill what still runs.
    started(&mut c, start_task(uid, 1, "echo $$ >> pids; sleep 2988")).await;
    let pids = read_pids(&server.work_root().join(uid).join("1/pids"), 1, WITHIN)
        .await
        .unwrap();
    let reset = c.server.reset(rt::ResetRequest {}).await.unwrap();
    assert_eq!(reset.into_inner().dropped, 1);
    assert_eq!(wait_gone(&pids, WITHIN).await, Vec::<i32>::new());
    started(&mut c, start_task(uid, 1, "echo $$ >> pids; sleep 2987")).await;
    let pids = read_pids(&server.work_root().join(uid).join("1/pids"), 1, WITHIN)
        .await
        .unwrap();
    server.stop();
    assert_eq!(wait_gone(&pids, WITHIN).await, Vec::<i32>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_task_is_killed_whole_and_keeps_its_result() {
    let server = start().await;
    let mut c = client(&server);
    let uid = "7a5c-3";
    started(&mut c, start_task(uid, 1, TREE)).await;
    let pids = read_pids(&server.work_root().join(uid).join("1/pids"), 3, WITHIN)
        .await
        .unwrap();
    // Another attempt's cancel touches nothing.
    assert!(!cancelled(&mut c, uid, 2).await);
    assert!(cancelled(&mut c, uid, 1).await);
    assert_eq!(wait_gone(&pids, WITHIN).await, Vec::<i32>::new());
    let r = result(&mut c, uid, 1).await;
    assert_eq!(r.end, rt::TaskEnd::Cancelled as i32);
    assert_eq!(r.exit_code, 128 + 15, "SIGTERM ended the shell");
    assert!(server.work_root().join(uid).join("1").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_kind_of_program_runs_with_its_interpreter() {
    let server = start().await;
    let mut c = client(&server);
    let uid = "7a5c-4";
    // A script whose path ends in .py runs with python3 -u.
    let mut py = start_task(uid, 1, "import sys\nprint('py', sys.argv[1:])\n");
    py.source.as_mut().unwrap().path = "job/main.py".into();
    started(&mut c, py).await;
    let r = result(&mut c, uid, 1).await;
    assert_eq!((r.exit_code, r.stdout_tail.as_str()), (0, "py []\n"));
    // Args alone are shell commands: the first failure ends them,
    // pipelines included.
    let steps = ["echo one", "false | true", "false", "echo never"];
    started(&mut c, start_program(uid, 2, "", &steps)).await;
    let r = result(&mut c, uid, 2).await;
    assert_eq!((r.exit_code, r.stdout_tail.as_str()), (1, "one\n"));
    // Inline source wins over an entrypoint and args.
    let mut inline = start_task(uid, 3, "echo \"inline $#\"");
    inline.entrypoint = "other.sh".into();
    inline.args = vec!["x".into()];
    started(&mut c, inline).await;
    let r = result(&mut c, uid, 3).await;
    assert_eq!((r.exit_code, r.stdout_tail.as_str()), (0, "inline 0\n"));
    // An entrypoint runs with its interpreter; a missing one is its exit.
    for (attempt, entrypoint, exit_code) in [(4, "missing.sh", 127), (5, "bin/missing.py", 2)] {
        started(&mut c, start_program(uid, attempt, entrypoint, &["a"])).await;
        let r = result(&mut c, uid, attempt).await;
        assert_eq!(r.exit_code, exit_code, "{entrypoint}: {}", r.stderr_tail);
        assert!(r.stderr_tail.contains("missing"), "{}", r.stderr_tail);
    }
    // Signal N is 128 + N.
    started(&mut c, start_task(uid, 6, "kill -9 $$")).await;
    assert_eq!(result(&mut c, uid, 6).await.exit_code, 128 + 9);
    // Tails keep the last tail_bytes of each stream, whole characters only.
    let mut flood = start_task(
        uid,
        7,
        "printf 'é%.0s' $(seq 100); echo; printf 'x%.0s' $(seq 50) >&2",
    );
    flood.tail_bytes = 11;
    started(&mut c, flood).await;
    let r = result(&mut c, uid, 7).await;
    assert_eq!(r.stdout_tail, "ééééé\n");
    assert_eq!(r.stderr_tail, "x".repeat(11));
    assert!(r.stdout_truncated && r.stderr_truncated);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_task_requests_get_the_built_in_servers_codes() {
    let server = start().await;
    let mut c = client(&server);
    let uid = "7a5c-5";
    let mut no_run = start_task(uid, 1, "true");
    no_run.run = None;
    let mut escaping_source = start_task(uid, 1, "true");
    escaping_source.source.as_mut().unwrap().path = "../../outside.sh".into();
    let mut bad_env = start_task(uid, 1, "true");
    bad_env.env.insert("A=B".into(), "x".into());
    let malformed = [
        ("no run", no_run),
        ("a malformed run uid", start_task("Not-A-Uid", 1, "true")),
        ("attempt 0", start_task(uid, 0, "true")),
        ("nothing to run", start_program(uid, 1, "", &[])),
        (
            "an escaping entrypoint",
            start_program(uid, 1, "../x.sh", &[]),
        ),
        ("an escaping source path", escaping_source),
        ("a bad env name", bad_env),
        ("a NUL in args", start_program(uid, 1, "", &["echo \0"])),
    ];
    for (what, req) in malformed {
        let (code_, msg) = code(c.tasks.start_task(req).await);
        assert_eq!(code_, Code::InvalidArgument, "{what}: {msg}");
    }
    assert!(!server.dir.path().join("outside.sh").exists());
    // An interpreter the task's PATH lacks is a start failure, not an exit.
    let mut no_bash = start_task(uid, 1, "true");
    no_bash.env.insert("PATH".into(), "/nowhere".into());
    let (code_, msg) = code(c.tasks.start_task(no_bash).await);
    assert_eq!(code_, Code::FailedPrecondition, "{msg}");
    assert!(msg.contains("bash"), "{msg}");
    assert!(!server.work_root().join(uid).exists());
    // Unknown tasks: not found, nothing to cancel or close.
    let (code_, _) = code(c.tasks.watch_task(watch_req(uid, 1, true)).await);
    assert_eq!(code_, Code::NotFound);
    let (code_, _) = code(c.tasks.task_status(task_status(uid)).await);
    assert_eq!(code_, Code::NotFound);
    assert!(!cancelled(&mut c, uid, 0).await);
    assert!(!closed(&mut c, uid).await);
    let (code_, _) = code(c.tasks.task_status(task_status("../etc")).await);
    assert_eq!(code_, Code::InvalidArgument);
}

// ---- Tasks through runtimed ----

/// The control plane's assignment of a task Run (attempt 1) to runtimed.
fn assign_task(uid: &str, inline: Option<&str>, args: &[&str]) -> agent::AssignRequest {
    agent::AssignRequest {
        run: Some(run_ref(uid)),
        attempt: 1,
        digest: "digest-1".into(),
        source: inline.map(|s| rt::Source {
            inline: s.into(),
            path: String::new(),
        }),
        env: [("GREETING".to_string(), "hi".to_string())].into(),
        inputs: Vec::new(),
        mode: Some(agent::assign_request::Mode::Task(agent::TaskAssignment {
            entrypoint: String::new(),
            args: args.iter().map(|a| a.to_string()).collect(),
        })),
    }
}

fn ended(e: &own::OwnershipEntry) -> bool {
    e.task.as_ref().is_some_and(|t| t.ended)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_results_reach_runtimeds_ownership_table() {
    let server = start().await;
    let rd = runtimed(&server).await;
    let hello = assign_task("7a5c-6", Some("echo \"$GREETING\"\necho careful >&2"), &[]);
    let id = rd.assign(hello.clone()).await.unwrap();
    let again = rd.assign(hello).await.unwrap();
    assert_eq!(
        again, id,
        "the same attempt and digest again is the same task"
    );
    let e = rd.entry("7a5c-6", ended).await;
    assert_eq!((e.mode, e.attempt), (own::Mode::Task as i32, 1));
    assert_eq!(e.owner.unwrap().pod_name, "runtimed-example");
    let t = e.task.unwrap();
    assert!(!t.cancelled);
    assert_eq!(t.exit_code, 0);
    assert_eq!(
        (t.stdout_tail.as_str(), t.stderr_tail.as_str()),
        ("hi\n", "careful\n")
    );
    assert!(t.started_unix_ms > 0 && t.finished_unix_ms >= t.started_unix_ms);
    // Shell commands, the second one failing.
    let steps = ["echo one", "exit 3", "echo never"];
    rd.assign(assign_task("7a5c-7", None, &steps))
        .await
        .unwrap();
    let t = rd.entry("7a5c-7", ended).await.task.unwrap();
    assert_eq!((t.exit_code, t.stdout_tail.as_str()), (3, "one\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_cancelled_through_runtimed_leaves_no_process_behind() {
    let server = start().await;
    let rd = runtimed(&server).await;
    let uid = "7a5c-8";
    rd.assign(assign_task(uid, Some(TREE), &[])).await.unwrap();
    let pids = read_pids(&server.work_root().join(uid).join("1/pids"), 3, WITHIN)
        .await
        .unwrap();
    let running = rd.entry(uid, |e| e.task.is_some()).await;
    assert!(!ended(&running));
    // The Run ended (cancelled, timed out): its tree is killed, its result
    // kept until the Run is deleted.
    let kill = agent::ReleaseRequest {
        run_uid: uid.into(),
        cancel: true,
        keep: true,
        ..Default::default()
    };
    assert!(rd.release(kill).await);
    assert_eq!(wait_gone(&pids, WITHIN).await, Vec::<i32>::new());
    let t = rd.entry(uid, ended).await.task.unwrap();
    assert!(t.cancelled);
    assert_eq!(t.exit_code, 128 + 15);
    assert!(server.work_root().join(uid).exists());
    // The Run deleted: the task is closed, its entry and directory gone.
    let delete = agent::ReleaseRequest {
        run_uid: uid.into(),
        ..Default::default()
    };
    assert!(rd.release(delete).await);
    rd.withdrawn(uid).await;
    assert!(!server.work_root().join(uid).exists());
}
