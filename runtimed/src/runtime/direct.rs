//! The direct invoke path, runtimed's end (`DirectInvokeResponse` in
//! `runtime.proto`): `InvokeFunction` as one framed request and one framed
//! answer on a Unix socket, without gRPC's HTTP/2. Connections are kept
//! and reused, one call at a time each; a call that fails in any way —
//! the deadline plus slack passed, the server closed, a malformed answer —
//! takes its connection with it (closing it cancels the call in the
//! server), so a kept connection is always between calls. A socket that
//! cannot be connected to has been sent nothing: the caller may go over
//! gRPC instead ([`crate::function`] does).

use std::path::{Path, PathBuf};
use std::time::Duration;

use kruntimes_proto::runtime::MAX_MESSAGE_BYTES;
use kruntimes_proto::runtime::lease::{recv_bounded, send};
use kruntimes_proto::runtime::v1 as pb;
use tokio::net::UnixStream;

/// Connections kept between calls. Calls in flight are bounded elsewhere
/// (one per registration); beyond this, a finished call's connection is
/// closed.
const MAX_IDLE: usize = 8;

/// The direct invoke socket of one server instance and the connections
/// kept to it.
#[derive(Debug)]
pub struct Direct {
    socket: PathBuf,
    idle: std::sync::Mutex<Vec<UnixStream>>,
}

impl Direct {
    /// The path at `socket`, no connection opened yet.
    pub fn new(socket: PathBuf) -> Self {
        Self {
            socket,
            idle: std::sync::Mutex::new(Vec::new()),
        }
    }

    /// The socket's path.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Connections kept between calls now.
    pub fn idle(&self) -> usize {
        self.idle.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    fn take(&self) -> Option<UnixStream> {
        self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop()
    }

    fn keep(&self, conn: UnixStream) {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        if idle.len() < MAX_IDLE {
            idle.push(conn);
        }
    }

    /// A connection kept between calls, or a new one. Nothing has been
    /// sent when this fails, so the call may still go another way.
    pub async fn connect(&self) -> std::io::Result<UnixStream> {
        match self.take() {
            Some(conn) => Ok(conn),
            None => UnixStream::connect(&self.socket).await,
        }
    }

    /// One `InvokeFunction` call on a new or kept connection (see
    /// [`Self::call`]); a socket that cannot be reached is `UNAVAILABLE`.
    /// runtimed itself connects first ([`Self::connect`]) so that it can go
    /// over gRPC instead.
    #[cfg(test)]
    pub async fn invoke(
        &self,
        req: &pb::InvokeFunctionRequest,
        wait: Duration,
    ) -> Result<pb::InvokeFunctionResponse, tonic::Status> {
        match self.connect().await {
            Ok(conn) => self.call(conn, req, wait).await,
            Err(e) => Err(unavailable(&e)),
        }
    }

    /// One `InvokeFunction` call on `conn` (from [`Self::connect`]),
    /// answered within `wait` (past it the connection is closed, which
    /// cancels the call, and the answer is `DEADLINE_EXCEEDED`). Failures
    /// of the socket itself are `UNAVAILABLE`, as on the gRPC channel.
    pub async fn call(
        &self,
        conn: UnixStream,
        req: &pb::InvokeFunctionRequest,
        wait: Duration,
    ) -> Result<pb::InvokeFunctionResponse, tonic::Status> {
        let call = async {
            send(&conn, req, &[]).await?;
            let answer = recv_bounded::<pb::DirectInvokeResponse>(&conn, MAX_MESSAGE_BYTES).await?;
            Ok::<_, std::io::Error>(answer)
        };
        let answer = match tokio::time::timeout(wait, call).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(e)) => return Err(unavailable(&e)),
            Err(_) => {
                return Err(tonic::Status::deadline_exceeded(
                    "the runtime server did not answer in time",
                ));
            }
        };
        // A well-formed answer leaves the connection between calls.
        if answer.code != 0 || answer.response.is_some() {
            self.keep(conn);
        }
        answer_of(answer)
    }
}

fn unavailable(e: &std::io::Error) -> tonic::Status {
    tonic::Status::unavailable(format!("runtime server invoke socket: {e}"))
}

/// A wire answer as the gRPC call would have ended. An answer that is
/// neither a response nor a failure is `UNKNOWN`.
fn answer_of(a: pb::DirectInvokeResponse) -> Result<pb::InvokeFunctionResponse, tonic::Status> {
    match (a.code, a.response) {
        (0, Some(response)) => Ok(response),
        (0, None) => Err(tonic::Status::unknown(
            "the runtime server answered with neither a response nor a status",
        )),
        (code, _) => Err(tonic::Status::new(code.into(), a.message)),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use tokio::net::UnixListener;

    use super::*;

    fn output(bytes: &[u8]) -> pb::InvokeFunctionResponse {
        pb::InvokeFunctionResponse {
            outcome: Some(pb::invoke_function_response::Outcome::Output(
                bytes.to_vec(),
            )),
        }
    }

    fn request(input: &str) -> pb::InvokeFunctionRequest {
        pb::InvokeFunctionRequest {
            input: input.as_bytes().to_vec(),
            ..Default::default()
        }
    }

    #[test]
    fn a_wire_answer_ends_as_the_grpc_call_would() {
        let ok = pb::DirectInvokeResponse {
            response: Some(output(b"{}")),
            ..Default::default()
        };
        assert_eq!(answer_of(ok).unwrap(), output(b"{}"));
        let failed = answer_of(pb::DirectInvokeResponse {
            response: None,
            code: tonic::Code::NotFound as i32,
            message: "no such handle".into(),
        })
        .unwrap_err();
        assert_eq!(
            (failed.code(), failed.message()),
            (tonic::Code::NotFound, "no such handle")
        );
        let empty = answer_of(pb::DirectInvokeResponse::default()).unwrap_err();
        assert_eq!(empty.code(), tonic::Code::Unknown);
    }

    /// What the test server saw.
    #[derive(Default)]
    struct Seen {
        /// Connections accepted.
        accepted: AtomicUsize,
        /// Unanswered calls whose caller hung up.
        hung_up: AtomicUsize,
    }

    /// A server answering each request by `answer` (its input decides).
    fn server(
        dir: &Path,
        answer: fn(&str) -> Option<pb::DirectInvokeResponse>,
    ) -> (PathBuf, Arc<Seen>) {
        let path = dir.join("runtime.sock.invoke");
        let listener = UnixListener::bind(&path).unwrap();
        let seen = Arc::new(Seen::default());
        let counts = seen.clone();
        tokio::spawn(async move {
            while let Ok((conn, _)) = listener.accept().await {
                counts.accepted.fetch_add(1, Ordering::SeqCst);
                let counts = counts.clone();
                tokio::spawn(async move {
                    while let Ok(req) =
                        recv_bounded::<pb::InvokeFunctionRequest>(&conn, 1 << 20).await
                    {
                        let input = String::from_utf8(req.input).unwrap();
                        match answer(&input) {
                            Some(a) => send(&conn, &a, &[]).await.unwrap(),
                            // Hang up without answering.
                            None if input == "close" => return,
                            // Never answer; note when the caller goes.
                            None => {
                                let mut b = [0u8; 1];
                                loop {
                                    conn.readable().await.unwrap();
                                    match conn.try_read(&mut b) {
                                        Ok(0) => break,
                                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                                        other => panic!("{other:?} instead of a hang-up"),
                                    }
                                }
                                counts.hung_up.fetch_add(1, Ordering::SeqCst);
                                return;
                            }
                        }
                    }
                });
            }
        });
        (path, seen)
    }

    fn echo(input: &str) -> Option<pb::DirectInvokeResponse> {
        match input {
            "close" | "hang" => None,
            "missing" => Some(pb::DirectInvokeResponse {
                code: tonic::Code::NotFound as i32,
                message: "no such handle".into(),
                ..Default::default()
            }),
            "nothing" => Some(pb::DirectInvokeResponse::default()),
            other => Some(pb::DirectInvokeResponse {
                response: Some(output(other.as_bytes())),
                ..Default::default()
            }),
        }
    }

    const WAIT: Duration = Duration::from_secs(10);

    #[tokio::test]
    async fn calls_take_turns_on_a_kept_connection_and_failures_pass_through() {
        let dir = tempfile::tempdir().unwrap();
        let (path, seen) = server(dir.path(), echo);
        let direct = Direct::new(path);
        for input in ["1", "2", "3"] {
            let out = direct.invoke(&request(input), WAIT).await.unwrap();
            assert_eq!(out, output(input.as_bytes()));
        }
        let missing = direct.invoke(&request("missing"), WAIT).await.unwrap_err();
        assert_eq!(
            (missing.code(), missing.message()),
            (tonic::Code::NotFound, "no such handle")
        );
        assert_eq!(
            (seen.accepted.load(Ordering::SeqCst), direct.idle()),
            (1, 1)
        );
    }

    #[tokio::test]
    async fn concurrent_calls_open_connections_and_keep_a_bounded_number() {
        let dir = tempfile::tempdir().unwrap();
        let (path, seen) = server(dir.path(), echo);
        let direct = Arc::new(Direct::new(path));
        let calls: Vec<_> = (0..MAX_IDLE + 4)
            .map(|i| {
                let direct = direct.clone();
                tokio::spawn(async move { direct.invoke(&request(&i.to_string()), WAIT).await })
            })
            .collect();
        for (i, call) in calls.into_iter().enumerate() {
            let out = call.await.unwrap().unwrap();
            assert_eq!(out, output(i.to_string().as_bytes()));
        }
        assert!(seen.accepted.load(Ordering::SeqCst) <= MAX_IDLE + 4);
        assert!(direct.idle() <= MAX_IDLE);
    }

    #[tokio::test]
    async fn a_broken_call_takes_its_connection_with_it() {
        let dir = tempfile::tempdir().unwrap();
        let (path, seen) = server(dir.path(), echo);
        let direct = Direct::new(path);
        let closed = direct.invoke(&request("close"), WAIT).await.unwrap_err();
        assert_eq!(closed.code(), tonic::Code::Unavailable, "{closed:?}");
        assert_eq!(direct.idle(), 0);
        let malformed = direct.invoke(&request("nothing"), WAIT).await.unwrap_err();
        assert_eq!(malformed.code(), tonic::Code::Unknown, "{malformed:?}");
        assert_eq!(direct.idle(), 0);
        direct.invoke(&request("again"), WAIT).await.unwrap();
        assert_eq!(
            (seen.accepted.load(Ordering::SeqCst), direct.idle()),
            (3, 1)
        );
    }

    #[tokio::test]
    async fn an_unanswered_call_ends_at_its_wait_and_hangs_up() {
        let dir = tempfile::tempdir().unwrap();
        let (path, seen) = server(dir.path(), echo);
        let direct = Direct::new(path);
        let late = direct
            .invoke(&request("hang"), Duration::from_millis(100))
            .await
            .unwrap_err();
        assert_eq!(late.code(), tonic::Code::DeadlineExceeded);
        assert_eq!(direct.idle(), 0);
        // The server learns its caller is gone (and would cancel the call).
        let deadline = tokio::time::Instant::now() + WAIT;
        while seen.hung_up.load(Ordering::SeqCst) == 0 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the server never saw the hang-up"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    #[tokio::test]
    async fn no_server_is_unavailable() {
        let dir = tempfile::tempdir().unwrap();
        let direct = Direct::new(dir.path().join("absent.invoke"));
        let refused = direct.invoke(&request("1"), WAIT).await.unwrap_err();
        assert_eq!(refused.code(), tonic::Code::Unavailable);
        assert!(crate::runtime::unreachable(&refused));
    }
}
