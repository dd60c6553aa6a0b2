//! The direct invoke path, runtimed's end (`runtime.proto`):
//! `InvokeFunction` as one framed request and one framed answer on a Unix
//! socket, without gRPC's HTTP/2. Connections are kept
//! and reused, one call at a time each; a call that fails in any way —
//! the deadline plus slack passed, the server closed, a malformed answer —
//! takes its connection with it (closing it cancels the call in the
//! server), so a kept connection is always between calls. A socket that
//! cannot be connected to has been sent nothing: the caller may go over
//! gRPC instead ([`crate::function`] does).

use std::path::{Path, PathBuf};
use std::time::Duration;

use kruntimes_proto::runtime::lease::{recv_bounded, send};
use kruntimes_proto::runtime::v1 as pb;
use kruntimes_proto::runtime::{
    InvokeError, InvokeOutcome, MAX_MESSAGE_BYTES, ServerError, invoke,
};
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
    #[cfg(test)]
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
    /// [`Self::call`]); a socket that cannot be reached is unavailable.
    /// runtimed itself connects first ([`Self::connect`]) so that it can go
    /// over gRPC instead.
    #[cfg(test)]
    pub async fn invoke(
        &self,
        req: &pb::InvokeFunctionRequest,
        wait: Duration,
    ) -> Result<InvokeOutcome, ServerError> {
        match self.connect().await {
            Ok(conn) => self.call(conn, req, wait).await.map(|(o, _)| o),
            Err(e) => Err(unavailable(&e)),
        }
    }

    /// One `InvokeFunction` call on `conn` (from [`Self::connect`]): the
    /// outcome the server answered with and its `artifacts_left`, within
    /// `wait` (past it the connection is closed, which cancels the call, and
    /// the outcome is a timeout). A socket that fails is unavailable, as the
    /// gRPC channel would be.
    pub async fn call(
        &self,
        conn: UnixStream,
        req: &pb::InvokeFunctionRequest,
        wait: Duration,
    ) -> Result<(InvokeOutcome, bool), ServerError> {
        let call = async {
            send(&conn, req, &[]).await?;
            recv_bounded::<pb::InvokeFunctionResponse>(&conn, MAX_MESSAGE_BYTES).await
        };
        let answer = match tokio::time::timeout(wait, call).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(e)) => return Err(unavailable(&e)),
            Err(_) => {
                return Ok((
                    Err(InvokeError::Timeout(
                        "the runtime server did not answer in time".into(),
                    )),
                    false,
                ));
            }
        };
        // A well-formed answer leaves the connection between calls.
        if answer.outcome.is_some() {
            self.keep(conn);
        }
        let left = answer.artifacts_left;
        Ok((invoke::decode(answer), left))
    }
}

fn unavailable(e: &std::io::Error) -> ServerError {
    ServerError::unavailable(format!("runtime server invoke socket: {e}"))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use kruntimes_proto::runtime::ErrorKind;
    use tokio::net::UnixListener;

    use super::*;

    fn output(bytes: &[u8]) -> pb::InvokeFunctionResponse {
        invoke::encode(Ok(bytes.to_vec()))
    }

    fn request(input: &str) -> pb::InvokeFunctionRequest {
        pb::InvokeFunctionRequest {
            input: input.as_bytes().to_vec(),
            ..Default::default()
        }
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
        answer: fn(&str) -> Option<pb::InvokeFunctionResponse>,
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

    fn echo(input: &str) -> Option<pb::InvokeFunctionResponse> {
        match input {
            "close" | "hang" => None,
            "missing" => Some(invoke::encode(Err(InvokeError::NotRegistered(
                "no such handle".into(),
            )))),
            "nothing" => Some(pb::InvokeFunctionResponse::default()),
            other => Some(output(other.as_bytes())),
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
            assert_eq!(out, Ok(input.as_bytes().to_vec()));
        }
        let missing = direct.invoke(&request("missing"), WAIT).await.unwrap();
        assert_eq!(
            missing,
            Err(InvokeError::NotRegistered("no such handle".into()))
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
            assert_eq!(out, Ok(i.to_string().into_bytes()));
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
        assert_eq!(closed.kind, ErrorKind::Unavailable, "{closed:?}");
        assert_eq!(direct.idle(), 0);
        let malformed = direct.invoke(&request("nothing"), WAIT).await.unwrap();
        assert!(
            matches!(malformed, Err(InvokeError::Crashed(_))),
            "{malformed:?}"
        );
        assert_eq!(direct.idle(), 0);
        assert!(
            direct
                .invoke(&request("again"), WAIT)
                .await
                .unwrap()
                .is_ok()
        );
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
            .unwrap();
        assert!(matches!(late, Err(InvokeError::Timeout(_))), "{late:?}");
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
        assert_eq!(refused.kind, ErrorKind::Unavailable);
    }
}
