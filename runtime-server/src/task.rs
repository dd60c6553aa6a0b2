//! Task mode: one process per Run attempt, run to its exit. Starting writes
//! the source into a fresh working directory and starts the process under a
//! shim (its whole tree killed on cancel, double-forked and `setsid`
//! children included), with the files staged for it when asked
//! ([`crate::inputs`]) and an empty artifacts directory when asked
//! ([`crate::artifacts`]); its output goes, as it comes, to the Run's log, to a
//! bounded tail per stream for the result, and to whoever watches. The
//! server keeps the latest attempt of each Run — running or ended — until
//! it is closed.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use kruntimes_proto::runtime::v1 as pb;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::{broadcast, watch};

use crate::artifacts;
use crate::contain::{Contained, Launch, Shim};
use crate::error::{Error, Result};
use crate::function::Backend;
use crate::held::Held;
use crate::inputs::Inputs;
use crate::logs::{self, StreamLog, Tail};
use crate::validate::{Program, StartTask};
use crate::{env, source};

/// Grace between SIGTERM and SIGKILL when a task is cancelled.
pub const KILL_GRACE: Duration = Duration::from_secs(2);
/// Output chunks a watcher may fall behind before it loses some.
const WATCH_BUFFER: usize = 256;

/// One chunk of a task's output, as watchers receive it: its stream, the
/// bytes of that stream before it, and its bytes.
pub type Chunk = (pb::CommandStream, u64, Arc<[u8]>);

/// Index of a stream in per-stream arrays (stdout 0, stderr 1).
fn slot(stream: pb::CommandStream) -> usize {
    usize::from(stream == pb::CommandStream::Stderr)
}

/// One task: the latest attempt of a Run.
#[derive(Debug)]
pub struct Task {
    /// Run UID.
    pub run_uid: String,
    /// Attempt.
    pub attempt: u64,
    /// When it started, Unix milliseconds.
    pub started_unix_ms: i64,
    root: PathBuf,
    logs: PathBuf,
    /// Its artifacts directory, when it was started with one.
    artifacts: Option<artifacts::Location>,
    output: broadcast::Sender<Chunk>,
    /// Bytes written to each stream so far (stdout, stderr).
    written: [std::sync::atomic::AtomicU64; 2],
    result: watch::Sender<Option<pb::TaskResult>>,
    cancel: watch::Sender<bool>,
    runner: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Task {
    /// Its artifacts directory, when it was started with one.
    pub fn artifacts(&self) -> Option<&artifacts::Location> {
        self.artifacts.as_ref()
    }

    /// The result, once the task has ended.
    pub fn result(&self) -> Option<pb::TaskResult> {
        self.result.borrow().clone()
    }

    /// Its output from now on, and its result.
    pub fn watch(
        &self,
    ) -> (
        broadcast::Receiver<Chunk>,
        watch::Receiver<Option<pb::TaskResult>>,
    ) {
        (self.output.subscribe(), self.result.subscribe())
    }

    /// Kills the task's tree unless it has ended, and waits for its result;
    /// whether it was running.
    pub async fn cancel(&self) -> bool {
        let running = self.result.borrow().is_none();
        let _ = self.cancel.send(true);
        let mut result = self.result.subscribe();
        let _ = result.wait_for(Option::is_some).await;
        running
    }

    async fn close(&self) {
        self.cancel().await;
        let runner = self.runner.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(r) = runner {
            let _ = r.await;
        }
        let _ = std::fs::remove_dir_all(&self.root);
        if let Some(a) = &self.artifacts
            && let Err(e) = a.remove()
        {
            tracing::warn!(run_uid = %self.run_uid, error = %e, "the task's artifacts directory stays");
        }
        logs::remove_run_log_in(Some(&self.logs), &self.run_uid);
    }
}

/// Every task of the server.
pub struct Tasks {
    root: PathBuf,
    logs: PathBuf,
    shim: Shim,
    python: PathBuf,
    inputs: Arc<Inputs>,
    held: Held<Task>,
}

impl Tasks {
    /// No tasks yet; working directories live under `root`, the Runs' logs
    /// in `logs`, Python tasks run with `python`, staged files come from
    /// `inputs`.
    pub fn new(
        root: PathBuf,
        logs: PathBuf,
        shim: Shim,
        python: PathBuf,
        inputs: Arc<Inputs>,
    ) -> Self {
        Self {
            root,
            logs,
            shim,
            python,
            inputs,
            held: Held::default(),
        }
    }

    /// The task of a Run, at `attempt` unless it is 0.
    pub fn get(&self, run_uid: &str, attempt: u64) -> Result<Arc<Task>> {
        self.held
            .get(run_uid)
            .filter(|t| attempt == 0 || t.attempt == attempt)
            .ok_or_else(|| {
                Error::NotFound(match attempt {
                    0 => format!("task {run_uid}"),
                    _ => format!("task {run_uid} at attempt {attempt}"),
                })
            })
    }

    /// Starts a task: the same attempt again answers as the first call did,
    /// a higher one replaces the older (its tree killed), a lower one is
    /// refused.
    pub async fn start(&self, req: StartTask) -> Result<Arc<Task>> {
        let _change = self.held.change().await;
        match self.held.get(&req.run_uid) {
            Some(t) if t.attempt == req.attempt => return Ok(t),
            Some(t) if t.attempt > req.attempt => {
                return Err(Error::Stale {
                    requested: req.attempt,
                    current: t.attempt,
                });
            }
            Some(t) => {
                self.held.take(&t.run_uid);
                t.close().await;
            }
            None => {}
        }
        let workspace = self.root.join(&req.run_uid);
        if workspace.exists() {
            std::fs::remove_dir_all(&workspace)?;
        }
        std::fs::create_dir_all(&workspace)?;
        let root = workspace.canonicalize()?;
        // Beside the working directory, never in it; empty for each
        // attempt. Without artifacts, whatever an earlier server left goes.
        let location = artifacts::Location::new(&self.root, &req.run_uid);
        let artifacts = if req.artifacts {
            location.create().map(|_| Some(location.clone()))
        } else {
            location.remove().map(|()| None)
        };
        let task = match artifacts
            .map_err(Error::from)
            .and_then(|a| self.spawn(&root, req, a))
        {
            Ok(t) => t,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&root);
                let _ = location.remove();
                return Err(e);
            }
        };
        tracing::info!(run_uid = %task.run_uid, attempt = task.attempt, "task started");
        self.held.insert(task.run_uid.clone(), task.clone());
        Ok(task)
    }

    fn spawn(
        &self,
        root: &Path,
        req: StartTask,
        artifacts: Option<artifacts::Location>,
    ) -> Result<Arc<Task>> {
        if let Some((path, text)) = &req.source {
            source::write_inline(root, path, text.as_bytes())?;
        }
        // After the source, which no staged file may replace. Without
        // inputs, whatever was staged for the Run goes.
        if req.inputs {
            self.inputs.take(&req.run_uid, req.attempt, root)?;
        } else {
            self.inputs.discard(&req.run_uid)?;
        }
        let mut env = env::for_run(&req.run_uid, root, req.env);
        // The server's, whatever the request says.
        if let Some(a) = &artifacts {
            env.insert(
                kruntimes_proto::runtime::ARTIFACTS_DIR_ENV.into(),
                a.path().display().to_string(),
            );
        }
        // Which attempt this is (1, 2, …): a retried task may tell.
        env.entry("KRUNTIMES_ATTEMPT".into())
            .or_insert_with(|| req.attempt.to_string());
        let argv = argv(req.kind, &self.python, &req.program);
        if lookup(&argv[0], env.get("PATH").map(String::as_str)).is_none() {
            return Err(Error::Load(format!(
                "{}: not found or not executable on the task's PATH",
                argv[0]
            )));
        }
        let mut tree = self
            .shim
            .spawn(Launch {
                argv: &argv,
                cwd: root,
                env: &env,
                grace: KILL_GRACE,
                stdio: [Stdio::null(), Stdio::piped(), Stdio::piped()],
                pass: None,
            })
            .map_err(|e| Error::Load(format!("start {}: {e}", argv[0])))?;
        let (output, _) = broadcast::channel(WATCH_BUFFER);
        let task = Arc::new(Task {
            run_uid: req.run_uid,
            attempt: req.attempt,
            started_unix_ms: unix_ms(SystemTime::now()),
            root: root.to_path_buf(),
            logs: self.logs.clone(),
            artifacts,
            output,
            written: Default::default(),
            result: watch::channel(None).0,
            cancel: watch::channel(false).0,
            runner: Mutex::new(None),
        });
        let tails = [
            Tail::with_capacity(req.tail_bytes),
            Tail::with_capacity(req.tail_bytes),
        ];
        let child = tree.child();
        let readers = [
            child.stdout.take().map(|s| {
                tokio::spawn(pump(
                    s,
                    pb::CommandStream::Stdout,
                    task.clone(),
                    tails[0].clone(),
                ))
            }),
            child.stderr.take().map(|s| {
                tokio::spawn(pump(
                    s,
                    pb::CommandStream::Stderr,
                    task.clone(),
                    tails[1].clone(),
                ))
            }),
        ];
        let runner = tokio::spawn(run(task.clone(), tree, readers, tails));
        *task.runner.lock().unwrap_or_else(|p| p.into_inner()) = Some(runner);
        Ok(task)
    }

    /// Closes a task: kills what runs, removes its directory, its Run's
    /// log and what was staged for it; `false` when there is none.
    pub async fn close(&self, run_uid: &str) -> bool {
        let _change = self.held.change().await;
        if let Err(e) = self.inputs.discard(run_uid) {
            tracing::warn!(run_uid = %run_uid, error = %e, "the task's staged inputs stay");
        }
        let Some(t) = self.held.take(run_uid) else {
            return false;
        };
        t.close().await;
        tracing::info!(run_uid = %run_uid, "task closed");
        true
    }

    /// Closes every task.
    pub async fn reset(&self) -> usize {
        let _change = self.held.change().await;
        let all = self.held.drain();
        for t in &all {
            t.close().await;
        }
        all.len()
    }
}

/// The command line of a task.
fn argv(kind: Backend, python: &Path, program: &Program) -> Vec<String> {
    let interpreter = match kind {
        // Unbuffered: output reaches the log and watchers as it is written.
        Backend::Python => vec![python.display().to_string(), "-u".into()],
        Backend::Bash => vec!["bash".into()],
    };
    let mut argv = interpreter;
    match program {
        Program::Inline(path) => argv.push(path.clone()),
        Program::Entrypoint { path, args } => {
            argv.push(path.clone());
            argv.extend(args.iter().cloned());
        }
        // As a CI runner does: the first failing command (or pipeline
        // stage) ends the script with its code.
        Program::Commands(script) => {
            argv.extend(["-e", "-o", "pipefail", "-c"].map(String::from));
            argv.push(script.clone());
        }
    }
    argv
}

/// `program` as the child's PATH resolves it, if it is an executable file.
fn lookup(program: &str, path: Option<&str>) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let executable = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.contains('/') {
        let p = PathBuf::from(program);
        return executable(&p).then_some(p);
    }
    path?
        .split(':')
        .filter(|d| !d.is_empty())
        .map(|d| Path::new(d).join(program))
        .find(|p| executable(p))
}

fn unix_ms(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Reads one stream of the task to its end: to the Run's log, the tail and
/// the watchers.
async fn pump<R: AsyncRead + Unpin>(
    mut r: R,
    stream: pb::CommandStream,
    task: Arc<Task>,
    tail: Tail,
) {
    let mut log = StreamLog::new(
        Some(&task.logs),
        &task.run_uid,
        match stream {
            pb::CommandStream::Stderr => logs::Stream::Stderr,
            _ => logs::Stream::Stdout,
        },
    );
    let mut buf = vec![0u8; 16 * 1024];
    let mut offset = 0u64;
    loop {
        let n = match r.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let chunk = &buf[..n];
        tail.push(chunk);
        log.push(chunk);
        // Counted before it is sent: a watcher that subscribes between the
        // two starts past it and counts nothing before its watch as lost.
        task.written[slot(stream)].store(offset + n as u64, std::sync::atomic::Ordering::Release);
        // No watcher is fine.
        let _ = task.output.send((stream, offset, Arc::from(chunk)));
        offset += n as u64;
    }
    log.finish();
}

/// Waits for the task to exit or be cancelled, then publishes its result.
async fn run(
    task: Arc<Task>,
    mut tree: Contained,
    readers: [Option<tokio::task::JoinHandle<()>>; 2],
    tails: [Tail; 2],
) {
    let mut cancel = task.cancel.subscribe();
    let (status, cancelled) = tokio::select! {
        s = tree.wait() => (s.ok(), false),
        _ = async { let _ = cancel.wait_for(|c| *c).await; } => {
            tree.terminate();
            (tree.wait().await.ok(), true)
        }
    };
    for r in readers.into_iter().flatten() {
        let _ = r.await;
    }
    let exit_code = status.map_or(1, |s| crate::contain::shim::exit_code(&s));
    let (stdout_tail, stdout_truncated) = tails[0].utf8();
    let (stderr_tail, stderr_truncated) = tails[1].utf8();
    let result = pb::TaskResult {
        attempt: task.attempt,
        end: if cancelled {
            pb::TaskEnd::Cancelled
        } else {
            pb::TaskEnd::Exited
        } as i32,
        exit_code,
        stdout_tail,
        stderr_tail,
        stdout_truncated,
        stderr_truncated,
        started_unix_ms: task.started_unix_ms,
        finished_unix_ms: unix_ms(SystemTime::now()),
    };
    tracing::info!(run_uid = %task.run_uid, attempt = task.attempt, exit_code, cancelled, "task ended");
    task.result.send_replace(Some(result));
}

/// The events of a watch: output (when asked for) as it comes, then the
/// result. It subscribes now, before the caller answers the watch: no
/// output written after that is missed, and what a slow watcher loses is
/// counted in bytes ([`pb::task_event::Event::Dropped`]).
pub fn follow(
    task: Arc<Task>,
    with_output: bool,
    events: tokio::sync::mpsc::Sender<std::result::Result<pb::TaskEvent, tonic::Status>>,
) -> impl std::future::Future<Output = ()> + Send {
    let (output, result) = task.watch();
    let from = [0, 1].map(|i| task.written[i].load(std::sync::atomic::Ordering::Acquire));
    follow_from(task, output, result, from, with_output, events)
}

async fn follow_from(
    task: Arc<Task>,
    mut output: broadcast::Receiver<Chunk>,
    mut result: watch::Receiver<Option<pb::TaskResult>>,
    from: [u64; 2],
    with_output: bool,
    events: tokio::sync::mpsc::Sender<std::result::Result<pb::TaskEvent, tonic::Status>>,
) {
    use pb::task_event::Event;
    let send = |e: Event| {
        let events = events.clone();
        async move {
            events
                .send(Ok(pb::TaskEvent { event: Some(e) }))
                .await
                .is_ok()
        }
    };
    // The next byte of each stream this watcher expects: a chunk further on
    // means the bytes between were dropped.
    let mut next = from;
    let mut forward = |(stream, offset, data): Chunk| {
        let expected = &mut next[slot(stream)];
        let gap = offset.saturating_sub(*expected);
        *expected = (*expected).max(offset + data.len() as u64);
        let output = Event::Output(pb::CommandOutput {
            stream: stream as i32,
            data: data.to_vec(),
        });
        [(gap > 0).then_some(Event::Dropped(gap)), Some(output)]
    };
    loop {
        tokio::select! {
            biased;
            chunk = output.recv(), if with_output => {
                let batch = match chunk {
                    Ok(c) => forward(c),
                    // The next chunk tells how much.
                    Err(broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(broadcast::error::RecvError::Closed) => [None, None],
                };
                for e in batch.into_iter().flatten() {
                    if !send(e).await {
                        return;
                    }
                }
            }
            _ = async { let _ = result.wait_for(Option::is_some).await; } => break,
        }
    }
    // The readers finished before the result was set: what is buffered is
    // the rest of the output, and what the buffer lost is counted.
    if with_output {
        loop {
            let batch = match output.try_recv() {
                Ok(c) => forward(c),
                Err(broadcast::error::TryRecvError::Lagged(_)) => continue,
                Err(_) => break,
            };
            for e in batch.into_iter().flatten() {
                if !send(e).await {
                    return;
                }
            }
        }
        let lost: u64 = (0..2)
            .map(|i| {
                task.written[i]
                    .load(std::sync::atomic::Ordering::Acquire)
                    .saturating_sub(next[i])
            })
            .sum();
        if lost > 0 && !send(Event::Dropped(lost)).await {
            return;
        }
    }
    let last = result.borrow().clone();
    if let Some(r) = last {
        send(Event::Result(r)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_program_has_its_command_line() {
        let py = Path::new("/usr/bin/python3");
        assert_eq!(
            argv(Backend::Python, py, &Program::Inline("main.py".into())),
            ["/usr/bin/python3", "-u", "main.py"]
        );
        let entry = Program::Entrypoint {
            path: "bin/run.sh".into(),
            args: vec!["a b".into(), "--x".into()],
        };
        assert_eq!(
            argv(Backend::Bash, py, &entry),
            ["bash", "bin/run.sh", "a b", "--x"]
        );
        assert_eq!(
            argv(
                Backend::Bash,
                py,
                &Program::Commands("echo 1\nfalse".into())
            ),
            ["bash", "-e", "-o", "pipefail", "-c", "echo 1\nfalse"]
        );
    }

    #[test]
    fn programs_are_looked_up_on_the_tasks_path() {
        assert!(lookup("sh", Some("/nowhere:/bin:/usr/bin")).is_some());
        assert_eq!(lookup("sh", Some("/nowhere")), None);
        assert_eq!(lookup("sh", None), None);
        assert!(lookup("/bin/sh", None).is_some());
        assert_eq!(lookup("/etc/hostname-not-here", None), None);
        // A file that is not executable is not a program.
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("tool"), "x").unwrap();
        assert_eq!(lookup("tool", d.path().to_str()), None);
    }
}
