//! The gateway → runtimed hop: the owner's peer (HTTP/1.1 over mTLS,
//! pooled by Pingora) and the fencing headers added to the forwarded
//! request.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use kruntimes_proto::api;
use pingora::connectors::ConnectorOptions;
use pingora::http::RequestHeader;
use pingora::prelude::HttpPeer;
use pingora::protocols::ALPN;
use pingora::utils::tls::CertKey;
use pingora::{Error, ErrorType, Result};

use crate::table::Route;

/// Upstream (gateway → runtimed) connection settings.
///
/// The internal CA and the gateway's client certificate are the upstream
/// connector's own ([`Upstream::connector_options`]), not each peer's:
/// Pingora keys its connection pool by a hash of the peer, and a peer that
/// carries a client certificate hashes it by formatting its serial number,
/// byte by byte, twice per request; it also builds a new TLS client
/// configuration for each of that peer's connections, which then never
/// resume a session. Once the certificate files are rotated, peers carry
/// the new pair themselves: new connections present it, connections pooled
/// with the old one are no longer picked.
#[derive(Clone)]
pub struct Upstream {
    /// The gateway's client certificate and key (reloaded when rotated).
    pub cert_key: Arc<ClientCert>,
    /// The pair the connector loaded at start, once the gateway knows it
    /// is the one `cert_key` loaded (unset: peers always carry theirs).
    pub connector_pair: Arc<OnceLock<Arc<CertKey>>>,
    /// TLS server name of runtimed certificates.
    pub server_name: String,
    /// Bound on connecting to an owner.
    pub connect_timeout: Duration,
    /// Invocation timeout assumed when the table has none.
    pub default_timeout: Duration,
}

impl Upstream {
    /// The upstream of `config`: its client pair loaded (and reloaded when
    /// rotated), its internal CA checked.
    pub fn from_config(config: &crate::Config) -> crate::Result<Self> {
        let internal = &config.internal;
        // Checked here for a clear error: Pingora's connector panics on a
        // CA bundle it cannot load.
        kruntimes_certs::check_ca_bundle(&internal.ca)
            .map_err(|e| crate::Error::setup("internal CA", e))?;
        let cert_key = client_cert(&internal.client_cert, &internal.client_key).map_err(|e| {
            crate::Error::setup(
                "client certificate",
                format!("load {}: {e}", internal.client_cert.display()),
            )
        })?;
        cert_key.watch(config.listen.tls_reload);
        Ok(Self {
            cert_key,
            connector_pair: Arc::default(),
            server_name: internal.runtimed_server_name.clone(),
            connect_timeout: config.connect_timeout,
            default_timeout: config.default_timeout,
        })
    }

    /// The peer of `route`'s owner; `websocket` for a session socket.
    pub fn peer(&self, route: &Route, websocket: bool) -> Result<HttpPeer> {
        let addr: SocketAddr = route.address().parse().map_err(|_| {
            Error::explain(
                ErrorType::ConnectError,
                "owner address is not a socket address",
            )
        })?;
        let mut peer = HttpPeer::new(addr, true, self.server_name.clone());
        peer.client_cert_key = self.rotated_pair();
        let o = &mut peer.options;
        // Pooled HTTP/1.1 (one request per connection at a time, kept
        // alive between them; WebSockets upgrade one): measured cheaper and
        // faster than HTTP/2 on this hop, whose HPACK state and stream
        // bookkeeping cost more than the connections it saves
        // (docs/benchmarks.md). Connections are bounded by the requests in
        // flight (`--max-in-flight`); idle ones by Pingora's pool.
        o.alpn = ALPN::H1;
        o.connection_timeout = Some(self.connect_timeout);
        o.total_connection_timeout = Some(self.connect_timeout * 2);
        // runtimed enforces the invocation deadline and answers 504 itself;
        // this is the backstop for an owner that stops answering.
        let timeout = route.timeout.unwrap_or(self.default_timeout);
        o.read_timeout = if websocket {
            // A session socket may idle between operations; runtimed's idle
            // timeout bounds it.
            None
        } else {
            Some(timeout + Duration::from_secs(5))
        };
        o.write_timeout = Some(Duration::from_secs(10));
        o.idle_timeout = Some(Duration::from_secs(90));
        Ok(peer)
    }

    /// The client certificate a peer must carry: none while the one in
    /// service is the connector's own.
    fn rotated_pair(&self) -> Option<Arc<CertKey>> {
        let current = self.cert_key.current();
        match self.connector_pair.get() {
            Some(pair) if Arc::ptr_eq(pair, &current) => None,
            _ => Some(current),
        }
    }

    /// Pingora's upstream connector options: `base` (from the server's
    /// configuration) with the internal CA runtimed certificates chain to
    /// and the gateway's client certificate, as files Pingora loads.
    pub fn connector_options(
        base: ConnectorOptions,
        ca: &Path,
        cert: &Path,
        key: &Path,
    ) -> std::result::Result<ConnectorOptions, String> {
        let path = |p: &Path| {
            p.to_str()
                .map(str::to_owned)
                .ok_or_else(|| format!("{} is not a UTF-8 path", p.display()))
        };
        let mut options = base;
        options.ca_file = Some(path(ca)?);
        options.cert_key_file = Some((path(cert)?, path(key)?));
        Ok(options)
    }

    /// Records that the connector built from [`Self::connector_options`]
    /// loaded `pair`: the one in service when the connector was built, if
    /// the files on disk are still the ones it was loaded from (a rotation
    /// in between leaves every peer carrying its pair).
    pub fn connector_loaded(&self, pair: Arc<CertKey>) {
        if self.cert_key.on_disk_is_current() && Arc::ptr_eq(&pair, &self.cert_key.current()) {
            let _ = self.connector_pair.set(pair);
        }
    }
}

/// The gateway's client certificate for the hop, re-read when its files
/// change: new connections present the rotated one, pooled ones are kept.
/// A broken pair on disk is refused and the previous one stays in use.
pub type ClientCert = kruntimes_certs::Reloading<CertKey>;

/// Loads the gateway's client certificate.
pub fn client_cert(cert: &Path, key: &Path) -> std::result::Result<Arc<ClientCert>, String> {
    ClientCert::with_loader(cert, key, load_pair)
}

/// The pair as Pingora takes it, refused unless the key is the
/// certificate's.
fn load_pair(cert: &Path, key: &Path) -> std::result::Result<CertKey, String> {
    // Read once; checked as a rustls pair (the key is the certificate's).
    let certs = kruntimes_certs::load_certs(cert).map_err(|e| e.to_string())?;
    let k = kruntimes_certs::load_key(key).map_err(|e| e.to_string())?;
    let key_der = k.secret_der().to_vec();
    rustls::sign::CertifiedKey::from_der(
        certs.clone(),
        k,
        &rustls::crypto::aws_lc_rs::default_provider(),
    )
    .map_err(|e| format!("certificate and key do not form a usable pair: {e}"))?;
    Ok(CertKey::new(
        certs.iter().map(|c| c.as_ref().to_vec()).collect(),
        key_der,
    ))
}

/// What the owner is told about a forwarded request.
pub struct Fencing<'a> {
    /// Invocation id of the request.
    pub invocation_id: &'a str,
    /// Run UID from the path.
    pub uid: &'a str,
    /// The route admission chose.
    pub route: &'a Route,
    /// The authenticated subject, when authentication is on.
    pub subject: Option<&'a str>,
    /// When the caller's token expires (session WebSockets).
    pub token_expires: Option<std::time::SystemTime>,
}

impl Fencing<'_> {
    /// Rewrites the headers of the request to the owner: the bearer token
    /// never goes past the gateway, and callers cannot forge the fencing
    /// headers.
    pub fn apply(&self, upstream: &mut RequestHeader) -> Result<()> {
        upstream.remove_header(&http::header::AUTHORIZATION);
        let forged = |k: &http::HeaderName| k.as_str().starts_with("x-kruntimes-");
        // Callers rarely send any: the list is only made when one is there.
        if upstream.headers.keys().any(forged) {
            let spoofable: Vec<_> = upstream
                .headers
                .keys()
                .filter(|k| forged(k))
                .cloned()
                .collect();
            for k in spoofable {
                upstream.remove_header(&k);
            }
        }
        upstream.insert_header(api::HEADER_INVOCATION_ID, self.invocation_id)?;
        upstream.insert_header(api::HEADER_RUN_UID, self.uid)?;
        upstream.insert_header(api::HEADER_OWNER_POD_UID, self.route.pod_uid())?;
        upstream.insert_header(
            api::HEADER_ATTEMPT,
            http::HeaderValue::from(self.route.attempt()),
        )?;
        upstream.insert_header(
            api::HEADER_HOP,
            http::HeaderValue::from_static(api::HOP_GATEWAY),
        )?;
        if let Some(s) = self.subject {
            upstream.insert_header(api::HEADER_SUBJECT, s)?;
        }
        if let Some(exp) = self.token_expires {
            let secs = exp
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            upstream.insert_header(api::HEADER_TOKEN_EXPIRES, secs.to_string())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route() -> Route {
        let mut assignment = crate::table::fixtures::assignment(
            "u1",
            "pod-a",
            "10.0.0.1:7443",
            3,
            kruntimes_proto::ownership::v1::Phase::Ready,
        );
        assignment.run_name = "hello".into();
        Route::new(Arc::new(assignment), None).unwrap()
    }

    fn forwarded(subject: Option<&str>) -> RequestHeader {
        let mut req = RequestHeader::build("POST", b"/v1/x", None).unwrap();
        req.insert_header("authorization", "Bearer secret").unwrap();
        req.insert_header("x-kruntimes-attempt", "99").unwrap();
        req.insert_header("x-kruntimes-subject", "admin").unwrap();
        req.insert_header("x-kruntimes-forged", "1").unwrap();
        req.insert_header("content-type", "application/json")
            .unwrap();
        let route = route();
        let fencing = Fencing {
            invocation_id: "inv-1",
            uid: "u1",
            route: &route,
            subject,
            token_expires: None,
        };
        fencing.apply(&mut req).unwrap();
        req
    }

    fn header<'a>(req: &'a RequestHeader, name: &str) -> Option<&'a str> {
        req.headers.get(name).map(|v| v.to_str().unwrap())
    }

    #[test]
    fn forwarded_requests_carry_the_tables_fencing_values_and_no_token() {
        let req = forwarded(Some("alice"));
        assert_eq!(header(&req, "authorization"), None);
        assert_eq!(header(&req, "x-kruntimes-invocation-id"), Some("inv-1"));
        assert_eq!(header(&req, "x-kruntimes-run-uid"), Some("u1"));
        assert_eq!(header(&req, "x-kruntimes-owner-pod-uid"), Some("pod-a"));
        assert_eq!(header(&req, "x-kruntimes-attempt"), Some("3"));
        assert_eq!(header(&req, "x-kruntimes-hop"), Some("gateway"));
        assert_eq!(header(&req, "x-kruntimes-subject"), Some("alice"));
        assert_eq!(header(&req, "content-type"), Some("application/json"));
    }

    #[test]
    fn caller_supplied_kruntimes_headers_never_reach_the_owner() {
        let req = forwarded(None);
        assert_eq!(header(&req, "x-kruntimes-forged"), None);
        assert_eq!(header(&req, "x-kruntimes-subject"), None);
        assert_eq!(req.headers.get_all("x-kruntimes-attempt").iter().count(), 1);
    }

    /// A client pair `cn` of a CA of its own in `dir`.
    fn write_leaf(dir: &Path, cn: &str) {
        client_leaf(dir, &kruntimes_certs::Ca::generate("test", 1).unwrap(), cn);
    }

    fn common_name(pair: &CertKey) -> String {
        pingora::utils::tls::get_common_name(pair.leaf()).unwrap_or_default()
    }

    fn cn(c: &ClientCert) -> String {
        common_name(&c.current())
    }

    fn upstream(cert_key: Arc<ClientCert>) -> Upstream {
        Upstream {
            cert_key,
            connector_pair: Arc::default(),
            server_name: "runtimed.kruntimes.internal".into(),
            connect_timeout: Duration::from_secs(1),
            default_timeout: Duration::from_secs(30),
        }
    }

    fn carried(up: &Upstream) -> Option<String> {
        let peer = up.peer(&route(), false).unwrap();
        peer.client_cert_key.map(|c| common_name(&c))
    }

    #[test]
    fn peers_carry_the_client_certificate_only_once_it_is_not_the_connectors() {
        let dir = tempfile::tempdir().unwrap();
        write_leaf(dir.path(), "first");
        let (crt, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
        let up = upstream(client_cert(&crt, &key).unwrap());
        // Before the connector is known to hold it, every peer carries it.
        assert_eq!(carried(&up).as_deref(), Some("first"));
        up.connector_loaded(up.cert_key.current());
        // The connector's own: peers carry none, so the pool key hashes no
        // certificate.
        assert_eq!(carried(&up), None);
        // Rotated on disk, not yet reloaded: the connector's is in service.
        write_leaf(dir.path(), "second");
        assert_eq!(carried(&up), None);
        // Reloaded: peers carry the new pair (new connections present it).
        assert_eq!(up.cert_key.reload(), Ok(true));
        assert_eq!(carried(&up).as_deref(), Some("second"));
        // Only the pair in service when the connector was built counts.
        let stale = upstream(client_cert(&crt, &key).unwrap());
        let old = stale.cert_key.current();
        write_leaf(dir.path(), "third");
        assert_eq!(stale.cert_key.reload(), Ok(true));
        stale.connector_loaded(old);
        assert_eq!(carried(&stale).as_deref(), Some("third"));
    }

    #[test]
    fn a_connector_whose_files_changed_while_it_loaded_them_is_not_trusted_to_hold_the_pair() {
        let dir = tempfile::tempdir().unwrap();
        write_leaf(dir.path(), "first");
        let (crt, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
        let up = upstream(client_cert(&crt, &key).unwrap());
        let loaded = up.cert_key.current();
        // The files changed after the pair in service was read: the
        // connector may hold either, so peers keep carrying theirs.
        write_leaf(dir.path(), "second");
        up.connector_loaded(loaded);
        assert_eq!(carried(&up).as_deref(), Some("first"));
    }

    /// A runtimed stand-in: TLS with client certificates required (the
    /// internal CA), sending the common name each handshake presented.
    async fn mtls_server(
        dir: &Path,
        ca: &kruntimes_certs::Ca,
    ) -> (
        std::net::SocketAddr,
        tokio::sync::mpsc::UnboundedReceiver<String>,
    ) {
        let server = ca
            .issue(&kruntimes_certs::LeafSpec::server(
                "runtimed.kruntimes.internal",
                1,
            ))
            .unwrap();
        std::fs::write(dir.join("server.crt"), server.cert_pem).unwrap();
        std::fs::write(dir.join("server.key"), server.key_pem).unwrap();
        let config = kruntimes_certs::server_config(
            &dir.join("server.crt"),
            &dir.join("server.key"),
            Some(&dir.join("ca.crt")),
            &[b"http/1.1"],
        )
        .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                let (acceptor, tx) = (acceptor.clone(), tx.clone());
                tokio::spawn(async move {
                    if let Ok(tls) = acceptor.accept(tcp).await {
                        let presented = tls
                            .get_ref()
                            .1
                            .peer_certificates()
                            .and_then(|c| kruntimes_certs::peer_common_name(c[0].as_ref()));
                        let _ = tx.send(presented.unwrap_or_default());
                    }
                });
            }
        });
        (addr, rx)
    }

    /// A client pair `cn` issued by `ca`, as `tls.crt` and `tls.key` in `dir`.
    fn client_leaf(dir: &Path, ca: &kruntimes_certs::Ca, cn: &str) {
        let leaf = ca.issue(&kruntimes_certs::LeafSpec::client(cn, 1)).unwrap();
        std::fs::write(dir.join("tls.crt"), leaf.cert_pem).unwrap();
        std::fs::write(dir.join("tls.key"), leaf.key_pem).unwrap();
    }

    /// The name the next accepted handshake presented (a refused one sends
    /// none: bounded, so the test fails instead of hanging).
    async fn next(presented: &mut tokio::sync::mpsc::UnboundedReceiver<String>) -> String {
        tokio::time::timeout(Duration::from_secs(10), presented.recv())
            .await
            .expect("no handshake with a client certificate was accepted")
            .unwrap()
    }

    #[tokio::test]
    async fn the_hop_presents_the_connectors_certificate_then_the_rotated_one() {
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        let dir = tempfile::tempdir().unwrap();
        let ca = kruntimes_certs::Ca::generate("internal", 1).unwrap();
        std::fs::write(dir.path().join("ca.crt"), &ca.cert_pem).unwrap();
        client_leaf(dir.path(), &ca, "gateway-first");
        let (addr, mut presented) = mtls_server(dir.path(), &ca).await;
        let (crt, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));

        let up = upstream(client_cert(&crt, &key).unwrap());
        let loaded = up.cert_key.current();
        let options = Upstream::connector_options(
            ConnectorOptions::new(8),
            &dir.path().join("ca.crt"),
            &crt,
            &key,
        )
        .unwrap();
        let connector = pingora::connectors::TransportConnector::new(Some(options));
        up.connector_loaded(loaded);
        let mut assignment = crate::table::fixtures::assignment(
            "u1",
            "pod-a",
            &addr.to_string(),
            1,
            kruntimes_proto::ownership::v1::Phase::Ready,
        );
        assignment.run_name = "hello".into();
        let route = Route::new(Arc::new(assignment), None).unwrap();

        // The peer carries no certificate: the connector presents its own
        // (and verifies runtimed's against the internal CA).
        let peer = up.peer(&route, false).unwrap();
        assert!(peer.client_cert_key.is_none());
        connector.new_stream(&peer).await.unwrap();
        assert_eq!(next(&mut presented).await, "gateway-first");

        // Rotated and reloaded: new connections present the new pair.
        client_leaf(dir.path(), &ca, "gateway-second");
        assert_eq!(up.cert_key.reload(), Ok(true));
        let peer = up.peer(&route, false).unwrap();
        connector.new_stream(&peer).await.unwrap();
        assert_eq!(next(&mut presented).await, "gateway-second");

        // A runtimed under another name is refused: verification is on.
        let mut wrong = up.peer(&route, false).unwrap();
        wrong.sni = "someone-else.kruntimes.internal".into();
        assert!(connector.new_stream(&wrong).await.is_err());
    }

    #[test]
    fn the_connector_trusts_the_internal_ca_and_presents_the_gateways_certificate() {
        let o = Upstream::connector_options(
            ConnectorOptions::new(7),
            Path::new("/pki/ca.crt"),
            Path::new("/pki/tls.crt"),
            Path::new("/pki/tls.key"),
        )
        .unwrap();
        assert_eq!(o.ca_file.as_deref(), Some("/pki/ca.crt"));
        assert_eq!(
            o.cert_key_file,
            Some(("/pki/tls.crt".to_owned(), "/pki/tls.key".to_owned()))
        );
        assert_eq!(o.keepalive_pool_size, 7, "the rest is the base's");
    }

    #[test]
    fn the_client_certificate_follows_rotated_files_and_refuses_broken_ones() {
        let dir = tempfile::tempdir().unwrap();
        write_leaf(dir.path(), "first");
        let (crt, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
        let c = client_cert(&crt, &key).unwrap();
        assert_eq!(cn(&c), "first");
        assert_eq!(c.reload(), Ok(false), "unchanged");
        write_leaf(dir.path(), "second");
        assert_eq!(c.reload(), Ok(true));
        assert_eq!(cn(&c), "second");
        // Someone else's key beside the certificate: refused, "second" stays.
        let other = tempfile::tempdir().unwrap();
        write_leaf(other.path(), "third");
        std::fs::copy(other.path().join("tls.key"), &key).unwrap();
        assert!(c.reload().is_err());
        assert_eq!(cn(&c), "second");
        std::fs::write(&crt, "garbage").unwrap();
        assert!(c.reload().is_err());
        assert_eq!(cn(&c), "second");
        assert!(
            client_cert(&crt, &key).is_err(),
            "an unusable pair fails at start"
        );
    }
}
