//! Running one command in a session workspace under a shim: stdin fed,
//! output streamed as it comes and captured up to a bound, then the result.
//! The deadline, the session closing, or the caller going away (the
//! response stream dropped) ends the command's whole tree: SIGTERM, a grace
//! period, then SIGKILL.

use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kruntimes_proto::runtime::v1 as pb;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;
use tonic::Status;

use super::{Session, path};
use crate::contain::{Launch, Shim};
use crate::validate::Command;

/// Grace between SIGTERM and SIGKILL.
pub const KILL_GRACE: Duration = Duration::from_secs(2);

/// Where a command's events go (the response stream).
pub type Events = mpsc::Sender<Result<pb::CommandEvent, Status>>;

fn output(stream: pb::CommandStream, data: &[u8]) -> pb::CommandEvent {
    pb::CommandEvent {
        event: Some(pb::command_event::Event::Output(pb::CommandOutput {
            stream: stream as i32,
            data: data.to_vec(),
        })),
    }
}

fn result(r: pb::CommandResult) -> pb::CommandEvent {
    pb::CommandEvent {
        event: Some(pb::command_event::Event::Result(r)),
    }
}

/// The result of a command that could not run.
fn refused(error: String) -> pb::CommandResult {
    pb::CommandResult {
        state: pb::CommandState::Failed as i32,
        error,
        ..Default::default()
    }
}

/// Reads `r` to its end: streams every chunk, keeps the first `max` bytes.
async fn capture<R: AsyncRead + Unpin>(
    mut r: R,
    stream: pb::CommandStream,
    max: usize,
    events: Events,
) -> (Vec<u8>, bool) {
    let mut kept = Vec::new();
    let mut truncated = false;
    let mut buf = vec![0u8; 16 * 1024];
    let mut sink = Some(events);
    loop {
        let n = match r.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let room = max.saturating_sub(kept.len());
        if room < n {
            truncated = true;
        }
        kept.extend_from_slice(&buf[..n.min(room)]);
        if let Some(s) = &sink
            && s.send(Ok(output(stream, &buf[..n]))).await.is_err()
        {
            // Nobody listens any more; keep draining so nothing blocks on a
            // full pipe until the tree is killed.
            sink = None;
        }
    }
    (kept, truncated)
}

/// Starts `cmd` in `session` and returns at once; events go to `events`.
pub fn start(shim: &Shim, session: &Arc<Session>, cmd: Command, events: Events) {
    let task = tokio::spawn(run(shim.clone(), session.clone(), cmd, events));
    session.track(task);
}

async fn run(shim: Shim, session: Arc<Session>, cmd: Command, events: Events) {
    let started = Instant::now();
    let cwd = match path::resolve(session.root(), &cmd.cwd, true) {
        Ok(r) if r.path.is_dir() => r.path,
        Ok(_) => {
            let msg = format!("cwd {} is not a directory", cmd.cwd);
            let _ = events.send(Ok(result(refused(msg)))).await;
            return;
        }
        Err(e) => {
            let _ = events
                .send(Ok(result(refused(format!("{}: {e}", cmd.cwd)))))
                .await;
            return;
        }
    };
    let env = session.command_env(cmd.env);
    let spawned = shim.spawn(Launch {
        argv: &cmd.argv,
        cwd: &cwd,
        env: &env,
        grace: KILL_GRACE,
        stdio: [Stdio::piped(), Stdio::piped(), Stdio::piped()],
        pass: None,
    });
    let mut tree = match spawned {
        Ok(t) => t,
        Err(e) => {
            let msg = format!("start {}: {e}", cmd.argv[0]);
            let _ = events.send(Ok(result(refused(msg)))).await;
            return;
        }
    };
    let _running = tree.id().map(|pid| session.running(pid));
    let child = tree.child();
    let stdin = child.stdin.take();
    let input = cmd.stdin;
    let feed = tokio::spawn(async move {
        if let Some(mut s) = stdin {
            // The command may exit without reading: a broken pipe is fine.
            let _ = s.write_all(&input).await;
        }
    });
    let out = child.stdout.take().map(|s| {
        tokio::spawn(capture(
            s,
            pb::CommandStream::Stdout,
            cmd.max_output,
            events.clone(),
        ))
    });
    let err = child.stderr.take().map(|s| {
        tokio::spawn(capture(
            s,
            pb::CommandStream::Stderr,
            cmd.max_output,
            events.clone(),
        ))
    });
    let mut closing = session.closing();
    enum End {
        Exited(Option<std::process::ExitStatus>),
        TimedOut,
        Stopped,
    }
    let end = tokio::select! {
        s = tree.wait() => End::Exited(s.ok()),
        _ = tokio::time::sleep(cmd.timeout) => End::TimedOut,
        _ = closing.wait_for(|c| *c) => End::Stopped,
        _ = events.closed() => End::Stopped,
    };
    if !matches!(end, End::Exited(_)) {
        tree.terminate();
        let _ = tree.wait().await;
    }
    feed.abort();
    let collect = |h: Option<tokio::task::JoinHandle<(Vec<u8>, bool)>>| async move {
        match h {
            Some(h) => h.await.unwrap_or_default(),
            None => (Vec::new(), false),
        }
    };
    let (stdout, stdout_truncated) = collect(out).await;
    let (stderr, stderr_truncated) = collect(err).await;
    let (state, exit_code) = match end {
        End::Exited(Some(s)) => {
            let code = crate::contain::shim::exit_code(&s);
            let state = if code == 0 {
                pb::CommandState::Succeeded
            } else {
                pb::CommandState::Failed
            };
            (state, Some(code))
        }
        End::Exited(None) | End::Stopped => (pb::CommandState::Failed, None),
        End::TimedOut => (pb::CommandState::TimedOut, None),
    };
    let _ = events
        .send(Ok(result(pb::CommandResult {
            state: state as i32,
            exit_code,
            error: String::new(),
            stdout,
            stderr,
            stdout_truncated,
            stderr_truncated,
            duration_ms: started.elapsed().as_millis() as u64,
        })))
        .await;
}
