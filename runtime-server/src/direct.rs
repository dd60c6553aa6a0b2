//! The direct invoke path (`runtime.proto`): on a Unix socket beside the
//! gRPC one, `InvokeFunction` without HTTP/2. Each connection carries one
//! call at a time — a framed `InvokeFunctionRequest`, the framed
//! `InvokeFunctionResponse` — for as long as runtimed keeps it. The call is
//! the gRPC one ([`crate::service::invoke_function`]), so the answers cannot
//! drift apart; a connection closed while its call runs cancels the call,
//! as a cancelled gRPC call does (dropping it kills the process tree).

use std::sync::Arc;

use kruntimes_proto::runtime::MAX_MESSAGE_BYTES;
use kruntimes_proto::runtime::lease::{recv_bounded, send};
use kruntimes_proto::runtime::v1 as pb;
use tokio::net::{UnixListener, UnixStream};

use crate::function::Functions;

/// The direct invoke socket's file name beside a gRPC socket named `name`.
pub fn socket_name(name: &str) -> String {
    format!("{name}.invoke")
}

/// Serves connections until `shutdown` resolves.
pub async fn serve(
    listener: UnixListener,
    functions: Arc<Functions>,
    shutdown: impl std::future::Future<Output = ()>,
) {
    crate::accept::each(listener, "invoke", shutdown, |conn| {
        connection(conn, functions.clone())
    })
    .await;
}

/// Resolves when the peer closes the connection (or breaks the protocol by
/// sending while its call runs): either way its call is abandoned.
async fn abandoned(conn: &UnixStream) {
    let mut byte = [0u8; 1];
    loop {
        if conn.readable().await.is_err() {
            return;
        }
        match conn.try_read(&mut byte) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            _ => return,
        }
    }
}

/// One connection, call after call, until the peer closes it.
async fn connection(conn: UnixStream, functions: Arc<Functions>) {
    loop {
        let req = match recv_bounded::<pb::InvokeFunctionRequest>(&conn, MAX_MESSAGE_BYTES).await {
            Ok(req) => req,
            Err(e) => {
                if e.kind() != std::io::ErrorKind::UnexpectedEof {
                    tracing::warn!(error = %e, "invoke socket: malformed request; connection closed");
                }
                return;
            }
        };
        let answer = tokio::select! {
            a = crate::service::invoke_function(&functions, req) => a,
            () = abandoned(&conn) => return,
        };
        if send(&conn, &answer, &[]).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_closed_or_talking_peer_abandons_its_call() {
        let (a, b) = UnixStream::pair().unwrap();
        drop(a);
        abandoned(&b).await;
        let (a, b) = UnixStream::pair().unwrap();
        a.try_write(b"x").unwrap();
        abandoned(&b).await;
        let (_a, b) = UnixStream::pair().unwrap();
        let waiting = tokio::time::timeout(std::time::Duration::from_millis(50), abandoned(&b));
        assert!(waiting.await.is_err(), "a quiet peer is still there");
    }
}
