//! The operator's `OwnershipTable.Watch` server: mTLS, and only the client
//! identities named in `--watch-clients` (the gateways') may read the
//! cluster-wide table.

use kruntimes_certs::TlsFiles;
use kruntimes_process::listen::{self, Limits, Listener};
use kruntimes_proto::ownership::v1::ownership_table_server::OwnershipTableServer;
use kruntimes_proto::watch::Publisher;
use tonic::transport::{Certificate, Identity, Server, ServerTlsConfig};

use crate::error::read;

/// Serves `publisher` on `listener` until `stop` turns true.
pub(super) fn serve(
    publisher: Publisher,
    tls: &TlsFiles,
    clients: Vec<String>,
    listener: tokio::net::TcpListener,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> crate::Result<tokio::task::JoinHandle<()>> {
    let tls = ServerTlsConfig::new()
        .identity(Identity::from_pem(read(&tls.cert)?, read(&tls.key)?))
        .client_ca_root(Certificate::from_pem(read(&tls.ca)?))
        .timeout(Limits::default().handshake);
    let server =
        Server::builder()
            .tls_config(tls)?
            .add_service(OwnershipTableServer::with_interceptor(
                publisher,
                peer_allowed(clients),
            ));
    // Bounded connections; accept errors never end the server.
    let incoming = listen::incoming(Listener::new(listener, "watch", Limits::default()));
    Ok(tokio::spawn(async move {
        let stop = async move {
            let _ = stop.wait_for(|s| *s).await;
        };
        if let Err(e) = server.serve_with_incoming_shutdown(incoming, stop).await {
            tracing::error!(error = %e, "ownership watch server failed");
        }
    }))
}

/// Admits watch clients whose certificate CN is in `allowed`: any other
/// holder of an internal certificate (a Runtime Pod's, say) may not read the
/// cluster-wide table.
fn peer_allowed(
    allowed: Vec<String>,
) -> impl FnMut(tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> + Clone {
    move |req: tonic::Request<()>| {
        let cn = req.peer_certs().and_then(|certs| {
            certs
                .first()
                .and_then(|c| kruntimes_certs::peer_common_name(c.as_ref()))
        });
        admit(&allowed, cn.as_deref())?;
        Ok(req)
    }
}

/// The decision of [`peer_allowed`] for a peer CN.
fn admit(allowed: &[String], cn: Option<&str>) -> Result<(), tonic::Status> {
    match cn {
        Some(cn) if allowed.iter().any(|a| a == cn) => Ok(()),
        Some(cn) => Err(tonic::Status::permission_denied(format!(
            "client {cn} may not watch the ownership table"
        ))),
        None => Err(tonic::Status::unauthenticated(
            "client certificate required",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_named_client_identities_may_watch() {
        let allowed = vec!["kruntimes-gateway".to_owned()];
        assert!(admit(&allowed, Some("kruntimes-gateway")).is_ok());
        assert_eq!(
            admit(&allowed, Some("kruntimes-runtimed"))
                .unwrap_err()
                .code(),
            tonic::Code::PermissionDenied
        );
        assert_eq!(
            admit(&allowed, None).unwrap_err().code(),
            tonic::Code::Unauthenticated
        );
    }
}
