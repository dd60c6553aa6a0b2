//! The accept loop of the sockets beside the gRPC one ([`crate::lease`],
//! [`crate::direct`]): each connection served by a task of its own.

use std::future::Future;

use tokio::net::{UnixListener, UnixStream};

/// Hands every connection of `listener` to a task running `each` until
/// `shutdown` resolves; `what` names the socket in logs.
pub async fn each<F, Fut>(
    listener: UnixListener,
    what: &'static str,
    shutdown: impl Future<Output = ()>,
    each: F,
) where
    F: Fn(UnixStream) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    tokio::pin!(shutdown);
    loop {
        let conn = tokio::select! {
            c = listener.accept() => c,
            _ = &mut shutdown => return,
        };
        match conn {
            Ok((conn, _)) => {
                tokio::spawn(each(conn));
            }
            Err(e) => tracing::warn!(error = %e, socket = what, "accept failed"),
        }
    }
}
