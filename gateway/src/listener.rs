//! The gateway's public listeners: the bounded accept loop shared with the
//! other daemons ([`kruntimes_process::listen`]) in front of Pingora's HTTP
//! proxy, so a flood of unauthenticated sockets cannot take the process's
//! descriptors or keep slots forever.
//!
//! Per connection, in order:
//! 1. **Bound**: at most `max_connections` open; one past it is closed at
//!    once and counted (`kruntimes_gateway_connections_total{event="refused_at_bound"}`).
//! 2. **TLS handshake deadline** (HTTPS listeners).
//! 3. **First-request deadline**: the first request's headers (HTTP/1.1) or
//!    the first stream's (HTTP/2) must arrive within `header_timeout` of the
//!    handshake; otherwise the connection is closed. The proxy marks a
//!    connection's requests in its request filter ([`Connections`]).
//! 4. **Idle timeout**: a connection with no request in flight and nothing
//!    read or written for `idle_timeout` (`--idle-timeout-secs`) is closed.
//! 5. **Next-request deadline** (HTTP/1.1): each later request must arrive
//!    within `idle_timeout` + `header_timeout` of the previous one's end,
//!    whatever bytes trickle in meanwhile (Pingora times each read, not the
//!    header); otherwise the connection is closed, counted as a header
//!    timeout.
//!
//! Accept errors (EMFILE included) never end the loop: they back off.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use pingora::apps::ServerApp;
use pingora::listeners::tls::Acceptor;
use pingora::protocols::l4::stream::Stream as L4Stream;
use pingora::protocols::l4::virt::{VirtualSockOpt, VirtualSocket, VirtualSocketStream};
use pingora::protocols::{ALPN, GetSocketDigest as _, SocketDigest, Stream};
#[cfg(unix)]
use pingora::server::ListenFds;
use pingora::server::ShutdownWatch;
use prometheus::{IntCounter, IntGauge};

use kruntimes_process::listen::{self, Limits, Stats};

mod bind;
mod connections;
mod workers;

pub use bind::{Binder, https_acceptor};
use connections::{Connection, between_requests_for, idle_for};
pub use connections::{Connections, InFlight};
pub use workers::Workers;

/// Counters of one listener, beside its [`Stats`].
#[derive(Debug, Clone)]
pub struct ListenerMetrics {
    /// Connections open now.
    pub open: IntGauge,
    /// Connections closed because their first request missed its deadline.
    pub header_timeouts: IntCounter,
}

/// One public listener: a Pingora service that accepts, bounds and
/// handshakes connections itself and hands each to an app.
///
/// A listener either serves its connections on its own service's threads,
/// with one app ([`Self::bind`]), or hands each to one of the gateway's
/// [`Workers`], to be served there with that worker's app
/// ([`Self::bind_for`]).
pub struct PublicListener<A> {
    name: &'static str,
    socket: Option<std::net::TcpListener>,
    local: SocketAddr,
    tls: Option<Arc<Acceptor>>,
    limits: Limits,
    header_timeout: Duration,
    idle_timeout: Duration,
    shutdown_grace: Duration,
    /// One per worker (one in all without workers).
    apps: Vec<Arc<A>>,
    workers: Option<Arc<Workers>>,
    connections: Arc<Connections>,
    stats: Arc<Stats>,
    metrics: ListenerMetrics,
}

/// What a [`PublicListener`] is built from.
pub struct ListenerConfig {
    /// Names the listener in logs and metrics (`https`, `http`).
    pub name: &'static str,
    /// The address to bind.
    pub addr: String,
    /// TLS, for an HTTPS listener.
    pub tls: Option<Arc<Acceptor>>,
    /// Connection bound and handshake deadline.
    pub limits: Limits,
    /// Deadline for the first request after the handshake.
    pub header_timeout: Duration,
    /// A connection with no request in flight for this long is closed
    /// (HTTP/2 streams and HTTP/1.1 requests alike).
    pub idle_timeout: Duration,
    /// How long the listener goes on accepting after a graceful shutdown
    /// began (SIGTERM), so a Pod being deleted refuses no connection while
    /// kube-proxy and load balancers stop sending it new ones.
    pub shutdown_grace: Duration,
}

impl<A> PublicListener<A> {
    /// Binds `config.addr` now (so a taken port is a startup error), to
    /// serve it once the server runs.
    pub fn bind(
        config: ListenerConfig,
        app: Arc<A>,
        connections: Arc<Connections>,
        stats: Arc<Stats>,
        metrics: ListenerMetrics,
    ) -> crate::Result<Self> {
        let bind = |source| crate::Error::Bind {
            name: config.name,
            addr: config.addr.clone(),
            source,
        };
        let socket = std::net::TcpListener::bind(&config.addr).map_err(bind)?;
        socket.set_nonblocking(true).map_err(bind)?;
        let local = socket.local_addr().map_err(bind)?;
        Ok(Self {
            name: config.name,
            socket: Some(socket),
            local,
            tls: config.tls,
            limits: config.limits,
            header_timeout: config.header_timeout,
            idle_timeout: config.idle_timeout,
            shutdown_grace: config.shutdown_grace,
            apps: vec![app],
            workers: None,
            connections,
            stats,
            metrics,
        })
    }

    /// Binds `config.addr` now; its accept loop, on a thread of its own,
    /// hands each connection to one of `workers`, served there by that
    /// worker's app in `apps` (one per worker).
    pub fn bind_for(
        config: ListenerConfig,
        workers: Arc<Workers>,
        apps: Vec<Arc<A>>,
        connections: Arc<Connections>,
        stats: Arc<Stats>,
        metrics: ListenerMetrics,
    ) -> crate::Result<Self> {
        if apps.len() != workers.len() || apps.is_empty() {
            let why = format!("{} apps for {} workers", apps.len(), workers.len());
            return Err(crate::Error::setup("listener", why));
        }
        let mut apps = apps.into_iter();
        let first = apps
            .next()
            .ok_or_else(|| crate::Error::setup("listener", "a listener needs a worker"))?;
        let mut listener = Self::bind(config, first, connections, stats, metrics)?;
        listener.apps.extend(apps);
        listener.workers = Some(workers);
        Ok(listener)
    }
}

/// One accepted connection's settings, shared by its task.
struct Conn<A> {
    app: Arc<A>,
    tls: Option<Arc<Acceptor>>,
    limits: Limits,
    header_timeout: Duration,
    idle_timeout: Duration,
    connections: Arc<Connections>,
    stats: Arc<Stats>,
    metrics: ListenerMetrics,
    local: SocketAddr,
}

impl<A: ServerApp + Send + Sync + 'static> Conn<A> {
    async fn serve(self: Arc<Self>, accepted: listen::Accepted, shutdown: ShutdownWatch) {
        let listen::Accepted {
            stream,
            remote,
            slot: _slot,
        } = accepted;
        self.metrics.open.inc();
        let _open = scopeguard(self.metrics.open.clone());
        let local = stream.local_addr().unwrap_or(self.local);
        let digest = SocketDigest::from_raw_fd(std::os::fd::AsRawFd::as_raw_fd(&stream));
        // The connection's own local address (the listener may be bound to
        // a wildcard), as Pingora's session reports it.
        let registered = self.connections.register(remote, local);
        let conn = registered.conn.clone();
        let mut l4 = L4Stream::from(VirtualSocketStream::new(Box::new(Buffered {
            io: tokio::io::BufStream::with_capacity(READ_BUFFER, WRITE_BUFFER, stream),
            conn: conn.clone(),
        })));
        let _ = digest.peer_addr.set(Some(remote.into()));
        let _ = digest.local_addr.set(Some(local.into()));
        l4.set_socket_digest(digest);
        let stream: Stream = match &self.tls {
            None => Box::new(l4),
            Some(tls) => {
                let handshake = async {
                    tls.tls_handshake(l4)
                        .await
                        .map_err(|e| std::io::Error::other(e.to_string()))
                };
                match listen::handshake(self.limits, &self.stats, handshake).await {
                    Ok(s) => Box::new(s),
                    // A failed handshake is the peer's business: counted as a
                    // timeout when it was one, never logged per connection.
                    Err(_) => return,
                }
            }
        };
        // HTTP/1.1 unless TLS chose HTTP/2 (the plain listener has no h2c).
        let http1 = stream.selected_alpn_proto() != Some(ALPN::H2);
        let serving = async {
            let first = self.app.process_new(stream, &shutdown);
            tokio::pin!(first);
            let header_deadline = tokio::time::timeout(self.header_timeout, conn.spoke.notified());
            tokio::pin!(header_deadline);
            let mut reuse = tokio::select! {
                reuse = &mut first => reuse,
                waited = &mut header_deadline => {
                    if waited.is_err() {
                        // Silent past the deadline: dropping `first` closes it.
                        self.metrics.header_timeouts.inc();
                        return;
                    }
                    // Spoke in time: only the request itself is awaited now.
                    first.await
                }
            };
            while let Some(stream) = reuse {
                reuse = self.app.process_new(stream, &shutdown).await;
            }
        };
        // Idle (no request in flight, nothing read or written) for the idle
        // timeout: dropping `serving` closes the connection at once, as
        // Pingora's own HTTP/2 idle timeout does. Kept on tokio's timer:
        // Pingora's runs a clock thread that wakes every 10 ms for the life
        // of the process.
        // `serving` first: bytes that arrive as the idle deadline passes are
        // read (and stamp the connection) before the deadline is checked, so
        // a request already in the socket is served, not reset.
        // Bytes alone never hold a connection past the idle timeout plus the
        // header deadline from its last request's end: neither an HTTP/1.1
        // header trickled a byte at a time nor HTTP/2 PINGs with no stream.
        tokio::select! {
            biased;
            () = serving => {}
            () = idle_for(&conn, self.idle_timeout) => {}
            () = between_requests_for(&conn, self.idle_timeout + self.header_timeout) => {
                if http1 {
                    self.metrics.header_timeouts.inc();
                }
            }
        }
        drop(registered);
    }
}

/// Read buffer of a connection, as Pingora's own listeners use.
const READ_BUFFER: usize = 64 * 1024;
/// Write buffer of a connection: one HTTP/2 DATA frame as TLS sends it.
/// TLS writes each record on its own, and a 16 KiB frame is two records
/// (its 9-byte header, then the payload; 16,437 bytes with their
/// overhead): with a one-segment buffer every frame cost two `send`s, with
/// this one. It holds what is written until the next flush: HTTP/2,
/// chunked and upgraded (WebSocket) responses flush after every write; an
/// HTTP/1.1 body with a `Content-Length` may wait here, up to this size,
/// for its next part or its end. Allocated per connection, beside the
/// 64 KiB read buffer.
const WRITE_BUFFER: usize = 20 * 1024;

/// A buffered TCP connection handed to Pingora (whose own buffered socket
/// type is internal to it).
#[derive(Debug)]
struct Buffered {
    io: tokio::io::BufStream<tokio::net::TcpStream>,
    /// Stamped by every read that returns bytes and every write that takes
    /// some (the idle clock).
    conn: Arc<Connection>,
}

impl VirtualSocket for Buffered {
    fn set_socket_option(&self, opt: VirtualSockOpt) -> std::io::Result<()> {
        match opt {
            VirtualSockOpt::NoDelay => self.io.get_ref().set_nodelay(true),
            // Keep-alive probes are not configured on public connections.
            _ => Ok(()),
        }
    }
}

impl tokio::io::AsyncRead for Buffered {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = std::pin::Pin::new(&mut self.io).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.conn.touch();
        }
        polled
    }
}

impl tokio::io::AsyncWrite for Buffered {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let polled = std::pin::Pin::new(&mut self.io).poll_write(cx, buf);
        if matches!(polled, std::task::Poll::Ready(Ok(n)) if n > 0) {
            self.conn.touch();
        }
        polled
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// Decrements `gauge` when dropped.
fn scopeguard(gauge: IntGauge) -> impl Drop {
    struct Dec(IntGauge);
    impl Drop for Dec {
        fn drop(&mut self) {
            self.0.dec();
        }
    }
    Dec(gauge)
}

#[async_trait]
impl<A: ServerApp + Send + Sync + 'static> pingora::services::Service for PublicListener<A> {
    async fn start_service(
        &mut self,
        #[cfg(unix)] _fds: Option<ListenFds>,
        mut shutdown: ShutdownWatch,
        _listeners_per_fd: usize,
    ) {
        let Some(socket) = self.socket.take() else {
            return;
        };
        let listener = match tokio::net::TcpListener::from_std(socket) {
            Ok(l) => listen::Listener::with_stats(l, self.name, self.limits, self.stats.clone()),
            Err(e) => {
                tracing::error!(listener = self.name, error = %e, "cannot serve the listener");
                return;
            }
        };
        // One per worker: its app.
        let conns: Vec<Arc<Conn<A>>> = self
            .apps
            .iter()
            .map(|app| {
                Arc::new(Conn {
                    app: app.clone(),
                    tls: self.tls.clone(),
                    limits: self.limits,
                    header_timeout: self.header_timeout,
                    connections: self.connections.clone(),
                    idle_timeout: self.idle_timeout,
                    stats: self.stats.clone(),
                    metrics: self.metrics.clone(),
                    local: self.local,
                })
            })
            .collect();
        if let Some(workers) = &self.workers {
            // Connections wait in the socket's backlog meanwhile.
            workers.all_started().await;
        }
        // Set once the shutdown began: accepting goes on until then. The
        // connections accepted meanwhile see the shutdown and close after
        // one request, so keep-alive clients move to other replicas too.
        let mut stop_at: Option<tokio::time::Instant> = None;
        loop {
            let grace_over = async {
                match stop_at {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                accepted = listener.accept() => {
                    self.hand_over(&conns, accepted, shutdown.clone());
                }
                changed = shutdown.changed(), if stop_at.is_none() => {
                    if changed.is_err() || *shutdown.borrow() {
                        tracing::info!(
                            listener = self.name,
                            grace_ms = self.shutdown_grace.as_millis() as u64,
                            "shutting down: accepting until the grace ends"
                        );
                        stop_at = Some(tokio::time::Instant::now() + self.shutdown_grace);
                    }
                }
                () = grace_over => {
                    tracing::info!(listener = self.name, "listener stopping");
                    return;
                }
            }
        }
    }

    fn name(&self) -> &str {
        self.name
    }

    fn threads(&self) -> Option<usize> {
        // Accepting alone takes one thread.
        self.workers.as_ref().map(|_| 1)
    }
}

impl<A: ServerApp + Send + Sync + 'static> PublicListener<A> {
    /// Starts serving `accepted`: on the worker with the fewest connections,
    /// or without workers on one of this service's threads.
    fn hand_over(
        &self,
        conns: &[Arc<Conn<A>>],
        accepted: listen::Accepted,
        shutdown: ShutdownWatch,
    ) {
        let Some((placed, worker)) = self.workers.as_ref().and_then(|w| w.place()) else {
            // Pingora's no-steal runtime picks a thread per call.
            let conn = conns[0].clone();
            pingora_runtime::current_handle().spawn(conn.serve(accepted, shutdown));
            return;
        };
        let conn = conns[placed.index()].clone();
        let listen::Accepted {
            stream,
            remote,
            slot,
        } = accepted;
        // Registered with this loop's reactor: moved to the worker's, so its
        // readiness wakes that thread alone.
        let stream = match stream.into_std() {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!(listener = self.name, error = %e, "cannot hand a connection over");
                return;
            }
        };
        worker.spawn(async move {
            let _placed = placed;
            match tokio::net::TcpStream::from_std(stream) {
                Ok(stream) => {
                    let accepted = listen::Accepted {
                        stream,
                        remote,
                        slot,
                    };
                    conn.serve(accepted, shutdown).await;
                }
                Err(e) => tracing::debug!(error = %e, "cannot serve a handed-over connection"),
            }
        });
    }
}
