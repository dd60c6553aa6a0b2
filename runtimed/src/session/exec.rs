//! Running one command of a session through the Runtime Server
//! (`RunCommand`): its output chunks streamed to the operation's events as
//! they come, then its result. Cancellation drops the call; the server then
//! ends the command's whole process tree (SIGTERM, a grace period, SIGKILL).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kruntimes_proto::runtime::v1 as rt;
use kruntimes_proto::runtime::v1::command_event::Event;
use tokio::sync::{mpsc, watch};
use tokio_stream::StreamExt;

use super::ops::MAX_OUTPUT_BYTES;
use super::outcome::{OpState, OperationResult};
use crate::runtime::Client;

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
    /// The session's Run UID.
    pub run_uid: &'a str,
    /// Operation id.
    pub operation_id: &'a str,
    /// Program and arguments.
    pub argv: &'a [String],
    /// Stdin.
    pub stdin: &'a [u8],
    /// Workspace-relative working directory.
    pub cwd: &'a str,
    /// Environment overrides on top of the session's.
    pub env: &'a BTreeMap<String, String>,
    /// Deadline.
    pub timeout: Duration,
}

/// The operation's result from the server's.
pub fn result(operation_id: &str, r: rt::CommandResult) -> OperationResult {
    let state = match rt::CommandState::try_from(r.state) {
        Ok(rt::CommandState::Succeeded) => OpState::Succeeded,
        Ok(rt::CommandState::TimedOut) => OpState::TimedOut,
        _ => OpState::Failed,
    };
    OperationResult {
        operation_id: operation_id.to_owned(),
        state,
        exit_code: r.exit_code,
        stdout: String::from_utf8_lossy(&r.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&r.stderr).into_owned(),
        stdout_truncated: r.stdout_truncated,
        stderr_truncated: r.stderr_truncated,
        duration_ms: r.duration_ms,
        error: (!r.error.is_empty()).then_some(r.error),
        pid: None,
        refusal: None,
    }
}

fn failed(operation_id: &str, started: Instant, error: String) -> OperationResult {
    OperationResult::bare(
        operation_id,
        OpState::Failed,
        started.elapsed().as_millis() as u64,
        Some(error),
    )
}

/// Runs the command to its result, or until `cancel` fires.
pub async fn run(
    mut client: Client,
    cmd: CommandRun<'_>,
    sink: Option<mpsc::Sender<Chunk>>,
    mut cancel: watch::Receiver<bool>,
) -> OperationResult {
    let started = Instant::now();
    let id = cmd.operation_id;
    let req = rt::RunCommandRequest {
        run_uid: cmd.run_uid.to_owned(),
        argv: cmd.argv.to_vec(),
        stdin: cmd.stdin.to_vec(),
        cwd: cmd.cwd.to_owned(),
        env: cmd.env.clone().into_iter().collect(),
        timeout_ms: u32::try_from(cmd.timeout.as_millis()).unwrap_or(u32::MAX),
        max_output_bytes: MAX_OUTPUT_BYTES as u64,
    };
    let mut events = match client.sessions.run_command(req).await {
        Ok(r) => r.into_inner(),
        Err(s) => return failed(id, started, format!("runtime server: {}", s.message())),
    };
    let mut sink = sink;
    loop {
        let ev = tokio::select! {
            ev = events.next() => ev,
            // Dropping the stream is the cancellation the server acts on.
            _ = cancel.wait_for(|c| *c) => {
                return OperationResult::bare(
                    id,
                    OpState::Cancelled,
                    started.elapsed().as_millis() as u64,
                    Some("operation cancelled".into()),
                );
            }
        };
        match ev {
            Some(Ok(rt::CommandEvent {
                event: Some(Event::Output(o)),
            })) => {
                let stream = match rt::CommandStream::try_from(o.stream) {
                    Ok(rt::CommandStream::Stderr) => "stderr",
                    _ => "stdout",
                };
                if let Some(s) = &sink
                    && s.send(Chunk {
                        stream,
                        data: o.data,
                    })
                    .await
                    .is_err()
                {
                    // The client went away; the command goes on.
                    sink = None;
                }
            }
            Some(Ok(rt::CommandEvent {
                event: Some(Event::Result(r)),
            })) => return result(id, r),
            Some(Ok(rt::CommandEvent { event: None })) => {}
            Some(Err(s)) => return failed(id, started, format!("runtime server: {}", s.message())),
            None => {
                return failed(
                    id,
                    started,
                    "the runtime server ended the command without a result".into(),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_servers_result_becomes_the_operations() {
        let r = result(
            "op-1",
            rt::CommandResult {
                state: rt::CommandState::Failed as i32,
                exit_code: Some(3),
                error: String::new(),
                stdout: b"out\n".to_vec(),
                stderr: vec![0xff],
                stdout_truncated: true,
                stderr_truncated: false,
                duration_ms: 7,
            },
        );
        assert_eq!((r.state, r.exit_code), (OpState::Failed, Some(3)));
        assert_eq!(
            (r.stdout.as_str(), r.stderr.as_str()),
            ("out\n", "\u{fffd}")
        );
        assert!(r.stdout_truncated && r.error.is_none());
        let timed_out = result(
            "op-2",
            rt::CommandResult {
                state: rt::CommandState::TimedOut as i32,
                error: "x".into(),
                ..Default::default()
            },
        );
        assert_eq!(timed_out.state, OpState::TimedOut);
        assert_eq!(timed_out.error.as_deref(), Some("x"));
    }
}
