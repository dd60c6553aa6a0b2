//! A scripted Runtime Server for runtimed's own tests, served over a real
//! Unix socket so the client code under test is the production one. It
//! runs no process: the real server is tested in `runtime-server/`, and the
//! two together end to end in `runtimed/tests/`.
//!
//! Scripts: an invocation's JSON input may ask for `{"sleep_ms": N}`,
//! `{"raise": "message"}` or `{"fail": "aborted" | "deadline" |
//! "too_large" | "status"}` (the last a gRPC status instead of an outcome,
//! as an older custom server might answer), and is otherwise echoed. A command's argv is a list of
//! steps: `out TEXT`, `err TEXT`, `sleep-ms N`, `exit N`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kruntimes_proto::runtime::v1 as pb;
use kruntimes_proto::runtime::v1::function_runtime_server::{
    FunctionRuntime, FunctionRuntimeServer,
};
use kruntimes_proto::runtime::v1::runtime_server_server::{RuntimeServer, RuntimeServerServer};
use kruntimes_proto::runtime::v1::session_runtime_server::{SessionRuntime, SessionRuntimeServer};
use kruntimes_proto::runtime::{InvokeError, invoke};
use tokio::sync::Notify;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use super::Link;

/// What the fake saw and holds.
#[derive(Debug, Default)]
pub struct State {
    /// Instance id reported by Info.
    pub instance: String,
    /// Registered functions: Run UID → (attempt, handle).
    pub functions: HashMap<String, (u64, String)>,
    /// Open sessions by Run UID.
    pub sessions: Vec<String>,
    /// Every call, in order, as a short line.
    pub log: Vec<String>,
    /// Invocations that ran to their end.
    pub completed: Vec<String>,
    /// The direct invoke socket Info announces (nothing listens on it).
    pub invoke_socket: String,
    next: u64,
}

/// The fake server.
#[derive(Debug, Default)]
pub struct Fake {
    /// Its state.
    pub state: Mutex<State>,
    unregistered: Notify,
}

impl Fake {
    fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        f(&mut self.state.lock().unwrap())
    }

    fn log(&self, line: String) {
        self.with(|s| s.log.push(line));
    }

    /// The calls seen so far.
    pub fn calls(&self) -> Vec<String> {
        self.with(|s| s.log.clone())
    }
}

/// A fake served on a socket in a temporary directory.
pub struct Served {
    /// The fake.
    pub fake: Arc<Fake>,
    /// The link runtimed's code uses.
    pub link: Arc<Link>,
    socket: PathBuf,
    running: Option<Running>,
    _dir: tempfile::TempDir,
}

/// One serving of the fake: stopping it closes its connections too, as a
/// server process that exits does.
struct Running {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

fn serve(fake: Arc<Fake>, socket: &std::path::Path) -> Running {
    let _ = std::fs::remove_file(socket);
    let listener = tokio::net::UnixListener::bind(socket).unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let _ = tonic::transport::Server::builder()
            .add_service(RuntimeServerServer::new(Handle(fake.clone())))
            .add_service(FunctionRuntimeServer::new(Handle(fake.clone())))
            .add_service(SessionRuntimeServer::new(Handle(fake)))
            .serve_with_incoming_shutdown(
                tokio_stream::wrappers::UnixListenerStream::new(listener),
                async move {
                    let _ = stopped.await;
                },
            )
            .await;
    });
    Running { stop, task }
}

/// Starts a fake and connects a link to it.
pub async fn start() -> Served {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("runtime.sock");
    let fake = Arc::new(Fake::default());
    fake.with(|s| s.instance = "instance-1".into());
    let running = serve(fake.clone(), &socket);
    let link = Link::new(&socket);
    assert!(link.connect(Duration::from_secs(5)).await);
    Served {
        fake,
        link,
        socket,
        running: Some(running),
        _dir: dir,
    }
}

impl Served {
    /// Stops serving (the socket goes away; calls fail as unreachable).
    pub async fn stop(&mut self) {
        if let Some(r) = self.running.take() {
            let _ = r.stop.send(());
            let _ = r.task.await;
        }
        let _ = std::fs::remove_file(&self.socket);
    }

    /// Serves again as a new instance that holds nothing.
    pub async fn restart(&mut self) {
        self.stop().await;
        self.fake.with(|s| {
            s.instance = format!("instance-{}", s.next + 100);
            s.functions.clear();
            s.sessions.clear();
        });
        self.running = Some(serve(self.fake.clone(), &self.socket));
    }
}

#[derive(Clone)]
struct Handle(Arc<Fake>);

#[derive(serde::Deserialize, Default)]
struct Script {
    #[serde(default)]
    sleep_ms: u64,
    #[serde(default)]
    raise: Option<String>,
    #[serde(default)]
    fail: Option<String>,
}

fn run_uid(run: Option<pb::RunRef>) -> String {
    run.map(|r| r.uid).unwrap_or_default()
}

#[tonic::async_trait]
impl RuntimeServer for Handle {
    async fn info(
        &self,
        _: Request<pb::InfoRequest>,
    ) -> Result<Response<pb::InfoResponse>, Status> {
        Ok(Response::new(pb::InfoResponse {
            name: "fake".into(),
            instance_id: self.0.with(|s| s.instance.clone()),
            invoke_socket: self.0.with(|s| s.invoke_socket.clone()),
            ..Default::default()
        }))
    }

    async fn reset(
        &self,
        _: Request<pb::ResetRequest>,
    ) -> Result<Response<pb::ResetResponse>, Status> {
        self.0.log("reset".into());
        Ok(Response::new(pb::ResetResponse { dropped: 0 }))
    }
}

#[tonic::async_trait]
impl FunctionRuntime for Handle {
    async fn register_function(
        &self,
        req: Request<pb::RegisterFunctionRequest>,
    ) -> Result<Response<pb::RegisterFunctionResponse>, Status> {
        let r = req.into_inner();
        // As the built-in server: no backend named and a runtime it has
        // none for is refused.
        if r.backend.is_empty()
            && !r
                .run
                .as_ref()
                .is_some_and(|run| ["python", "bash"].contains(&run.runtime.as_str()))
        {
            return Err(Status::invalid_argument("runtime has no built-in backend"));
        }
        let uid = run_uid(r.run);
        self.0
            .log(format!("register {uid} {} {}", r.attempt, r.backend));
        match r.handler.as_str() {
            "main.nope" => {
                return Err(Status::failed_precondition(
                    "load handler: AttributeError: nope",
                ));
            }
            "main.bad!" => return Err(Status::invalid_argument("handler is not valid")),
            _ => {}
        }
        let handle = self.0.with(|s| {
            s.next += 1;
            let h = format!("fn-{}", s.next);
            s.functions.insert(uid, (r.attempt, h.clone()));
            h
        });
        Ok(Response::new(pb::RegisterFunctionResponse { handle }))
    }

    async fn invoke_function(
        &self,
        req: Request<pb::InvokeFunctionRequest>,
    ) -> Result<Response<pb::InvokeFunctionResponse>, Status> {
        let r = req.into_inner();
        let held = self
            .0
            .with(|s| s.functions.get(&r.run_uid).map(|f| f.1.clone()));
        if held.as_deref() != Some(r.handle.as_str()) {
            let missing = InvokeError::NotRegistered("no such handle".into());
            return Ok(Response::new(invoke::encode(Err(missing))));
        }
        self.0.log(format!("invoke {}", r.invocation_id));
        // Notes a call whose caller cancelled it before it ended.
        struct Abandoned<'a>(&'a Fake, Option<String>);
        impl Drop for Abandoned<'_> {
            fn drop(&mut self) {
                if let Some(id) = self.1.take() {
                    self.0.log(format!("abandoned {id}"));
                }
            }
        }
        let mut abandoned = Abandoned(&self.0, Some(r.invocation_id.clone()));
        let script: Script = serde_json::from_slice(&r.input).unwrap_or_default();
        if script.sleep_ms > 0 {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(script.sleep_ms)) => {}
                _ = self.0.unregistered.notified() => {
                    abandoned.1 = None;
                    return Ok(Response::new(invoke::encode(Err(InvokeError::Stopped))));
                }
            }
        }
        abandoned.1 = None;
        self.0.with(|s| s.completed.push(r.invocation_id.clone()));
        let outcome = match (script.raise, script.fail.as_deref()) {
            (Some(m), _) => Err(InvokeError::function("ValueError", m)),
            (_, Some("aborted")) => Err(InvokeError::Crashed(
                "worker exited (exit status: 3)".into(),
            )),
            (_, Some("deadline")) => Err(InvokeError::Timeout("deadline".into())),
            (_, Some("too_large")) => Err(InvokeError::InvalidOutput(
                "output of 9 bytes exceeds the 1-byte limit".into(),
            )),
            (_, Some("status")) => {
                // A custom server that still answers with a status.
                return Err(Status::out_of_range("output too large"));
            }
            _ => Ok(r.input),
        };
        Ok(Response::new(invoke::encode(outcome)))
    }

    async fn unregister_function(
        &self,
        req: Request<pb::UnregisterFunctionRequest>,
    ) -> Result<Response<pb::UnregisterFunctionResponse>, Status> {
        let r = req.into_inner();
        self.0.log(format!("unregister {} {}", r.run_uid, r.handle));
        let existed = self.0.with(|s| s.functions.remove(&r.run_uid).is_some());
        self.0.unregistered.notify_waiters();
        Ok(Response::new(pb::UnregisterFunctionResponse { existed }))
    }

    async fn function_status(
        &self,
        _: Request<pb::FunctionStatusRequest>,
    ) -> Result<Response<pb::FunctionStatusResponse>, Status> {
        Err(Status::unimplemented("not scripted"))
    }
}

#[tonic::async_trait]
impl SessionRuntime for Handle {
    async fn open_session(
        &self,
        req: Request<pb::OpenSessionRequest>,
    ) -> Result<Response<pb::OpenSessionResponse>, Status> {
        let r = req.into_inner();
        let uid = run_uid(r.run);
        self.0.log(format!("open {uid} {}", r.attempt));
        self.0.with(|s| s.sessions.push(uid));
        Ok(Response::new(pb::OpenSessionResponse {}))
    }

    type RunCommandStream = ReceiverStream<Result<pb::CommandEvent, Status>>;

    async fn run_command(
        &self,
        req: Request<pb::RunCommandRequest>,
    ) -> Result<Response<Self::RunCommandStream>, Status> {
        use pb::command_event::Event;
        let r = req.into_inner();
        let fake = self.0.clone();
        let (tx, rx) = tokio::sync::mpsc::channel(8);
        tokio::spawn(async move {
            let name = r.argv.join(" ");
            fake.log(format!("command {name}"));
            let mut result = pb::CommandResult {
                state: pb::CommandState::Succeeded as i32,
                exit_code: Some(0),
                ..Default::default()
            };
            for step in r.argv.chunks(2) {
                let (verb, arg) = (step[0].as_str(), step.get(1).cloned().unwrap_or_default());
                let output = |stream: pb::CommandStream, data: &str| pb::CommandEvent {
                    event: Some(Event::Output(pb::CommandOutput {
                        stream: stream as i32,
                        data: data.as_bytes().to_vec(),
                    })),
                };
                let sent = match verb {
                    "out" => {
                        result.stdout.extend_from_slice(arg.as_bytes());
                        tx.send(Ok(output(pb::CommandStream::Stdout, &arg))).await
                    }
                    "err" => {
                        result.stderr.extend_from_slice(arg.as_bytes());
                        tx.send(Ok(output(pb::CommandStream::Stderr, &arg))).await
                    }
                    "sleep-ms" => {
                        tokio::select! {
                            _ = tokio::time::sleep(Duration::from_millis(arg.parse().unwrap())) => Ok(()),
                            _ = tx.closed() => {
                                fake.log(format!("cancelled {name}"));
                                return;
                            }
                        }
                    }
                    "exit" => {
                        let code: i32 = arg.parse().unwrap();
                        result.exit_code = Some(code);
                        if code != 0 {
                            result.state = pb::CommandState::Failed as i32;
                        }
                        Ok(())
                    }
                    other => panic!("unknown step {other}"),
                };
                if sent.is_err() {
                    return;
                }
            }
            fake.log(format!("finished {name}"));
            let _ = tx
                .send(Ok(pb::CommandEvent {
                    event: Some(Event::Result(result)),
                }))
                .await;
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn file_operation(
        &self,
        req: Request<pb::FileOperationRequest>,
    ) -> Result<Response<pb::FileOperationResponse>, Status> {
        use pb::file_operation_request::Op;
        let path = match req.into_inner().op {
            Some(Op::Write(w)) => w.path,
            Some(Op::Mkdir(p) | Op::Delete(p)) => p.path,
            Some(Op::Rename(r)) => r.from,
            None => String::new(),
        };
        self.0.log(format!("file {path}"));
        if path == "missing" {
            return Err(Status::not_found("missing not found"));
        }
        Ok(Response::new(pb::FileOperationResponse {}))
    }

    async fn read_file(
        &self,
        req: Request<pb::ReadFileRequest>,
    ) -> Result<Response<pb::ReadFileResponse>, Status> {
        Ok(Response::new(pb::ReadFileResponse {
            content: req.into_inner().path.into_bytes(),
        }))
    }

    async fn list_files(
        &self,
        _: Request<pb::ListFilesRequest>,
    ) -> Result<Response<pb::ListFilesResponse>, Status> {
        Ok(Response::new(pb::ListFilesResponse::default()))
    }

    async fn close_session(
        &self,
        req: Request<pb::CloseSessionRequest>,
    ) -> Result<Response<pb::CloseSessionResponse>, Status> {
        let uid = req.into_inner().run_uid;
        self.0.log(format!("close {uid}"));
        let existed = self.0.with(|s| {
            let before = s.sessions.len();
            s.sessions.retain(|x| *x != uid);
            before != s.sessions.len()
        });
        Ok(Response::new(pb::CloseSessionResponse { existed }))
    }

    async fn start_process(
        &self,
        _req: Request<pb::StartProcessRequest>,
    ) -> Result<Response<pb::StartProcessResponse>, Status> {
        Err(Status::unimplemented("not scripted"))
    }

    async fn list_processes(
        &self,
        _req: Request<pb::ListProcessesRequest>,
    ) -> Result<Response<pb::ListProcessesResponse>, Status> {
        Err(Status::unimplemented("not scripted"))
    }

    type ConnectProcessStream = ReceiverStream<Result<pb::ProcessEvent, Status>>;

    async fn connect_process(
        &self,
        _req: Request<pb::ConnectProcessRequest>,
    ) -> Result<Response<Self::ConnectProcessStream>, Status> {
        Err(Status::unimplemented("not scripted"))
    }

    async fn process_input(
        &self,
        _req: Request<pb::ProcessInputRequest>,
    ) -> Result<Response<pb::ProcessInputResponse>, Status> {
        Err(Status::unimplemented("not scripted"))
    }

    async fn signal_process(
        &self,
        _req: Request<pb::SignalProcessRequest>,
    ) -> Result<Response<pb::SignalProcessResponse>, Status> {
        Err(Status::unimplemented("not scripted"))
    }

    async fn session_metrics(
        &self,
        _req: Request<pb::SessionMetricsRequest>,
    ) -> Result<Response<pb::SessionMetricsResponse>, Status> {
        Err(Status::unimplemented("not scripted"))
    }

    type WatchDirStream = ReceiverStream<Result<pb::WatchEvent, Status>>;

    async fn watch_dir(
        &self,
        _req: Request<pb::WatchDirRequest>,
    ) -> Result<Response<Self::WatchDirStream>, Status> {
        Err(Status::unimplemented("not scripted"))
    }

    async fn resize_process(
        &self,
        _req: Request<pb::ResizeProcessRequest>,
    ) -> Result<Response<pb::ResizeProcessResponse>, Status> {
        Err(Status::unimplemented("not scripted"))
    }
}
