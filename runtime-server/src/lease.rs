//! The worker fast path (`WorkerLeaseRequest` in `runtime.proto`): on a
//! second Unix socket beside the gRPC one, runtimed leases a Python
//! function's worker pipes (sent with SCM_RIGHTS) and then talks to the
//! worker directly. The server keeps the process: when the lease
//! connection closes, or the function is unregistered, the worker's tree is
//! killed and the next lease or invocation gets a fresh worker.

use std::os::fd::BorrowedFd;
use std::sync::Arc;

use kruntimes_proto::runtime::lease::{recv, send};
use kruntimes_proto::runtime::v1 as pb;
use tokio::net::{UnixListener, UnixStream};

use crate::function::Functions;

/// The worker socket's file name beside a gRPC socket named `name`.
pub fn socket_name(name: &str) -> String {
    format!("{name}.workers")
}

/// Serves leases until `shutdown` resolves.
pub async fn serve(
    listener: UnixListener,
    functions: Arc<Functions>,
    shutdown: impl std::future::Future<Output = ()>,
) {
    crate::accept::each(listener, "worker", shutdown, |conn| {
        lease(conn, functions.clone())
    })
    .await;
}

/// One lease, from request to the connection's end.
async fn lease(conn: UnixStream, functions: Arc<Functions>) {
    let Ok((req, _)) = recv::<pb::WorkerLeaseRequest>(&conn).await else {
        return;
    };
    let leased = match functions.lease(&req.run_uid, &req.handle).await {
        Ok(l) => l,
        Err(e) => {
            // A lease is refused for a reason of the call's, never a
            // handler's answer.
            let refusal = e.failure().unwrap_or_else(|| pb::InvokeFailure {
                reason: pb::InvokeFailureReason::Crashed as i32,
                message: e.to_string(),
            });
            let refusal = pb::WorkerLease {
                refusal: Some(refusal),
            };
            let _ = send(&conn, &refusal, &[]).await;
            return;
        }
    };
    let fds: Vec<BorrowedFd<'_>> = leased.pipes().into_iter().flatten().collect();
    if send(&conn, &pb::WorkerLease::default(), &fds)
        .await
        .is_err()
    {
        return;
    }
    drop(fds);
    tracing::debug!(run_uid = %req.run_uid, "worker leased");
    let released = tokio::select! {
        msg = recv::<pb::WorkerRelease>(&conn) => msg.is_ok(),
        // Unregistered: the worker goes, and with it runtimed's pipes.
        _ = leased.stopped() => false,
    };
    if released {
        let exit = leased.end().await;
        let _ = send(&conn, &pb::WorkerReleased { exit }, &[]).await;
    }
    // Otherwise dropping the lease kills the worker's tree.
}
