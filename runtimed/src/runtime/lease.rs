//! The worker fast path, runtimed's end: a lease of a Python function's
//! worker pipes from the Runtime Server (handed over with SCM_RIGHTS), so
//! an invocation is one frame out and one frame back on the worker's own
//! pipes — no hop through the server. The server still owns the process:
//! closing the lease (dropping it) kills the worker's tree.

use std::path::Path;

use kruntimes_proto::runtime::InvokeError;
use kruntimes_proto::runtime::lease::{recv, send};
use kruntimes_proto::runtime::v1 as pb;
use kruntimes_proto::runtime::worker::{self, Answer, ExchangeError};
use tokio::net::UnixStream;
use tokio::net::unix::pipe;

/// How long a released lease waits to learn how the worker ended.
const RELEASE_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// Why no lease was had.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// The server refused, for the reason an invocation through it would
    /// have failed with.
    #[error(transparent)]
    Refused(InvokeError),
    /// The socket or the handover failed.
    #[error("worker lease: {0}")]
    Io(#[from] std::io::Error),
}

/// A leased worker.
#[derive(Debug)]
pub struct Lease {
    conn: UnixStream,
    stdin: pipe::Sender,
    stdout: pipe::Receiver,
    seq: u64,
}

impl Lease {
    /// Leases the worker of registration `handle` of `run_uid` from the
    /// server's worker socket at `socket`.
    pub async fn acquire(socket: &Path, run_uid: &str, handle: &str) -> Result<Self, LeaseError> {
        let conn = UnixStream::connect(socket).await?;
        let req = pb::WorkerLeaseRequest {
            run_uid: run_uid.to_owned(),
            handle: handle.to_owned(),
        };
        send(&conn, &req, &[]).await?;
        let (answer, fds) = recv::<pb::WorkerLease>(&conn).await?;
        if let Some(refusal) = answer.refusal {
            return Err(LeaseError::Refused(InvokeError::from_failure(refusal)));
        }
        let [stdin, stdout]: [std::os::fd::OwnedFd; 2] = fds
            .try_into()
            .map_err(|_| std::io::Error::other("the lease carried no worker pipes"))?;
        Ok(Self {
            conn,
            stdin: pipe::Sender::from_owned_fd(stdin)?,
            stdout: pipe::Receiver::from_owned_fd(stdout)?,
            seq: 0,
        })
    }

    /// One invocation on the worker's pipes. Any error leaves them in an
    /// unknown state: the lease must be given up.
    pub async fn exchange(
        &mut self,
        input: &[u8],
        max_output: usize,
    ) -> Result<Answer, ExchangeError> {
        self.seq += 1;
        worker::exchange(
            &mut self.stdin,
            &mut self.stdout,
            self.seq,
            input,
            max_output,
        )
        .await
    }

    /// Gives the worker up and learns how it ended (`exit status: 1`), as
    /// far as the server can tell within a moment; `None` when the server
    /// does not answer (it went away, and the worker with it).
    pub async fn release(self) -> Option<String> {
        let ask = async {
            send(&self.conn, &pb::WorkerRelease {}, &[]).await?;
            recv::<pb::WorkerReleased>(&self.conn).await
        };
        match tokio::time::timeout(RELEASE_WAIT, ask).await {
            Ok(Ok((r, _))) => Some(r.exit),
            _ => None,
        }
    }
}
