//! Background processes of a session: started under a shim like every
//! command (on a terminal of their own when asked), they run until they
//! exit, are signalled or the session closes — whoever is connected. Their
//! output goes into a ring of the last [`RING_BYTES`] ([`ring`]), which a
//! client that connects reads from where it likes and then follows; a slow
//! client loses the oldest bytes, marked, and never holds the process or
//! the server's memory. A session keeps at most [`MAX_RUNNING`] running
//! and the [`MAX_ENDED`] most recently ended ones.

use std::collections::{BTreeMap, VecDeque};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use kruntimes_proto::runtime::v1 as pb;
use nix::sys::signal::Signal;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, watch};
use tonic::Status;

pub mod ring;

use ring::{Ring, Stream};

use super::{Session, path};
use crate::contain::shim::FORWARDED;
use crate::contain::{Launch, Shim};
use crate::error::{Error, Result};

/// Output a process keeps for clients that connect later, in bytes.
pub const RING_BYTES: usize = 1024 * 1024;
/// Running processes per session.
pub const MAX_RUNNING: usize = 64;
/// Ended processes a session remembers (their ring and exit).
pub const MAX_ENDED: usize = 64;
/// How long one input write may wait for the process to read.
pub const INPUT_WITHIN: Duration = Duration::from_secs(10);
/// Grace between SIGTERM and SIGKILL.
pub const KILL_GRACE: Duration = super::exec::KILL_GRACE;
/// Clients that may follow one process's output at once.
pub const MAX_FOLLOWERS: usize = 16;

/// How a process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exit {
    /// Its exit code (`128 + N` for signal N), `None` when it could not be
    /// told (the tree was killed).
    pub code: Option<i32>,
    /// When.
    pub at: SystemTime,
}

/// Where input goes.
enum Input {
    Pipe(tokio::process::ChildStdin),
    Terminal(pty_process::OwnedWritePty),
}

/// What the supervisor of a process is asked to do.
#[derive(Debug, Clone, Copy)]
enum Control {
    Terminate,
    Kill,
    Forward(Signal),
}

/// One background process.
pub struct Process {
    /// Its pid (the shim's: the process's tree lives under it).
    pub pid: u32,
    display: String,
    cwd: String,
    pty: bool,
    started_at: SystemTime,
    ring: Mutex<Ring>,
    /// Bumped on every chunk and at the exit.
    changed: watch::Sender<u64>,
    exit: watch::Sender<Option<Exit>>,
    input: tokio::sync::Mutex<Option<Input>>,
    control: mpsc::UnboundedSender<Control>,
    /// The terminal's controlling side, for its foreground process group.
    terminal: Option<std::os::fd::OwnedFd>,
    /// Clients following its output now.
    followers: std::sync::atomic::AtomicUsize,
}

impl std::fmt::Debug for Process {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Process")
            .field("pid", &self.pid)
            .field("pty", &self.pty)
            .finish_non_exhaustive()
    }
}

fn millis(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl Process {
    /// Whether it still runs.
    pub fn running(&self) -> bool {
        self.exit.borrow().is_none()
    }

    /// Its listing entry.
    pub fn info(&self) -> pb::ProcessInfo {
        let exit = *self.exit.borrow();
        pb::ProcessInfo {
            pid: self.pid,
            display: self.display.clone(),
            cwd: self.cwd.clone(),
            pty: self.pty,
            running: exit.is_none(),
            exit_code: exit.and_then(|e| e.code),
            started_at_ms: millis(self.started_at),
            ended_at_ms: exit.map_or(0, |e| millis(e.at)),
            signal: None,
        }
    }

    fn append(&self, stream: Stream, data: Bytes) {
        let total = {
            let mut ring = self.ring.lock().unwrap_or_else(|p| p.into_inner());
            ring.push(stream, data);
            ring.total()
        };
        self.changed.send_replace(total);
    }

    /// Counts a client that follows the output; refused past
    /// [`MAX_FOLLOWERS`].
    pub fn follower(self: &Arc<Self>) -> Result<Follower> {
        use std::sync::atomic::Ordering;
        if self.followers.fetch_add(1, Ordering::AcqRel) >= MAX_FOLLOWERS {
            self.followers.fetch_sub(1, Ordering::AcqRel);
            return Err(Error::Exhausted(format!(
                "{MAX_FOLLOWERS} clients already follow process {}",
                self.pid
            )));
        }
        Ok(Follower(self.clone()))
    }
}

/// A client following a process's output ([`Process::follower`]).
pub struct Follower(Arc<Process>);

impl Drop for Follower {
    fn drop(&mut self) {
        self.0
            .followers
            .fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

impl Follower {
    /// Streams the ring, then what comes, then the exit, into `events`
    /// until the process has ended or the receiver is gone. One chunk is
    /// copied at a time: a client holds at most the channel's worth.
    pub async fn follow(self, events: mpsc::Sender<Result<pb::ProcessEvent, Status>>) {
        let process = &self.0;
        let mut changed = process.changed.subscribe();
        let mut offset = 0u64;
        let send = |event| {
            let events = events.clone();
            async move {
                let event = pb::ProcessEvent { event: Some(event) };
                events.send(Ok(event)).await.is_ok()
            }
        };
        loop {
            changed.borrow_and_update();
            // The exit is set after the last output: read it first.
            let exit = *process.exit.borrow();
            let since = process
                .ring
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .since(offset);
            if since.lost > 0 {
                offset += since.lost;
                let lost = pb::ProcessLost { bytes: since.lost };
                if !send(pb::process_event::Event::Lost(lost)).await {
                    return;
                }
            }
            for (stream, data, end) in since.chunks {
                offset = end;
                let output = pb::ProcessOutput {
                    stream: stream.wire() as i32,
                    data: data.to_vec(),
                    offset: end,
                };
                if !send(pb::process_event::Event::Output(output)).await {
                    return;
                }
            }
            if let Some(e) = exit {
                let exited = pb::ProcessExited {
                    exit_code: e.code,
                    signal: None,
                };
                send(pb::process_event::Event::Exited(exited)).await;
                return;
            }
            tokio::select! {
                r = changed.changed() => if r.is_err() { return },
                () = events.closed() => return,
            }
        }
    }
}

impl Process {
    /// Writes `data` to its stdin or terminal, then closes stdin when
    /// `close`.
    pub async fn input(&self, data: &[u8], close: bool) -> Result<()> {
        let mut input = self.lock_input().await?;
        if self.exit.borrow().is_some() {
            return Err(Error::Conflict(format!("process {} has ended", self.pid)));
        }
        if close && self.pty {
            return Err(Error::Conflict(
                "a terminal has no stdin to close: send ^D (\\u0004) instead".into(),
            ));
        }
        if close && data.is_empty() && input.is_none() {
            // Closing what is closed: done already.
            return Ok(());
        }
        let Some(sink) = input.as_mut() else {
            return Err(Error::Conflict(format!(
                "the stdin of process {} is closed (start it with stdin to write to it)",
                self.pid
            )));
        };
        if !data.is_empty() {
            let wrote = match sink {
                Input::Pipe(p) => tokio::time::timeout(INPUT_WITHIN, p.write_all(data)).await,
                Input::Terminal(t) => tokio::time::timeout(INPUT_WITHIN, t.write_all(data)).await,
            };
            match wrote {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    *input = None;
                    return Err(Error::Conflict(format!(
                        "the input of process {} is closed: {e}",
                        self.pid
                    )));
                }
                Err(_) => {
                    return Err(Error::Conflict(format!(
                        "process {} did not read its input within {INPUT_WITHIN:?}",
                        self.pid
                    )));
                }
            }
        }
        if close {
            *input = None;
        }
        Ok(())
    }

    /// Its input, once the write before is done ([`INPUT_WITHIN`] at most:
    /// callers never queue without bound behind a process that does not
    /// read).
    async fn lock_input(&self) -> Result<tokio::sync::MutexGuard<'_, Option<Input>>> {
        tokio::time::timeout(INPUT_WITHIN, self.input.lock())
            .await
            .map_err(|_| {
                Error::Conflict(format!(
                    "an earlier input to process {} is still being written",
                    self.pid
                ))
            })
    }

    /// Sets its terminal's size.
    pub async fn resize(&self, rows: u16, cols: u16) -> Result<()> {
        let input = self.lock_input().await?;
        match (&*input, self.exit.borrow().is_some()) {
            (_, true) => Err(Error::Conflict(format!("process {} has ended", self.pid))),
            (Some(Input::Terminal(t)), false) => t
                .resize(pty_process::Size::new(rows, cols))
                .map_err(|e| Error::Io(std::io::Error::other(e.to_string()))),
            _ => Err(Error::Conflict(format!(
                "process {} has no terminal",
                self.pid
            ))),
        }
    }

    /// Sends `signal`: SIGTERM ends the tree (a grace, then SIGKILL),
    /// SIGKILL at once, the [`FORWARDED`] ones go to the process itself.
    pub fn signal(&self, signal: i32) -> Result<()> {
        let signal =
            Signal::try_from(signal).map_err(|_| Error::Invalid(format!("no signal {signal}")))?;
        let control = match signal {
            Signal::SIGTERM => Control::Terminate,
            Signal::SIGKILL => Control::Kill,
            s if FORWARDED.contains(&s) => Control::Forward(s),
            s => return Err(Error::Invalid(format!("{s} cannot be sent to a process"))),
        };
        if self.exit.borrow().is_some() {
            return Err(Error::Conflict(format!("process {} has ended", self.pid)));
        }
        // On a terminal, a signal goes where the terminal's own would: to its
        // foreground process group (the shim there passes nothing on).
        if let (Control::Forward(sig), Some(terminal)) = (control, &self.terminal) {
            let group = nix::unistd::tcgetpgrp(terminal)
                .map_err(|e| Error::Conflict(format!("process {}: {e}", self.pid)))?;
            // ESRCH: the group just ended.
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(-group.as_raw()), sig);
            return Ok(());
        }
        // The supervisor is gone only once the process has ended.
        let _ = self.control.send(control);
        Ok(())
    }
}

/// What starts a process.
#[derive(Debug)]
pub struct Start {
    /// Program and arguments.
    pub argv: Vec<String>,
    /// Workspace-relative working directory.
    pub cwd: String,
    /// Overrides on top of the session's environment.
    pub env: BTreeMap<String, String>,
    /// Keep stdin open for input.
    pub stdin: bool,
    /// A terminal's rows and columns.
    pub pty: Option<(u16, u16)>,
    /// What the list shows as its command.
    pub display: String,
}

/// A session's processes.
#[derive(Debug, Default)]
pub struct Processes {
    table: Mutex<Table>,
}

#[derive(Debug, Default)]
struct Table {
    by_pid: BTreeMap<u32, Arc<Process>>,
    ended: VecDeque<u32>,
}

impl Processes {
    /// A process of the session.
    pub fn get(&self, pid: u32) -> Result<Arc<Process>> {
        self.table
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .by_pid
            .get(&pid)
            .cloned()
            .ok_or_else(|| Error::NotFound(format!("process {pid}")))
    }

    /// Every process held, by pid.
    pub fn list(&self) -> Vec<Arc<Process>> {
        self.table
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .by_pid
            .values()
            .cloned()
            .collect()
    }

    fn running(&self) -> usize {
        self.table
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .by_pid
            .values()
            .filter(|p| p.running())
            .count()
    }

    /// Records that `process` ended, forgetting the oldest ended past
    /// [`MAX_ENDED`]. A process whose pid was already reused (and whose
    /// entry replaced) is not recorded.
    fn ended(&self, process: &Arc<Process>) {
        let mut t = self.table.lock().unwrap_or_else(|p| p.into_inner());
        let pid = process.pid;
        if !t.by_pid.get(&pid).is_some_and(|p| Arc::ptr_eq(p, process)) {
            return;
        }
        t.ended.push_back(pid);
        while t.ended.len() > MAX_ENDED {
            if let Some(old) = t.ended.pop_front() {
                let gone = t
                    .by_pid
                    .get(&old)
                    .is_some_and(|p| p.exit.borrow().is_some());
                if gone {
                    t.by_pid.remove(&old);
                }
            }
        }
    }
}

/// One of a process's outputs.
type Reader = Box<dyn AsyncRead + Send + Unpin>;
/// An output and the stream it is.
type Output = (Stream, Reader);

/// Starts a background process in `session`; its pid.
pub fn start(shim: &Shim, session: &Arc<Session>, req: Start) -> Result<u32> {
    if *session.closing().borrow() {
        return Err(Error::Conflict("the session is closing".into()));
    }
    if session.processes.running() >= MAX_RUNNING {
        return Err(Error::Exhausted(format!(
            "{MAX_RUNNING} processes already run in this session"
        )));
    }
    let cwd = match path::resolve(session.root(), &req.cwd, true) {
        Ok(r) if r.path.is_dir() => r.path,
        Ok(_) => {
            return Err(Error::Conflict(format!(
                "cwd {} is not a directory",
                req.cwd
            )));
        }
        // Missing, or a symlink out (runtimed refuses lexical escapes).
        Err(e) => return Err(Error::Conflict(format!("cwd {}: {e}", req.cwd))),
    };
    let mut env = session.command_env(req.env);
    let (input, terminal, tree, outputs): (Option<Input>, _, _, Vec<Output>) = match req.pty {
        Some((rows, cols)) => {
            env.entry("TERM".into())
                .or_insert_with(|| "xterm-256color".into());
            let launch = Launch {
                argv: &req.argv,
                cwd: &cwd,
                env: &env,
                grace: KILL_GRACE,
                stdio: [Stdio::null(), Stdio::null(), Stdio::null()],
                pass: None,
            };
            let (tree, pty) = shim
                .spawn_on_terminal(launch, pty_process::Size::new(rows, cols))
                .map_err(|e| Error::Conflict(format!("start {}: {e}", req.argv[0])))?;
            let master = std::os::fd::AsFd::as_fd(&pty).try_clone_to_owned()?;
            let (read, write) = pty.into_split();
            (
                Some(Input::Terminal(write)),
                Some(master),
                tree,
                vec![(Stream::Pty, Box::new(read) as Reader)],
            )
        }
        None => {
            let stdin = if req.stdin {
                Stdio::piped()
            } else {
                Stdio::null()
            };
            let launch = Launch {
                argv: &req.argv,
                cwd: &cwd,
                env: &env,
                grace: KILL_GRACE,
                stdio: [stdin, Stdio::piped(), Stdio::piped()],
                pass: None,
            };
            let mut tree = shim
                .spawn(launch)
                .map_err(|e| Error::Conflict(format!("start {}: {e}", req.argv[0])))?;
            let child = tree.child();
            let input = child.stdin.take().map(Input::Pipe);
            let mut outputs: Vec<Output> = Vec::new();
            if let Some(o) = child.stdout.take() {
                outputs.push((Stream::Stdout, Box::new(o)));
            }
            if let Some(e) = child.stderr.take() {
                outputs.push((Stream::Stderr, Box::new(e)));
            }
            (input, None, tree, outputs)
        }
    };
    let pid = tree.id().unwrap_or_default();
    let (control, commands) = mpsc::unbounded_channel();
    let process = Arc::new(Process {
        pid,
        display: req.display,
        cwd: req.cwd,
        pty: req.pty.is_some(),
        started_at: SystemTime::now(),
        ring: Mutex::new(Ring::new(RING_BYTES)),
        changed: watch::channel(0).0,
        exit: watch::channel(None).0,
        input: tokio::sync::Mutex::new(input),
        control,
        terminal,
        followers: std::sync::atomic::AtomicUsize::new(0),
    });
    {
        let mut t = session
            .processes
            .table
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        // A pid the kernel reused: the ended process of that pid goes.
        t.ended.retain(|p| *p != pid);
        t.by_pid.insert(pid, process.clone());
    }
    let readers: Vec<_> = outputs
        .into_iter()
        .map(|(stream, r)| tokio::spawn(read(process.clone(), stream, r)))
        .collect();
    let task = tokio::spawn(supervise(session.clone(), process, tree, commands, readers));
    session.track(task);
    tracing::info!(run_uid = %session.run_uid, pid, "background process started");
    Ok(pid)
}

/// Appends what `r` yields to the process's ring until its end (a
/// terminal's end is an error once its last user is gone).
async fn read(process: Arc<Process>, stream: Stream, mut r: Reader) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => process.append(stream, Bytes::copy_from_slice(&buf[..n])),
        }
    }
}

/// Waits for the process's tree, doing what it is asked meanwhile, and
/// records its exit once its output is read.
async fn supervise(
    session: Arc<Session>,
    process: Arc<Process>,
    mut tree: crate::contain::Contained,
    mut commands: mpsc::UnboundedReceiver<Control>,
    readers: Vec<tokio::task::JoinHandle<()>>,
) {
    let mut closing = session.closing();
    let status = loop {
        tokio::select! {
            s = tree.wait() => break Some(s.ok()),
            Some(c) = commands.recv() => match c {
                Control::Terminate => tree.terminate(),
                Control::Kill => tree.kill(),
                Control::Forward(sig) => {
                    if let Some(pid) = tree.id().and_then(|p| i32::try_from(p).ok()) {
                        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig);
                    }
                }
            },
            _ = closing.wait_for(|c| *c) => break None,
        }
    };
    let status = match status {
        Some(s) => s,
        // The session is closing: the tree goes.
        None => {
            tree.terminate();
            tree.wait().await.ok()
        }
    };
    // The tree is gone, and with it every writer of the output.
    for r in readers {
        let _ = r.await;
    }
    *process.input.lock().await = None;
    let code = status.map(|s| crate::contain::shim::exit_code(&s));
    process.exit.send_replace(Some(Exit {
        code,
        at: SystemTime::now(),
    }));
    // Wakes the followers, who read the exit.
    process.changed.send_modify(|_| {});
    session.processes.ended(&process);
    tracing::info!(run_uid = %session.run_uid, pid = process.pid, exit_code = code, "background process ended");
}
