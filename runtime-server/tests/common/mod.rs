//! The Runtime Server in process on a socket in a temporary directory, and
//! a client as runtimed has one.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::time::Duration;

use kruntimes_proto::runtime::Clients;
use kruntimes_proto::runtime::v1 as pb;
use kruntimes_runtime_server::contain::Shim;
use kruntimes_runtime_server::{Config, ServeError, serve};
use tokio_stream::StreamExt;

pub const UID: &str = "0f0e0d0c-0000-4000-8000-0000000000aa";
pub const WITHIN: Duration = Duration::from_secs(20);

pub struct Server {
    pub dir: tempfile::TempDir,
    pub client: Clients,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<Result<(), ServeError>>>,
}

pub async fn start() -> Server {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("rs.sock");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    // In process: unconfined (confinement is main()'s, tested with the binary).
    let mut config = Config::new(&socket, dir.path().join("work")).unwrap();
    config.python_spares = 0;
    let shim = Shim::new(env!("CARGO_BIN_EXE_runtime-server"), &[]);
    let task = tokio::spawn(serve(config, shim, async move {
        let _ = stopped.await;
    }));
    while !socket.exists() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Server {
        client: Clients::connect_lazy(&socket),
        dir,
        stop: Some(stop),
        task: Some(task),
    }
}

impl Server {
    pub fn workspace(&self) -> std::path::PathBuf {
        self.dir
            .path()
            .join("work")
            .canonicalize()
            .unwrap()
            .join(UID)
    }

    /// Opens the session of the Run `UID` at attempt 1, with `GREETING=hi`.
    pub async fn open(&mut self) {
        self.open_at(1, false).await;
    }

    /// Opens the session of the Run `UID` at `attempt`, with `GREETING=hi`
    /// and an artifacts directory when `artifacts`.
    pub async fn open_at(&mut self, attempt: u64, artifacts: bool) {
        self.client
            .sessions
            .open_session(pb::OpenSessionRequest {
                run: Some(pb::RunRef {
                    namespace: "default".into(),
                    name: "sandbox".into(),
                    uid: UID.into(),
                    runtime: "bash".into(),
                }),
                attempt,
                source: None,
                env: [("GREETING".to_owned(), "hi".to_owned())].into(),
                artifacts,
                inputs: false,
            })
            .await
            .unwrap();
    }

    /// Registers a Python function with `source` as `main.py`; its handle.
    pub async fn register(&mut self, source: &str) -> String {
        self.register_as("python", "main.invoke", source).await
    }

    /// Registers `handler` of `runtime` with `source` as its file; its
    /// handle.
    pub async fn register_as(&mut self, runtime: &str, handler: &str, source: &str) -> String {
        self.register_with(runtime, handler, source, false).await
    }

    /// [`Self::register_as`], with an artifacts directory when `artifacts`.
    pub async fn register_with(
        &mut self,
        runtime: &str,
        handler: &str,
        source: &str,
        artifacts: bool,
    ) -> String {
        self.client
            .functions
            .register_function(pb::RegisterFunctionRequest {
                run: Some(pb::RunRef {
                    namespace: "default".into(),
                    name: "f".into(),
                    uid: UID.into(),
                    runtime: runtime.into(),
                }),
                attempt: 1,
                handler: handler.into(),
                source: Some(pb::Source {
                    inline: source.into(),
                    path: String::new(),
                }),
                artifacts,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .handle
    }

    /// An invocation of `handle` with `input`.
    pub fn call(handle: &str, input: &[u8], timeout_ms: u32) -> pb::InvokeFunctionRequest {
        pb::InvokeFunctionRequest {
            run_uid: UID.into(),
            handle: handle.into(),
            invocation_id: "inv-1".into(),
            input: input.to_vec(),
            timeout_ms,
            max_output_bytes: 0,
        }
    }

    pub async fn shell(&mut self, script: &str) -> tonic::Streaming<pb::CommandEvent> {
        self.client
            .sessions
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

    pub async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.task.take() {
            t.await.unwrap().unwrap();
        }
    }
}

/// Output text and the result of a finished command stream.
pub async fn finish(mut events: tonic::Streaming<pb::CommandEvent>) -> (String, pb::CommandResult) {
    let mut out = String::new();
    while let Some(ev) = events.next().await {
        match ev.unwrap().event.unwrap() {
            pb::command_event::Event::Output(o) => out.push_str(&String::from_utf8_lossy(&o.data)),
            pb::command_event::Event::Result(r) => return (out, r),
        }
    }
    panic!("the stream ended without a result");
}

/// A task of the Run `UID` on `runtime` at `attempt`, with `GREETING=hi`
/// and nothing to run yet.
pub fn start_req(runtime: &str, attempt: u64) -> pb::StartTaskRequest {
    pb::StartTaskRequest {
        run: Some(pb::RunRef {
            namespace: "default".into(),
            name: "job".into(),
            uid: UID.into(),
            runtime: runtime.into(),
        }),
        attempt,
        env: [("GREETING".to_owned(), "hi".to_owned())].into(),
        ..Default::default()
    }
}

/// A task that runs `script` as its inline source.
pub fn inline(runtime: &str, attempt: u64, script: &str) -> pb::StartTaskRequest {
    pb::StartTaskRequest {
        source: Some(pb::Source {
            inline: script.into(),
            path: String::new(),
        }),
        ..start_req(runtime, attempt)
    }
}

/// The output (when asked for) and the result of a task, waiting for it.
pub async fn watch(s: &mut Server, attempt: u64, output: bool) -> (String, pb::TaskResult) {
    let mut events = s
        .client
        .tasks
        .watch_task(pb::WatchTaskRequest {
            run_uid: UID.into(),
            attempt,
            output,
        })
        .await
        .unwrap()
        .into_inner();
    let mut out = String::new();
    while let Some(ev) = events.next().await {
        match ev.unwrap().event.unwrap() {
            pb::task_event::Event::Output(o) => out.push_str(&String::from_utf8_lossy(&o.data)),
            pb::task_event::Event::Dropped(n) => panic!("{n} bytes dropped"),
            pb::task_event::Event::Result(r) => return (out, r),
        }
    }
    panic!("the stream ended without a result");
}
