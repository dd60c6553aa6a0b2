//! The example custom Runtime Server (`examples/runtime-servers/python`),
//! run with real Python on a temporary socket and driven as runtimed drives
//! a Runtime Server: the `kruntimes.runtime.v1` services over a Unix
//! socket. Its stubs are generated from the contract first, as its
//! Dockerfile does. Python with grpcio and grpcio-tools must be installed
//! (`.ci/run` installs them); a missing one fails the test.

// Test helpers panic on failure: that is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kruntimes_proto::runtime::v1 as rt;
use kruntimes_proto::runtime::{Clients, InvokeError, invoke};
use tonic::Code;

/// A running example server, killed on drop.
struct Server {
    child: Child,
    dir: tempfile::TempDir,
}

impl Server {
    fn socket(&self) -> PathBuf {
        self.dir.path().join("runtime.sock")
    }

    fn work_root(&self) -> PathBuf {
        self.dir.path().join("workspace")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn example_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/runtime-servers/python")
}

/// Generates the stubs and starts the server with nothing but the
/// environment a Runtime Pod gives it (socket and work root), waiting until
/// the socket accepts connections.
async fn start() -> Server {
    let dir = tempfile::Builder::new()
        .prefix("custom-runtime-server-")
        .tempdir()
        .unwrap();
    let stubs = dir.path().join("stubs");
    let out = Command::new("bash")
        .arg(example_dir().join("generate.sh"))
        .arg(&stubs)
        .output()
        .expect("run generate.sh");
    assert!(
        out.status.success(),
        "generating the stubs failed (pip install -r examples/runtime-servers/python/requirements.txt):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let child = Command::new("python3")
        .arg(example_dir().join("server.py"))
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("PYTHONPATH", &stubs)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("KRUNTIMES_RUNTIME_SOCKET", dir.path().join("runtime.sock"))
        .env("KRUNTIMES_WORK_ROOT", dir.path().join("workspace"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.path().join("server.log")).unwrap())
        .spawn()
        .expect("start python3 server.py");
    let mut server = Server { child, dir };
    let deadline = Instant::now() + Duration::from_secs(20);
    while tokio::net::UnixStream::connect(server.socket())
        .await
        .is_err()
    {
        if let Some(status) = server.child.try_wait().unwrap() {
            let log = std::fs::read_to_string(server.dir.path().join("server.log"));
            panic!(
                "the example server exited ({status}):\n{}",
                log.unwrap_or_default()
            );
        }
        assert!(Instant::now() < deadline, "no socket within 20 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    server
}

/// Clients over the server's Unix socket, as runtimed connects.
async fn client(server: &Server) -> Clients {
    Clients::connect_lazy(server.socket())
}

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
        .await
        .server
        .info(rt::InfoRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(info.name, "example-upper");
    assert_eq!(info.runtimes, ["upper"]);
    assert_eq!(info.services, [kruntimes_proto::runtime::FUNCTION_RUNTIME]);
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
    let mut c = client(&server).await;
    let handle = registered(&mut c, "uid-1", 1).await;
    assert!(!handle.is_empty());
    let notes = server.work_root().join("uid-1/1/docs/notes.txt");
    assert_eq!(
        std::fs::read_to_string(notes).unwrap(),
        "notes for the handler\n"
    );
    for word in ["hello", "wörld"] {
        let input = serde_json::json!({"text": word, "n": 1}).to_string();
        let out = output(
            c.functions
                .invoke_function(invoke("uid-1", &handle, &input))
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
        .function_status(status("uid-1"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((status.attempt, status.handle), (1, handle));
    assert!(!status.worker_running);
}

#[tokio::test]
async fn a_higher_attempt_supersedes_and_a_stale_handle_touches_nothing() {
    let server = start().await;
    let mut c = client(&server).await;
    let first = registered(&mut c, "uid-2", 1).await;
    let again = registered(&mut c, "uid-2", 1).await;
    assert_eq!(again, first, "the same attempt is idempotent");
    let second = registered(&mut c, "uid-2", 2).await;
    assert_ne!(second, first);
    assert!(!server.work_root().join("uid-2/1").exists());

    let stale = outcome(&mut c, invoke("uid-2", &first, "{}")).await;
    assert!(
        matches!(stale, Err(InvokeError::NotRegistered(_))),
        "{stale:?}"
    );
    let (code_, msg) = code(
        c.functions
            .register_function(register("uid-2", 1, "text"))
            .await,
    );
    assert_eq!(code_, Code::FailedPrecondition, "{msg}");
    assert!(
        !unregistered(&mut c, "uid-2", &first).await,
        "a stale handle"
    );
    let out = c
        .functions
        .invoke_function(invoke("uid-2", &second, r#"{"text": "still here"}"#))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(output(out)["text"], "STILL HERE");

    assert!(unregistered(&mut c, "uid-2", &second).await);
    assert!(!server.work_root().join("uid-2").exists());
    let (code_, _) = code(c.functions.function_status(status("uid-2")).await);
    assert_eq!(code_, Code::NotFound);
    assert!(
        !unregistered(&mut c, "uid-2", "").await,
        "absent registrations succeed"
    );
}

#[tokio::test]
async fn bad_requests_get_typed_errors() {
    let server = start().await;
    let mut c = client(&server).await;
    let handle = registered(&mut c, "uid-3", 1).await;

    // Unknown handle, unknown Run: outcomes, not statuses.
    for (uid, h) in [("uid-3", "made-up"), ("uid-x", handle.as_str())] {
        let r = outcome(&mut c, invoke(uid, h, "{}")).await;
        assert!(matches!(r, Err(InvokeError::NotRegistered(_))), "{r:?}");
    }
    // Input that is not JSON is the caller's error…
    let r = outcome(&mut c, invoke("uid-3", &handle, "{not json")).await;
    assert!(matches!(r, Err(InvokeError::InvalidInput(_))), "{r:?}");
    // …a valid document the handler cannot use is the handler's.
    let r = outcome(&mut c, invoke("uid-3", &handle, r#"{"other": 1}"#)).await;
    match r {
        Err(InvokeError::Function { kind, message }) => {
            assert_eq!(kind, "KeyError");
            assert!(message.contains("'text'"), "{message}");
        }
        other => panic!("not a FunctionError: {other:?}"),
    }
    // Output over the caller's bound.
    let mut small = invoke("uid-3", &handle, r#"{"text": "a long enough text"}"#);
    small.max_output_bytes = 8;
    let r = outcome(&mut c, small).await;
    assert!(matches!(r, Err(InvokeError::InvalidOutput(_))), "{r:?}");
    // A handler that is no field name, a source path escaping the workdir.
    let (code_, msg) = code(
        c.functions
            .register_function(register("uid-4", 1, "a.b"))
            .await,
    );
    assert_eq!(code_, Code::InvalidArgument, "{msg}");
    let mut escape = register("uid-5", 1, "text");
    escape.source.as_mut().unwrap().path = "../../outside.txt".into();
    let (code_, msg) = code(c.functions.register_function(escape).await);
    assert_eq!(code_, Code::InvalidArgument, "{msg}");
    assert!(!server.dir.path().join("outside.txt").exists());
    // Sessions are not served, as Info says.
    let (code_, _) = code(
        c.sessions
            .close_session(rt::CloseSessionRequest {
                run_uid: "uid-3".into(),
            })
            .await,
    );
    assert_eq!(code_, Code::Unimplemented);
}
