//! The background-process routes of a session (`…/processes…`): starting
//! one goes through the session's queue like any mutation (the
//! [`super::ops::Operation::StartProcess`] the worker runs); listing,
//! connecting, input, signals and resizing bypass it and go straight to
//! the Runtime Server, which holds the processes.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use kruntimes_proto::api::{ErrorCode, SessionOp};
use kruntimes_proto::runtime::v1 as rt;
use kruntimes_proto::runtime::{ErrorKind, ServerError};
use serde::Deserialize;
use serde_json::{Value, json};

use super::HostedSession;
use super::ops::{self, ProcessRequest};
use crate::api_error::{ApiError, read_body};

/// Largest start body (a 1 MiB shell script plus JSON).
const MAX_START_BODY: usize = 2 * 1024 * 1024;
/// Most bytes one `:input` call writes.
pub const MAX_INPUT_BYTES: usize = 1024 * 1024;
/// Largest `:input` body: 1 MiB in base64, plus JSON.
const MAX_INPUT_BODY: usize = MAX_INPUT_BYTES / 3 * 4 + 1024;
/// Largest `:signal` / `:resize` body.
const MAX_SMALL_BODY: usize = 1024;

/// A refusal of the Runtime Server's about a process, as the API answers
/// it.
pub fn api_error(e: ServerError) -> ApiError {
    let code = match e.kind {
        ErrorKind::Invalid => ErrorCode::BadRequest,
        ErrorKind::NotFound => ErrorCode::NotFound,
        ErrorKind::Refused => ErrorCode::Conflict,
        ErrorKind::Exhausted => ErrorCode::Busy,
        ErrorKind::TooLarge => ErrorCode::PayloadTooLarge,
        ErrorKind::Unavailable => ErrorCode::NotReady,
        ErrorKind::Internal => ErrorCode::Internal,
    };
    let message = match code {
        ErrorCode::NotReady => format!("the runtime server is unavailable: {}", e.message),
        _ => e.message,
    };
    ApiError::new(code, message)
}

pub use kruntimes_proto::runtime::signal_number;

fn json_response(status: StatusCode, v: &Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        v.to_string(),
    )
        .into_response()
}

fn invalid_json(e: serde_json::Error) -> ApiError {
    ApiError::new(ErrorCode::InvalidJson, e.to_string())
}

async fn read_json<T: for<'de> Deserialize<'de>>(
    body: Body,
    limit: usize,
    what: &'static str,
) -> Result<T, ApiError> {
    let bytes = read_body(body, limit, what).await?;
    serde_json::from_slice(&bytes).map_err(invalid_json)
}

fn rfc3339(ms: u64) -> Value {
    if ms == 0 {
        return Value::Null;
    }
    let t = time::OffsetDateTime::UNIX_EPOCH + time::Duration::milliseconds(ms as i64);
    t.format(&time::format_description::well_known::Rfc3339)
        .map_or(Value::Null, Value::String)
}

/// A process as the API shows it.
fn info(p: &rt::ProcessInfo) -> Value {
    let command: Value = serde_json::from_str(&p.display).unwrap_or(Value::Null);
    json!({
        "pid": p.pid,
        "command": command,
        "cwd": p.cwd,
        "pty": p.pty,
        "running": p.running,
        "exitCode": p.exit_code,
        "startedAt": rfc3339(p.started_at_ms),
        "endedAt": rfc3339(p.ended_at_ms),
    })
}

/// A `:connect` event as one NDJSON line.
fn event_line(e: rt::process_event::Event) -> Value {
    use rt::process_event::Event;
    match e {
        Event::Output(o) => {
            let stream = match rt::ProcessStream::try_from(o.stream) {
                Ok(rt::ProcessStream::Stderr) => "stderr",
                Ok(rt::ProcessStream::Pty) => "pty",
                _ => "stdout",
            };
            json!({
                "type": "output",
                "stream": stream,
                "dataBase64": base64::engine::general_purpose::STANDARD.encode(&o.data),
                "offset": o.offset,
            })
        }
        Event::Lost(l) => json!({"type": "lost", "bytes": l.bytes}),
        Event::Exited(x) => json!({"type": "exited", "exitCode": x.exit_code}),
    }
}

/// Serves one process route of an admitted, fenced request.
pub async fn handle(
    h: &Arc<HostedSession>,
    op: SessionOp,
    method: &Method,
    body: Body,
    invocation_id: &str,
) -> Result<Response, ApiError> {
    h.session.touch();
    let mut client = h.session.runtime();
    let run_uid = h.run.uid.clone();
    let no_content = || StatusCode::NO_CONTENT.into_response();
    match op {
        SessionOp::Processes if method == Method::POST => {
            let req: ProcessRequest = read_json(body, MAX_START_BODY, "process").await?;
            let op =
                ops::validate_process(req).map_err(|e| ApiError::new(ErrorCode::BadRequest, e))?;
            super::http::check_paths(&op)?;
            let (_, done) = h.session.submit(op, None)?;
            let result = done
                .await
                .map_err(|_| ApiError::new(ErrorCode::Internal, "operation was dropped"))?;
            match (result.pid, result.refusal) {
                (Some(pid), _) => Ok(json_response(StatusCode::CREATED, &json!({"pid": pid}))),
                (None, Some(refusal)) => Err(refusal),
                (None, None) => Err(ApiError::new(
                    ErrorCode::Conflict,
                    result
                        .error
                        .unwrap_or_else(|| format!("not started ({:?})", result.state)),
                )),
            }
        }
        SessionOp::Processes | SessionOp::Process(_) => {
            let pid = match op {
                SessionOp::Process(pid) => pid,
                _ => 0,
            };
            let req = rt::ListProcessesRequest { run_uid, pid };
            let list = client
                .sessions
                .list_processes(req)
                .await
                .map_err(|s| api_error(s.into()))?
                .into_inner();
            let body = match op {
                SessionOp::Process(_) => list.processes.first().map(info).unwrap_or(Value::Null),
                _ => json!({"processes": list.processes.iter().map(info).collect::<Vec<_>>()}),
            };
            Ok(json_response(StatusCode::OK, &body))
        }
        SessionOp::ConnectProcess(pid) => {
            let req = rt::ConnectProcessRequest { run_uid, pid };
            let events = client
                .sessions
                .connect_process(req)
                .await
                .map_err(|s| api_error(s.into()))?
                .into_inner();
            Ok(super::ndjson::stream(
                events,
                |e: rt::ProcessEvent| {
                    let e = e.event?;
                    let last = matches!(e, rt::process_event::Event::Exited(_));
                    Some((event_line(e), last))
                },
                Some("the process's output ended before its exit"),
                invocation_id.to_owned(),
            ))
        }
        SessionOp::ProcessInput(pid) => {
            #[derive(Deserialize)]
            #[serde(rename_all = "camelCase", deny_unknown_fields)]
            struct Input {
                data_base64: String,
            }
            let input: Input = read_json(body, MAX_INPUT_BODY, "input").await?;
            let data = base64::engine::general_purpose::STANDARD
                .decode(input.data_base64.as_bytes())
                .map_err(|e| ApiError::new(ErrorCode::BadRequest, format!("dataBase64: {e}")))?;
            if data.len() > MAX_INPUT_BYTES {
                return Err(ApiError::new(
                    ErrorCode::PayloadTooLarge,
                    "input over 1 MiB: send it in parts",
                ));
            }
            let req = rt::ProcessInputRequest {
                run_uid,
                pid,
                data,
                close: false,
            };
            client
                .sessions
                .process_input(req)
                .await
                .map_err(|s| api_error(s.into()))?;
            Ok(no_content())
        }
        SessionOp::CloseStdin(pid) => {
            let _ = read_body(body, MAX_SMALL_BODY, "closeStdin").await?;
            let req = rt::ProcessInputRequest {
                run_uid,
                pid,
                data: Vec::new(),
                close: true,
            };
            // Closing what is closed succeeds (the server's rule).
            client
                .sessions
                .process_input(req)
                .await
                .map_err(|s| api_error(s.into()))?;
            Ok(no_content())
        }
        SessionOp::SignalProcess(pid) => {
            #[derive(Deserialize)]
            #[serde(deny_unknown_fields)]
            struct Sig {
                signal: String,
            }
            let sig: Sig = read_json(body, MAX_SMALL_BODY, "signal").await?;
            let signal = signal_number(&sig.signal).ok_or_else(|| {
                let names: Vec<&str> = kruntimes_proto::runtime::PROCESS_SIGNALS
                    .iter()
                    .map(|(name, _)| *name)
                    .collect();
                ApiError::new(
                    ErrorCode::BadRequest,
                    format!("signal {:?}: one of {}", sig.signal, names.join(", ")),
                )
            })?;
            let req = rt::SignalProcessRequest {
                run_uid,
                pid,
                signal,
            };
            client
                .sessions
                .signal_process(req)
                .await
                .map_err(|s| api_error(s.into()))?;
            Ok(no_content())
        }
        SessionOp::ResizeProcess(pid) => {
            let size: ops::PtySize = read_json(body, MAX_SMALL_BODY, "resize").await?;
            let size = size
                .check()
                .map_err(|e| ApiError::new(ErrorCode::BadRequest, e))?;
            let req = rt::ResizeProcessRequest {
                run_uid,
                pid,
                size: Some(rt::PtySize {
                    rows: size.rows,
                    cols: size.cols,
                }),
            };
            client
                .sessions
                .resize_process(req)
                .await
                .map_err(|s| api_error(s.into()))?;
            Ok(no_content())
        }
        _ => Err(ApiError::new(ErrorCode::Internal, "not a process route")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_refusals_map_onto_the_public_codes() {
        let cases = [
            (ErrorKind::NotFound, ErrorCode::NotFound),
            (ErrorKind::Refused, ErrorCode::Conflict),
            (ErrorKind::Exhausted, ErrorCode::Busy),
            (ErrorKind::Invalid, ErrorCode::BadRequest),
            (ErrorKind::Unavailable, ErrorCode::NotReady),
            (ErrorKind::Internal, ErrorCode::Internal),
        ];
        for (kind, code) in cases {
            assert_eq!(api_error(ServerError::new(kind, "why")).code, code);
        }
    }

    #[test]
    fn events_are_lines_of_the_documented_shape() {
        use rt::process_event::Event;
        let out = event_line(Event::Output(rt::ProcessOutput {
            stream: rt::ProcessStream::Pty as i32,
            data: b"\x1b[1mhi".to_vec(),
            offset: 6,
        }));
        assert_eq!(
            out,
            json!({"type": "output", "stream": "pty", "dataBase64": "G1sxbWhp", "offset": 6})
        );
        let lost = event_line(Event::Lost(rt::ProcessLost { bytes: 9 }));
        assert_eq!(lost, json!({"type": "lost", "bytes": 9}));
        let exited = event_line(Event::Exited(rt::ProcessExited {
            exit_code: Some(137),
            signal: None,
        }));
        assert_eq!(exited, json!({"type": "exited", "exitCode": 137}));
    }

    #[test]
    fn a_process_shows_its_command_and_times() {
        let p = rt::ProcessInfo {
            pid: 7,
            display: r#"{"shell":"sleep 1"}"#.into(),
            cwd: "work".into(),
            pty: false,
            running: false,
            exit_code: Some(0),
            started_at_ms: 1_700_000_000_000,
            ended_at_ms: 1_700_000_001_500,
            signal: None,
        };
        let v = info(&p);
        assert_eq!(v["command"], json!({"shell": "sleep 1"}));
        assert_eq!(v["startedAt"], "2023-11-14T22:13:20Z");
        assert_eq!(v["endedAt"], "2023-11-14T22:13:21.5Z");
        assert_eq!(v["exitCode"], 0);
        let running = info(&rt::ProcessInfo {
            running: true,
            exit_code: None,
            ended_at_ms: 0,
            ..p
        });
        assert_eq!(
            (running["exitCode"].clone(), running["endedAt"].clone()),
            (Value::Null, Value::Null)
        );
    }
}
