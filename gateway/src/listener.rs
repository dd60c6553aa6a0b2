//! The gateway's public listeners: the bounded accept loop shared with the
//! other daemons ([`kruntimes_support::listen`]) in front of Pingora's HTTP
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
//! 4. **Idle timeout**: a connection with no request in flight for
//!    `idle_timeout` (`--idle-timeout-secs`) is closed. Later requests are
//!    also bounded by Pingora's keep-alive and read timeouts.
//!
//! Accept errors (EMFILE included) never end the loop: they back off.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use pingora::apps::ServerApp;
use pingora::listeners::tls::Acceptor;
use pingora::protocols::l4::stream::Stream as L4Stream;
use pingora::protocols::l4::virt::{VirtualSockOpt, VirtualSocket, VirtualSocketStream};
use pingora::protocols::{GetSocketDigest as _, SocketDigest, Stream};
#[cfg(unix)]
use pingora::server::ListenFds;
use pingora::server::ShutdownWatch;
use prometheus::{IntCounter, IntGauge};
use tokio::sync::Notify;
use tokio::time::Instant;

use kruntimes_support::listen::{self, Limits, Stats};

/// The open connections of the gateway's listeners, by their two ends: what
/// the accept loop's deadlines need to know of their requests.
///
/// The accept loop registers a connection after its handshake and removes
/// it when it ends; the proxy's request filter calls
/// [`Connections::request`] for every request and holds the returned
/// [`InFlight`] until the request ends. The first request releases the
/// connection from its first-request deadline; the count of requests in
/// flight and the end of the last one are its idle clock. Bounded by the
/// listeners' connection bounds.
#[derive(Debug, Default)]
pub struct Connections {
    open: Mutex<HashMap<ConnKey, Arc<Connection>>>,
}

/// A connection's identity while it is open: its two ends.
type ConnKey = (SocketAddr, SocketAddr);

/// What the accept loop and the requests of one connection share.
#[derive(Debug)]
struct Connection {
    /// Signalled by the first request (a permit if nobody waits yet).
    spoke: Notify,
    /// Requests (HTTP/2 streams) in flight.
    in_flight: AtomicUsize,
    /// When the last request ended (or the connection was registered), in
    /// milliseconds since `since`.
    last_end_ms: AtomicU64,
    since: Instant,
}

impl Connection {
    fn new() -> Self {
        Self {
            spoke: Notify::new(),
            in_flight: AtomicUsize::new(0),
            last_end_ms: AtomicU64::new(0),
            since: Instant::now(),
        }
    }

    /// When the connection is idle from, if nothing is in flight.
    fn idle_since(&self) -> Option<Instant> {
        (self.in_flight.load(Ordering::Acquire) == 0)
            .then(|| self.since + Duration::from_millis(self.last_end_ms.load(Ordering::Acquire)))
    }
}

/// One request in flight on a registered connection; its end when dropped.
#[derive(Debug)]
pub struct InFlight(Arc<Connection>);

impl Drop for InFlight {
    fn drop(&mut self) {
        let c = &self.0;
        let ms = u64::try_from(c.since.elapsed().as_millis()).unwrap_or(u64::MAX);
        c.last_end_ms.fetch_max(ms, Ordering::AcqRel);
        c.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Connections {
    fn register(&self, key: ConnKey) -> Arc<Connection> {
        let c = Arc::new(Connection::new());
        self.lock().insert(key, c.clone());
        c
    }

    /// Removes `conn`, unless its ends already name a newer connection.
    fn forget(&self, key: &ConnKey, conn: &Arc<Connection>) {
        let mut open = self.lock();
        if open.get(key).is_some_and(|c| Arc::ptr_eq(c, conn)) {
            open.remove(key);
        }
    }

    /// A request arrived on the connection `peer` → `local`: counted in
    /// flight until the returned guard is dropped. `None` for a connection
    /// no listener of this process registered.
    pub fn request(&self, peer: SocketAddr, local: SocketAddr) -> Option<InFlight> {
        let c = self.lock().get(&(peer, local))?.clone();
        if c.in_flight.fetch_add(1, Ordering::AcqRel) == 0 {
            c.spoke.notify_one();
        }
        Some(InFlight(c))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ConnKey, Arc<Connection>>> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Returns once `conn` has had no request in flight for `idle`, checking
/// with tokio's timer at most once per `idle` (requests only touch
/// atomics).
async fn idle_for(conn: &Connection, idle: Duration) {
    let mut deadline = Instant::now() + idle;
    loop {
        tokio::time::sleep_until(deadline).await;
        let now = Instant::now();
        match conn.idle_since() {
            Some(since) if now.saturating_duration_since(since) >= idle => return,
            Some(since) => deadline = since + idle,
            None => deadline = now + idle,
        }
    }
}

/// Counters of one listener, beside its [`Stats`].
#[derive(Debug, Clone)]
pub struct ListenerMetrics {
    /// Connections open now.
    pub open: IntGauge,
    /// Connections closed because their first request missed its deadline.
    pub header_timeouts: IntCounter,
}

/// One public listener: a Pingora service that accepts, bounds and
/// handshakes connections itself and hands each to `app`.
pub struct PublicListener<A> {
    name: &'static str,
    socket: Option<std::net::TcpListener>,
    local: SocketAddr,
    tls: Option<Arc<Acceptor>>,
    limits: Limits,
    header_timeout: Duration,
    idle_timeout: Duration,
    shutdown_grace: Duration,
    app: Arc<A>,
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
    ) -> anyhow::Result<Self> {
        let socket = std::net::TcpListener::bind(&config.addr)
            .map_err(|e| anyhow::anyhow!("bind {} ({}): {e}", config.addr, config.name))?;
        socket.set_nonblocking(true)?;
        let local = socket.local_addr()?;
        Ok(Self {
            name: config.name,
            socket: Some(socket),
            local,
            tls: config.tls,
            limits: config.limits,
            header_timeout: config.header_timeout,
            idle_timeout: config.idle_timeout,
            shutdown_grace: config.shutdown_grace,
            app,
            connections,
            stats,
            metrics,
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
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
        let mut l4 = L4Stream::from(VirtualSocketStream::new(Box::new(Buffered(
            tokio::io::BufStream::with_capacity(READ_BUFFER, WRITE_BUFFER, stream),
        ))));
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
        // The connection's own local address (the listener may be bound to
        // a wildcard), as Pingora's session reports it.
        let key = (remote, local);
        let conn = self.connections.register(key);
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
        // Idle (no request in flight) for the idle timeout: dropping
        // `serving` closes the connection at once, as Pingora's own HTTP/2
        // idle timeout does. Kept on tokio's timer: Pingora's runs a clock
        // thread that wakes every 10 ms for the life of the process.
        tokio::select! {
            () = serving => {}
            () = idle_for(&conn, self.idle_timeout) => {}
        }
        self.connections.forget(&key, &conn);
    }
}

/// Read buffer of a connection, as Pingora's own listeners use.
const READ_BUFFER: usize = 64 * 1024;
/// Write buffer of a connection (one segment, as Pingora's): a response's
/// header and body records leave in one write when they fit.
const WRITE_BUFFER: usize = 1460;

/// A buffered TCP connection handed to Pingora (whose own buffered socket
/// type is internal to it).
#[derive(Debug)]
struct Buffered(tokio::io::BufStream<tokio::net::TcpStream>);

impl VirtualSocket for Buffered {
    fn set_socket_option(&self, opt: VirtualSockOpt) -> std::io::Result<()> {
        match opt {
            VirtualSockOpt::NoDelay => self.0.get_ref().set_nodelay(true),
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
        std::pin::Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for Buffered {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_shutdown(cx)
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
        let conn = Arc::new(Conn {
            app: self.app.clone(),
            tls: self.tls.clone(),
            limits: self.limits,
            header_timeout: self.header_timeout,
            connections: self.connections.clone(),
            idle_timeout: self.idle_timeout,
            stats: self.stats.clone(),
            metrics: self.metrics.clone(),
            local: self.local,
        });
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
                    let conn = conn.clone();
                    let shutdown = shutdown.clone();
                    // Spread over the service's threads (Pingora's no-steal
                    // runtime picks one per call).
                    pingora_runtime::current_handle().spawn(conn.serve(accepted, shutdown));
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
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    #[test]
    fn requests_are_counted_on_their_own_connection_until_they_end() {
        let open = Connections::default();
        let a = open.register((addr(1000), addr(443)));
        let b = open.register((addr(1001), addr(443)));
        // Another listener's address, or an unknown connection: nothing.
        assert!(open.request(addr(1000), addr(80)).is_none());
        assert!(a.idle_since().is_some());
        let first = open.request(addr(1000), addr(443)).unwrap();
        let second = open.request(addr(1000), addr(443)).unwrap();
        assert_eq!(a.in_flight.load(Ordering::Acquire), 2);
        assert!(
            a.idle_since().is_none(),
            "busy while a request is in flight"
        );
        assert!(
            b.idle_since().is_some(),
            "the other connection is untouched"
        );
        drop(first);
        assert!(a.idle_since().is_none());
        std::thread::sleep(Duration::from_millis(5));
        drop(second);
        let since = a.idle_since().unwrap();
        assert!(
            since >= a.since + Duration::from_millis(5),
            "idle from the last end"
        );
        open.forget(&(addr(1000), addr(443)), &a);
        assert!(open.request(addr(1000), addr(443)).is_none());
        assert_eq!(open.lock().len(), 1);
        // The same ends, a new connection: the old one's end leaves it be.
        let newer = open.register((addr(1001), addr(443)));
        open.forget(&(addr(1001), addr(443)), &b);
        let r = open.request(addr(1001), addr(443)).unwrap();
        assert!(Arc::ptr_eq(&r.0, &newer));
    }

    #[tokio::test(start_paused = true)]
    async fn the_first_request_releases_the_deadline_even_before_it_is_awaited() {
        let open = Connections::default();
        let c = open.register((addr(1000), addr(443)));
        let _r = open.request(addr(1000), addr(443)).unwrap();
        // The permit waits for the accept loop.
        tokio::time::timeout(Duration::from_secs(1), c.spoke.notified())
            .await
            .unwrap();
        let silent = open.register((addr(1001), addr(443)));
        assert!(
            tokio::time::timeout(Duration::from_secs(1), silent.spoke.notified())
                .await
                .is_err()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn idle_means_nothing_in_flight_for_the_whole_timeout() {
        let open = Connections::default();
        let c = open.register((addr(1000), addr(443)));
        let idle = Duration::from_secs(60);
        let t0 = tokio::time::Instant::now();
        // A request in flight across several timeouts keeps it open ...
        let r = open.request(addr(1000), addr(443)).unwrap();
        let watch = idle_for(&c, idle);
        tokio::pin!(watch);
        assert!(
            tokio::time::timeout(Duration::from_secs(150), &mut watch)
                .await
                .is_err()
        );
        // ... and its end starts a whole idle period.
        drop(r);
        let ended = tokio::time::Instant::now();
        watch.await;
        let closed = tokio::time::Instant::now();
        assert!(
            closed - ended >= idle,
            "closed {:?} after the end",
            closed - ended
        );
        assert!(closed - ended < idle + Duration::from_secs(61));
        assert!(closed - t0 >= Duration::from_secs(210));
    }
}
