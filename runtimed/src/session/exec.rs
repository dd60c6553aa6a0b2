//! Running one command in a session workspace: its own process group, bounded
//! stdin and captured output, optional streaming of output chunks, and a
//! timeout or cancellation that terminates the whole group (TERM, a grace
//! period, then KILL).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, watch};

use super::ops::MAX_OUTPUT_BYTES;
use super::outcome::{OpState, OperationResult};

/// Grace between SIGTERM and SIGKILL.
pub const KILL_GRACE: Duration = Duration::from_secs(2);

/// An output chunk for streaming.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// `stdout` or `stderr`.
    pub stream: &'static str,
    /// Bytes.
    pub data: Vec<u8>,
}

/// What a command needs.
pub struct CommandRun<'a> {
    /// Operation id.
    pub operation_id: &'a str,
    /// Program and arguments.
    pub argv: &'a [String],
    /// Stdin.
    pub stdin: &'a [u8],
    /// Resolved working directory.
    pub cwd: &'a Path,
    /// Complete environment.
    pub env: &'a BTreeMap<String, String>,
    /// Deadline.
    pub timeout: Duration,
}

fn signal_group(pid: Option<u32>, sig: nix::sys::signal::Signal) {
    if let Some(pid) = pid.and_then(|p| i32::try_from(p).ok()) {
        let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pid), sig);
    }
}

async fn capture<R: AsyncRead + Unpin>(
    mut r: R,
    stream: &'static str,
    sink: Option<mpsc::Sender<Chunk>>,
) -> (Vec<u8>, bool) {
    let mut kept = Vec::new();
    let mut truncated = false;
    let mut buf = vec![0u8; 16 * 1024];
    let mut sink = sink;
    loop {
        let n = match r.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let room = MAX_OUTPUT_BYTES.saturating_sub(kept.len());
        if room < n {
            truncated = true;
        }
        kept.extend_from_slice(&buf[..n.min(room)]);
        if let Some(s) = &sink
            && s.send(Chunk {
                stream,
                data: buf[..n].to_vec(),
            })
            .await
            .is_err()
        {
            // The client went away; keep draining so the command is not
            // blocked on a full pipe.
            sink = None;
        }
    }
    (kept, truncated)
}

/// Runs the command to completion, timeout or cancellation.
pub async fn run(
    cmd: CommandRun<'_>,
    sink: Option<mpsc::Sender<Chunk>>,
    mut cancel: watch::Receiver<bool>,
) -> OperationResult {
    let started = Instant::now();
    let spawned = tokio::process::Command::new(&cmd.argv[0])
        .args(&cmd.argv[1..])
        .current_dir(cmd.cwd)
        .env_clear()
        .envs(cmd.env)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .spawn();
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => {
            let mut r = OperationResult::bare(
                cmd.operation_id,
                OpState::Failed,
                0,
                Some(format!("start {}: {e}", cmd.argv[0])),
            );
            r.exit_code = Some(127);
            return r;
        }
    };
    let pid = child.id();
    let stdin = child.stdin.take();
    let input = cmd.stdin.to_vec();
    let feed = tokio::spawn(async move {
        if let Some(mut s) = stdin {
            let _ = s.write_all(&input).await;
        }
    });
    let out = child
        .stdout
        .take()
        .map(|s| tokio::spawn(capture(s, "stdout", sink.clone())));
    let err = child
        .stderr
        .take()
        .map(|s| tokio::spawn(capture(s, "stderr", sink)));
    let (state, status) = tokio::select! {
        s = child.wait() => (None, s.ok()),
        _ = tokio::time::sleep(cmd.timeout) => (Some(OpState::TimedOut), None),
        _ = cancel.wait_for(|c| *c) => (Some(OpState::Cancelled), None),
    };
    let status = match status {
        Some(s) => Some(s),
        None => {
            signal_group(pid, nix::sys::signal::Signal::SIGTERM);
            match tokio::time::timeout(KILL_GRACE, child.wait()).await {
                Ok(s) => s.ok(),
                Err(_) => {
                    signal_group(pid, nix::sys::signal::Signal::SIGKILL);
                    child.wait().await.ok()
                }
            }
        }
    };
    // Whatever the command left running in its group ends with it.
    signal_group(pid, nix::sys::signal::Signal::SIGKILL);
    feed.abort();
    let collect = |h: Option<tokio::task::JoinHandle<(Vec<u8>, bool)>>| async move {
        match h {
            Some(h) => tokio::time::timeout(Duration::from_secs(5), h)
                .await
                .ok()
                .and_then(Result::ok)
                .unwrap_or_default(),
            None => (Vec::new(), false),
        }
    };
    let (stdout, stdout_truncated) = collect(out).await;
    let (stderr, stderr_truncated) = collect(err).await;
    let exit_code = status.and_then(|s| s.code());
    let state = state.unwrap_or(if exit_code == Some(0) {
        OpState::Succeeded
    } else {
        OpState::Failed
    });
    OperationResult {
        operation_id: cmd.operation_id.to_owned(),
        state,
        exit_code,
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
        stdout_truncated,
        stderr_truncated,
        duration_ms: started.elapsed().as_millis() as u64,
        error: None,
    }
}
