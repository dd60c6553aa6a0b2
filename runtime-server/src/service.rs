//! The contract's five gRPC services over one [`Service`]:
//! `RuntimeServer` (Info, Reset), `FunctionRuntime`, `SessionRuntime`,
//! `TaskRuntime` and `ArtifactRuntime`. Each call is validated
//! ([`crate::validate`]) and handed to the functions, the sessions, the
//! tasks, their artifacts ([`crate::artifacts`]) or their staged inputs
//! ([`crate::inputs`]); the conversions to
//! protobuf are here, the logic is not.
//! Errors become gRPC statuses only here ([`crate::Error`] → the contract's
//! `ServerError` → status); an invocation's failure is an answer
//! ([`invoke_function`]), whichever path carries it.

use std::sync::Arc;

use kruntimes_proto::runtime::v1 as pb;
use kruntimes_proto::runtime::v1::artifact_runtime_server::{
    ArtifactRuntime, ArtifactRuntimeServer,
};
use kruntimes_proto::runtime::v1::function_runtime_server::{
    FunctionRuntime, FunctionRuntimeServer,
};
use kruntimes_proto::runtime::v1::runtime_server_server::{RuntimeServer, RuntimeServerServer};
use kruntimes_proto::runtime::v1::session_runtime_server::{SessionRuntime, SessionRuntimeServer};
use kruntimes_proto::runtime::v1::task_runtime_server::{TaskRuntime, TaskRuntimeServer};
use kruntimes_proto::runtime::{self, FileOp, MAX_MESSAGE_BYTES, invoke};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use crate::artifacts;
use crate::error::Error;
use crate::function::Functions;
use crate::inputs::Inputs;
use crate::routes::Routes;
use crate::session::{Sessions, exec, files, process, watcher};
use crate::task::{self, Tasks};
use crate::validate;

/// What the services serve.
pub struct Service {
    functions: Arc<Functions>,
    sessions: Sessions,
    tasks: Tasks,
    inputs: Arc<Inputs>,
    instance_id: String,
    sockets: Sockets,
}

/// The file names of the optional sockets beside the gRPC one (empty: not
/// offered), as `Info` announces them.
#[derive(Debug, Clone, Default)]
pub struct Sockets {
    /// The worker fast path's ([`crate::lease`]).
    pub workers: String,
    /// The direct invoke path's ([`crate::direct`]).
    pub invoke: String,
}

impl Service {
    /// A service over `functions`, `sessions`, `tasks` and the staged
    /// `inputs` (the ones `sessions` and `tasks` take from), with a fresh
    /// instance id, announcing `sockets`.
    pub fn new(
        functions: Arc<Functions>,
        sessions: Sessions,
        tasks: Tasks,
        inputs: Arc<Inputs>,
        sockets: Sockets,
    ) -> Arc<Self> {
        Arc::new(Self {
            functions,
            sessions,
            tasks,
            inputs,
            instance_id: uuid::Uuid::new_v4().to_string(),
            sockets,
        })
    }

    /// The five tonic services, with the contract's message limits, as
    /// one service to serve.
    pub fn routes(self: &Arc<Self>) -> Routes {
        let handle = Handle(self.clone());
        Routes::new(
            RuntimeServerServer::new(handle.clone())
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES),
            FunctionRuntimeServer::new(handle.clone())
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES),
            SessionRuntimeServer::new(handle.clone())
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES),
            TaskRuntimeServer::new(handle.clone())
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES),
            ArtifactRuntimeServer::new(handle)
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES),
        )
    }

    /// Stops everything (shutdown).
    pub async fn shutdown(&self) {
        self.sessions.reset().await;
        self.tasks.reset().await;
        self.inputs.reset();
        self.functions.shutdown().await;
    }
}

/// The service as tonic holds it.
#[derive(Clone)]
pub struct Handle(Arc<Service>);

fn entry(e: files::Entry) -> pb::FileEntry {
    pb::FileEntry {
        name: e.name,
        r#type: e.kind,
        size: e.size,
    }
}

/// `InvokeFunction`, as gRPC and the direct invoke path
/// ([`crate::direct`]) serve it: always an answer. Dropping the future ends
/// the call (see [`Functions::invoke`]).
pub async fn invoke_function(
    functions: &Functions,
    req: pb::InvokeFunctionRequest,
) -> pb::InvokeFunctionResponse {
    let mut left = false;
    let outcome = match validate::invoke(req) {
        Ok(call) => {
            let outcome = functions
                .invoke(
                    &call.run_uid,
                    &call.handle,
                    call.input,
                    call.timeout,
                    call.max_output,
                )
                .await;
            // Only what runtimed will export: an answer's directory.
            if outcome.is_ok() {
                left = functions.artifacts_left(&call.run_uid);
            }
            outcome
        }
        Err(e) => Err(e),
    };
    pb::InvokeFunctionResponse {
        artifacts_left: left,
        ..invoke::encode(outcome)
    }
}

#[tonic::async_trait]
impl RuntimeServer for Handle {
    async fn info(
        &self,
        _: Request<pb::InfoRequest>,
    ) -> Result<Response<pb::InfoResponse>, Status> {
        Ok(Response::new(pb::InfoResponse {
            name: "kruntimes-runtime-server".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            runtimes: vec!["python".into(), "bash".into()],
            services: vec![
                runtime::FUNCTION_RUNTIME.into(),
                runtime::SESSION_RUNTIME.into(),
                runtime::TASK_RUNTIME.into(),
                runtime::ARTIFACT_RUNTIME.into(),
            ],
            instance_id: self.0.instance_id.clone(),
            worker_socket: self.0.sockets.workers.clone(),
            invoke_socket: self.0.sockets.invoke.clone(),
            contract: runtime::CONTRACT.into(),
        }))
    }

    async fn reset(
        &self,
        _: Request<pb::ResetRequest>,
    ) -> Result<Response<pb::ResetResponse>, Status> {
        let dropped = self.0.sessions.reset().await
            + self.0.tasks.reset().await
            + self.0.functions.reset().await;
        self.0.inputs.reset();
        tracing::info!(dropped, "reset");
        Ok(Response::new(pb::ResetResponse {
            dropped: u32::try_from(dropped).unwrap_or(u32::MAX),
        }))
    }
}

#[tonic::async_trait]
impl FunctionRuntime for Handle {
    async fn register_function(
        &self,
        req: Request<pb::RegisterFunctionRequest>,
    ) -> Result<Response<pb::RegisterFunctionResponse>, Status> {
        let req = validate::register(req.into_inner())?;
        let handle = self.0.functions.register(req).await?;
        Ok(Response::new(pb::RegisterFunctionResponse { handle }))
    }

    async fn invoke_function(
        &self,
        req: Request<pb::InvokeFunctionRequest>,
    ) -> Result<Response<pb::InvokeFunctionResponse>, Status> {
        Ok(Response::new(
            invoke_function(&self.0.functions, req.into_inner()).await,
        ))
    }

    async fn unregister_function(
        &self,
        req: Request<pb::UnregisterFunctionRequest>,
    ) -> Result<Response<pb::UnregisterFunctionResponse>, Status> {
        let r = req.into_inner();
        let uid = validate::run_uid(&r.run_uid)?;
        let existed = self.0.functions.unregister(&uid, &r.handle).await;
        Ok(Response::new(pb::UnregisterFunctionResponse { existed }))
    }

    async fn function_status(
        &self,
        req: Request<pb::FunctionStatusRequest>,
    ) -> Result<Response<pb::FunctionStatusResponse>, Status> {
        let uid = validate::run_uid(&req.into_inner().run_uid)?;
        let r = self
            .0
            .functions
            .get(&uid)
            .ok_or_else(|| Error::NotFound(format!("function {uid}")))?;
        Ok(Response::new(pb::FunctionStatusResponse {
            attempt: r.attempt,
            handle: r.handle.clone(),
            worker_running: r.worker_running(),
        }))
    }
}

#[tonic::async_trait]
impl SessionRuntime for Handle {
    async fn open_session(
        &self,
        req: Request<pb::OpenSessionRequest>,
    ) -> Result<Response<pb::OpenSessionResponse>, Status> {
        self.0
            .sessions
            .open(validate::open(req.into_inner())?)
            .await?;
        Ok(Response::new(pb::OpenSessionResponse {}))
    }

    type RunCommandStream = ReceiverStream<Result<pb::CommandEvent, Status>>;

    async fn run_command(
        &self,
        req: Request<pb::RunCommandRequest>,
    ) -> Result<Response<Self::RunCommandStream>, Status> {
        let cmd = validate::command(req.into_inner())?;
        let session = self.0.sessions.get(&cmd.run_uid)?;
        let (tx, rx) = tokio::sync::mpsc::channel(64);
        exec::start(self.0.sessions.shim(), &session, cmd, tx);
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn file_operation(
        &self,
        req: Request<pb::FileOperationRequest>,
    ) -> Result<Response<pb::FileOperationResponse>, Status> {
        let (uid, op) = validate::file_op(req.into_inner())?;
        let session = self.0.sessions.get(&uid)?;
        let root = session.root();
        match op {
            FileOp::Write { path, content } => files::write(root, &path, &content),
            FileOp::Mkdir { path } => files::mkdir(root, &path),
            FileOp::Delete { path } => files::delete(root, &path),
            FileOp::Rename { from, to } => files::rename(root, &from, &to),
        }
        .map_err(Error::from)?;
        Ok(Response::new(pb::FileOperationResponse {}))
    }

    async fn read_file(
        &self,
        req: Request<pb::ReadFileRequest>,
    ) -> Result<Response<pb::ReadFileResponse>, Status> {
        let r = req.into_inner();
        let session = self.0.sessions.get(&validate::run_uid(&r.run_uid)?)?;
        let max = match r.max_bytes {
            0 => files::MAX_FILE_BYTES,
            n => usize::try_from(n).unwrap_or(usize::MAX),
        };
        let content = files::read(session.root(), &r.path, max).map_err(Error::from)?;
        Ok(Response::new(pb::ReadFileResponse { content }))
    }

    async fn list_files(
        &self,
        req: Request<pb::ListFilesRequest>,
    ) -> Result<Response<pb::ListFilesResponse>, Status> {
        let r = req.into_inner();
        let session = self.0.sessions.get(&validate::run_uid(&r.run_uid)?)?;
        let limit = (r.limit > 0).then_some(r.limit as usize);
        let token = (!r.page_token.is_empty()).then_some(r.page_token.as_str());
        let listing = files::list(session.root(), &r.path, limit, token).map_err(Error::from)?;
        Ok(Response::new(pb::ListFilesResponse {
            entries: listing.entries.into_iter().map(entry).collect(),
            next_page_token: listing.next_page_token.unwrap_or_default(),
        }))
    }

    async fn close_session(
        &self,
        req: Request<pb::CloseSessionRequest>,
    ) -> Result<Response<pb::CloseSessionResponse>, Status> {
        let uid = validate::run_uid(&req.into_inner().run_uid)?;
        let existed = self.0.sessions.close(&uid).await;
        Ok(Response::new(pb::CloseSessionResponse { existed }))
    }

    async fn start_process(
        &self,
        req: Request<pb::StartProcessRequest>,
    ) -> Result<Response<pb::StartProcessResponse>, Status> {
        let (uid, start) = validate::process(req.into_inner())?;
        let session = self.0.sessions.get(&uid)?;
        let pid = process::start(self.0.sessions.shim(), &session, start)?;
        Ok(Response::new(pb::StartProcessResponse { pid }))
    }

    async fn list_processes(
        &self,
        req: Request<pb::ListProcessesRequest>,
    ) -> Result<Response<pb::ListProcessesResponse>, Status> {
        let r = req.into_inner();
        let session = self.0.sessions.get(&validate::run_uid(&r.run_uid)?)?;
        let processes = match r.pid {
            0 => session.processes.list().iter().map(|p| p.info()).collect(),
            pid => vec![session.processes.get(pid)?.info()],
        };
        Ok(Response::new(pb::ListProcessesResponse { processes }))
    }

    type ConnectProcessStream = ReceiverStream<Result<pb::ProcessEvent, Status>>;

    async fn connect_process(
        &self,
        req: Request<pb::ConnectProcessRequest>,
    ) -> Result<Response<Self::ConnectProcessStream>, Status> {
        let r = req.into_inner();
        let session = self.0.sessions.get(&validate::run_uid(&r.run_uid)?)?;
        let follower = session.processes.get(r.pid)?.follower()?;
        let (tx, rx) = tokio::sync::mpsc::channel(64);
        tokio::spawn(follower.follow(tx));
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn process_input(
        &self,
        req: Request<pb::ProcessInputRequest>,
    ) -> Result<Response<pb::ProcessInputResponse>, Status> {
        let r = req.into_inner();
        let session = self.0.sessions.get(&validate::run_uid(&r.run_uid)?)?;
        let process = session.processes.get(r.pid)?;
        process.input(&r.data, r.close).await?;
        Ok(Response::new(pb::ProcessInputResponse {}))
    }

    async fn signal_process(
        &self,
        req: Request<pb::SignalProcessRequest>,
    ) -> Result<Response<pb::SignalProcessResponse>, Status> {
        let r = req.into_inner();
        let session = self.0.sessions.get(&validate::run_uid(&r.run_uid)?)?;
        session.processes.get(r.pid)?.signal(r.signal)?;
        Ok(Response::new(pb::SignalProcessResponse {}))
    }

    async fn session_metrics(
        &self,
        req: Request<pb::SessionMetricsRequest>,
    ) -> Result<Response<pb::SessionMetricsResponse>, Status> {
        let uid = validate::run_uid(&req.into_inner().run_uid)?;
        let session = self.0.sessions.get(&uid)?;
        // Walks /proc and the workspace: off the async threads.
        let m = tokio::task::spawn_blocking(move || crate::session::metrics::measure(&session))
            .await
            .map_err(|e| Status::internal(e.to_string()))?;
        Ok(Response::new(m))
    }

    type WatchDirStream = ReceiverStream<Result<pb::WatchEvent, Status>>;

    async fn watch_dir(
        &self,
        req: Request<pb::WatchDirRequest>,
    ) -> Result<Response<Self::WatchDirStream>, Status> {
        let r = req.into_inner();
        let session = self.0.sessions.get(&validate::run_uid(&r.run_uid)?)?;
        let (tx, rx) = tokio::sync::mpsc::channel(64);
        watcher::start(&session, &r.path, r.recursive, tx)?;
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn resize_process(
        &self,
        req: Request<pb::ResizeProcessRequest>,
    ) -> Result<Response<pb::ResizeProcessResponse>, Status> {
        let r = req.into_inner();
        let session = self.0.sessions.get(&validate::run_uid(&r.run_uid)?)?;
        let (rows, cols) = validate::terminal_size(&r.size.unwrap_or_default())?;
        session.processes.get(r.pid)?.resize(rows, cols).await?;
        Ok(Response::new(pb::ResizeProcessResponse {}))
    }
}

#[tonic::async_trait]
impl TaskRuntime for Handle {
    async fn start_task(
        &self,
        req: Request<pb::StartTaskRequest>,
    ) -> Result<Response<pb::StartTaskResponse>, Status> {
        let t = self
            .0
            .tasks
            .start(validate::start_task(req.into_inner())?)
            .await?;
        Ok(Response::new(pb::StartTaskResponse {
            started_unix_ms: t.started_unix_ms,
        }))
    }

    type WatchTaskStream = ReceiverStream<Result<pb::TaskEvent, Status>>;

    async fn watch_task(
        &self,
        req: Request<pb::WatchTaskRequest>,
    ) -> Result<Response<Self::WatchTaskStream>, Status> {
        let r = req.into_inner();
        let t = self
            .0
            .tasks
            .get(&validate::run_uid(&r.run_uid)?, r.attempt)?;
        let (tx, rx) = tokio::sync::mpsc::channel(64);
        tokio::spawn(task::follow(t, r.output, tx));
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn task_status(
        &self,
        req: Request<pb::TaskStatusRequest>,
    ) -> Result<Response<pb::TaskStatusResponse>, Status> {
        let t = self
            .0
            .tasks
            .get(&validate::run_uid(&req.into_inner().run_uid)?, 0)?;
        Ok(Response::new(pb::TaskStatusResponse {
            attempt: t.attempt,
            started_unix_ms: t.started_unix_ms,
            result: t.result(),
        }))
    }

    async fn cancel_task(
        &self,
        req: Request<pb::CancelTaskRequest>,
    ) -> Result<Response<pb::CancelTaskResponse>, Status> {
        let r = req.into_inner();
        let uid = validate::run_uid(&r.run_uid)?;
        let running = match self.0.tasks.get(&uid, r.attempt) {
            Ok(t) => t.cancel().await,
            Err(_) => false,
        };
        Ok(Response::new(pb::CancelTaskResponse { running }))
    }

    async fn close_task(
        &self,
        req: Request<pb::CloseTaskRequest>,
    ) -> Result<Response<pb::CloseTaskResponse>, Status> {
        let uid = validate::run_uid(&req.into_inner().run_uid)?;
        let existed = self.0.tasks.close(&uid).await;
        Ok(Response::new(pb::CloseTaskResponse { existed }))
    }
}

/// Chunks of a `CollectArtifacts` stream waiting for the client: with
/// 1 MiB chunks, what one collection holds in memory stays a few MiB,
/// whatever the files' sizes.
const ARTIFACT_STREAM_BUFFER: usize = 2;

#[tonic::async_trait]
impl ArtifactRuntime for Handle {
    type CollectArtifactsStream = ReceiverStream<Result<pb::ArtifactChunk, Status>>;

    async fn collect_artifacts(
        &self,
        req: Request<pb::CollectArtifactsRequest>,
    ) -> Result<Response<Self::CollectArtifactsStream>, Status> {
        let r = req.into_inner();
        let uid = validate::run_uid(&r.run_uid)?;
        // The Run's task, else its session, else its function.
        let mut lock = None;
        let location = match (self.0.tasks.get(&uid, 0), self.0.sessions.get(&uid)) {
            (Ok(task), _) => task.artifacts().cloned(),
            (Err(_), Ok(session)) => session.artifacts().cloned(),
            (Err(_), Err(_)) => match self.0.functions.get(&uid) {
                Some(f) => {
                    lock = Some(f.collecting.clone());
                    f.artifacts.clone()
                }
                None => {
                    return Err(Error::NotFound(format!("task, session or function {uid}")).into());
                }
            },
        };
        let bounds = artifacts::Bounds::from(&r);
        let (tx, rx) = tokio::sync::mpsc::channel(ARTIFACT_STREAM_BUFFER);
        // A Run given no directory: an empty stream.
        if let Some(at) = location {
            // Reading is blocking; the channel paces it to the client and
            // ends it when the client goes away.
            let (clear, discard) = (r.clear, r.discard);
            tokio::task::spawn_blocking(move || {
                // One collection of a function's directory at a time, from
                // its walk to its emptying; none once it is gone.
                let held = lock
                    .as_ref()
                    .map(|l| l.lock().unwrap_or_else(|p| p.into_inner()));
                if held.as_deref() == Some(&true) {
                    return;
                }
                if !discard {
                    match artifacts::collect(&at, bounds, |c| tx.blocking_send(Ok(c)).is_ok()) {
                        Ok(s) => tracing::info!(
                            run_uid = %uid,
                            files = s.files,
                            bytes = s.bytes,
                            refused = s.refused,
                            abandoned = s.abandoned,
                            "artifacts collected"
                        ),
                        Err(e) => {
                            tracing::warn!(run_uid = %uid, error = %e, "artifacts not collected");
                            let _ = tx.blocking_send(Err(Error::Io(e).into()));
                        }
                    }
                }
                // Emptied however the walk ended; a directory that could not
                // be emptied is an error of the stream, so that runtimed
                // never starts the next invocation beside what is left.
                if clear && let Err(e) = at.clear() {
                    tracing::warn!(run_uid = %uid, error = %e, "the artifacts directory was not emptied");
                    let _ = tx.blocking_send(Err(Error::Io(e).into()));
                }
            });
        }
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn stage_inputs(
        &self,
        req: Request<tonic::Streaming<pb::StageChunk>>,
    ) -> Result<Response<pb::StageInputsResponse>, Status> {
        let mut stream = req.into_inner();
        let (uid, attempt) = validate::stage_target(stream.message().await?)?;
        let inputs = self.0.inputs.clone();
        let begun = uid.clone();
        let mut stager = blocking(move || inputs.begin(&begun, attempt)).await?;
        // Each chunk is written as it comes. A failure, or a stream that
        // breaks, drops the stager, which removes what it wrote.
        loop {
            let chunk = match stream.message().await {
                Ok(Some(c)) => c,
                Ok(None) => break,
                Err(status) => {
                    tracing::warn!(run_uid = %uid, attempt, error = %status.message(), "staging broke off");
                    return Err(status);
                }
            };
            let part = chunk
                .part
                .ok_or_else(|| Error::Invalid("a StageChunk is empty".into()))?;
            stager = blocking(move || stager.push(part).map(|()| stager)).await?;
        }
        let inputs = self.0.inputs.clone();
        let (files, bytes) = blocking(move || inputs.commit(stager)).await?;
        tracing::info!(run_uid = %uid, attempt, files, bytes, "inputs staged");
        Ok(Response::new(pb::StageInputsResponse { files, bytes }))
    }
}

/// Runs blocking file work off the async threads.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> crate::error::Result<T> + Send + 'static,
) -> crate::error::Result<T> {
    tokio::task::spawn_blocking(f).await.map_err(|e| {
        Error::Io(std::io::Error::other(format!(
            "a blocking task failed: {e}"
        )))
    })?
}
