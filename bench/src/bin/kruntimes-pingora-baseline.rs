//! `kruntimes-pingora-baseline`: bare Pingora in front of one runtimed —
//! the same Pingora version and TLS stack as the gateway (rustls, HTTP/2
//! downstream, mTLS to the owner), a static upstream and static fencing
//! headers, and nothing else: no authentication, no routing table, no
//! limits, no metrics, no access log. The bench runs it beside the gateway
//! so the figures separate Pingora's own cost from the gateway's.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use async_trait::async_trait;
use clap::Parser;
use pingora::connectors::ConnectorOptions;
use pingora::http::RequestHeader;
use pingora::listeners::tls::TlsSettings;
use pingora::prelude::HttpPeer;
use pingora::protocols::ALPN;
use pingora::proxy::{ProxyHttp, ProxyServiceBuilder, Session};
use pingora::server::Server;
use pingora::server::configuration::ServerConf;

/// The allocator of the gateway, for a like-for-like baseline ([`kruntimes_alloc`]).
#[global_allocator]
static ALLOCATOR: kruntimes_alloc::Allocator = kruntimes_alloc::Allocator;

/// Flags.
#[derive(Debug, Parser)]
struct Args {
    /// Address of the HTTPS listener.
    #[arg(long)]
    listen: String,
    /// Server certificate (PEM).
    #[arg(long)]
    cert: PathBuf,
    /// Server key (PEM).
    #[arg(long)]
    key: PathBuf,
    /// The owner runtimed.
    #[arg(long)]
    upstream: SocketAddr,
    /// CA of the upstream's certificate.
    #[arg(long)]
    upstream_ca: PathBuf,
    /// Client certificate presented upstream.
    #[arg(long)]
    client_cert: PathBuf,
    /// Client key.
    #[arg(long)]
    client_key: PathBuf,
    /// TLS server name of the upstream.
    #[arg(long)]
    server_name: String,
    /// `NAME=VALUE` headers set on every forwarded request.
    #[arg(long = "header")]
    headers: Vec<String>,
    /// Upstream protocol: `h1` or `h2`.
    #[arg(long, default_value = "h1")]
    upstream_protocol: String,
    /// Worker threads.
    #[arg(long, default_value_t = 1)]
    threads: usize,
}

/// The proxy: one static peer, static headers.
struct Bare {
    peer: HttpPeer,
    headers: Vec<(String, String)>,
}

#[async_trait]
impl ProxyHttp for Bare {
    type CTX = ();

    fn new_ctx(&self) {}

    async fn upstream_peer(&self, _s: &mut Session, _c: &mut ()) -> pingora::Result<Box<HttpPeer>> {
        Ok(Box::new(self.peer.clone()))
    }

    async fn upstream_request_filter(
        &self,
        _s: &mut Session,
        upstream: &mut RequestHeader,
        _c: &mut (),
    ) -> pingora::Result<()> {
        upstream.remove_header(&http::header::AUTHORIZATION);
        for (k, v) in &self.headers {
            upstream.insert_header(k.clone(), v.as_str())?;
        }
        Ok(())
    }
}

fn path(p: &std::path::Path) -> anyhow::Result<String> {
    p.to_str()
        .map(str::to_owned)
        .with_context(|| format!("{} is not a UTF-8 path", p.display()))
}

fn main() -> anyhow::Result<()> {
    kruntimes_alloc::tune();
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let args = Args::parse();
    // As the gateway connects upstream: the CA and the client certificate
    // are the connector's, so the peer (Pingora's pool key) carries none.
    kruntimes_certs::check_ca_bundle(&args.upstream_ca)?;
    kruntimes_certs::load_certified_key(&args.client_cert, &args.client_key)
        .map_err(anyhow::Error::msg)?;
    let mut peer = HttpPeer::new(args.upstream, true, args.server_name.clone());
    let o = &mut peer.options;
    o.alpn = match args.upstream_protocol.as_str() {
        "h2" => ALPN::H2,
        _ => ALPN::H1,
    };
    o.connection_timeout = Some(Duration::from_secs(1));
    o.idle_timeout = Some(Duration::from_secs(90));
    o.max_h2_streams = 128;
    let headers = args
        .headers
        .iter()
        .filter_map(|h| h.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    // The gateway's runtime (`kruntimes_gateway::run`), so that the
    // difference between the two is the gateway's own work: one
    // current-thread runtime per worker, no work stealing.
    let conf = ServerConf {
        threads: args.threads,
        work_stealing: false,
        ca_file: Some(path(&args.upstream_ca)?),
        // As the gateway: Pingora's timeouts on tokio's timer, so its clock
        // thread (10 ms ticks) never starts in either.
        fast_timeout_to_tokio_threshold_seconds: Some(0),
        // A baseline has nothing to drain: on SIGTERM it exits at once
        // (Pingora's default grace is 5 minutes, past the harness's wait,
        // which then kills it and loses whatever an exit handler writes).
        grace_period_seconds: Some(0),
        graceful_shutdown_timeout_seconds: Some(1),
        ..ServerConf::default()
    };
    let mut server = Server::new_with_opt_and_conf(None, conf);
    let mut client = ConnectorOptions::from_server_conf(&server.configuration);
    client.cert_key_file = Some((path(&args.client_cert)?, path(&args.client_key)?));
    let mut proxy = ProxyServiceBuilder::new(&server.configuration, Bare { peer, headers })
        .client_options(client)
        .build();
    let mut tls = TlsSettings::intermediate(
        &args.cert.display().to_string(),
        &args.key.display().to_string(),
    )?;
    tls.enable_h2();
    proxy.add_tls_with_settings(&args.listen, None, tls);
    server.add_service(proxy);
    server.bootstrap();
    server.run_forever()
}
