//! A TCP accept loop that holds under abuse, for every listener of the
//! daemons (runtimed's TLS port, the control plane's and the operator's
//! ownership watch).
//!
//! - **Accept errors never end a server.** A connection that failed before
//!   it was accepted (`ECONNABORTED`, `EPROTO`, …) is skipped; running out
//!   of descriptors or memory (`EMFILE`, `ENFILE`, `ENOBUFS`, `ENOMEM`)
//!   backs off — 5 ms doubling to 1 s, reset by the next success — so the
//!   loop neither spins nor gives up while the bound below frees slots.
//! - **Bounded connections.** At most `max_connections` are open at once;
//!   one accepted beyond that is closed at once and counted, so a flood
//!   of idle sockets cannot take every descriptor of the process.
//! - **Deadlines.** [`Limits::handshake`] bounds the TLS handshake (and so
//!   how long an unauthenticated peer holds a slot); callers wrap their
//!   handshake in [`handshake`].
//!
//! What happens is counted in [`Stats`] and logged at most once per
//! [`REPORT_EVERY`] per listener (never per connection).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// How often a listener logs that it is under pressure, at most.
pub const REPORT_EVERY: Duration = Duration::from_secs(10);

/// Bounds of one listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Open connections at most.
    pub max_connections: usize,
    /// Bound on the TLS handshake of a new connection.
    pub handshake: Duration,
}

impl Default for Limits {
    /// 4,096 connections, 10 s handshakes.
    fn default() -> Self {
        Self {
            max_connections: 4096,
            handshake: Duration::from_secs(10),
        }
    }
}

/// Raises this process's soft open-file limit to its hard limit (as Go's
/// runtime does at start: the soft 1,024 of many containers is far below
/// what a proxy needs); returns the soft limit now in force.
pub fn raise_open_file_limit() -> Option<u64> {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).ok()?;
    if soft < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
        return Some(hard);
    }
    Some(soft)
}

/// Warns when `listeners` × `max_connections` (plus `reserve` descriptors
/// for everything else) exceed `limit`: descriptors, not the bound, would
/// then refuse a flood.
pub fn check_bound_against_limit(
    name: &str,
    max_connections: usize,
    listeners: usize,
    reserve: u64,
    limit: Option<u64>,
) {
    let Some(limit) = limit else { return };
    let wanted = (max_connections as u64)
        .saturating_mul(listeners as u64)
        .saturating_add(reserve);
    if wanted > limit {
        tracing::warn!(
            component = name,
            max_connections,
            listeners,
            open_file_limit = limit,
            "the connection bound exceeds the open-file limit: lower --max-connections or raise the limit"
        );
    }
}

/// What a failed `accept` means for the loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AcceptFailure {
    /// That one connection failed; accept the next one now.
    Connection,
    /// The process or the system is out of a resource: back off.
    Exhausted,
    /// Anything else: back off too (a server never stops on it).
    Other,
}

/// Classifies an `accept` error.
pub fn classify(e: &std::io::Error) -> AcceptFailure {
    use nix::errno::Errno;
    match e.raw_os_error().map(Errno::from_raw) {
        Some(
            Errno::ECONNABORTED
            | Errno::ECONNRESET
            | Errno::EPROTO
            | Errno::EINTR
            | Errno::EAGAIN
            | Errno::EPERM
            | Errno::ETIMEDOUT
            | Errno::EHOSTUNREACH
            | Errno::ENETUNREACH,
        ) => AcceptFailure::Connection,
        Some(Errno::EMFILE | Errno::ENFILE | Errno::ENOBUFS | Errno::ENOMEM) => {
            AcceptFailure::Exhausted
        }
        _ => AcceptFailure::Other,
    }
}

/// The back-off between failed accepts: 5 ms doubling to 1 s.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Backoff {
    failures: u32,
}

impl Backoff {
    const FIRST: Duration = Duration::from_millis(5);
    const MAX: Duration = Duration::from_secs(1);

    /// The wait after one more failure.
    pub fn after_failure(&mut self) -> Duration {
        let wait = Self::FIRST
            .saturating_mul(1u32 << self.failures.min(16))
            .min(Self::MAX);
        self.failures = self.failures.saturating_add(1);
        wait
    }

    /// A success: the next failure waits the first step again.
    pub fn reset(&mut self) {
        self.failures = 0;
    }
}

/// Counters of one listener.
#[derive(Debug, Default)]
pub struct Stats {
    /// Connections handed to the server.
    pub accepted: AtomicU64,
    /// Connections closed at once because the bound was reached.
    pub refused_at_bound: AtomicU64,
    /// Failed `accept` calls.
    pub accept_errors: AtomicU64,
    /// Handshakes that missed their deadline.
    pub handshake_timeouts: AtomicU64,
}

/// A connection, holding its slot until dropped.
#[derive(Debug)]
pub struct Accepted {
    /// The socket.
    pub stream: TcpStream,
    /// The peer.
    pub remote: SocketAddr,
    /// The slot; dropping it frees one.
    pub slot: OwnedSemaphorePermit,
}

/// A listener with [`Limits`].
#[derive(Debug)]
pub struct Listener {
    inner: TcpListener,
    name: &'static str,
    limits: Limits,
    slots: Arc<Semaphore>,
    stats: Arc<Stats>,
    last_report: std::sync::Mutex<Option<Instant>>,
}

impl Listener {
    /// Wraps `inner`; `name` names it in logs.
    pub fn new(inner: TcpListener, name: &'static str, limits: Limits) -> Self {
        Self::with_stats(inner, name, limits, Arc::default())
    }

    /// [`Self::new`], counting into `stats` (which a metrics endpoint reads).
    pub fn with_stats(
        inner: TcpListener,
        name: &'static str,
        limits: Limits,
        stats: Arc<Stats>,
    ) -> Self {
        Self {
            inner,
            name,
            limits,
            slots: Arc::new(Semaphore::new(limits.max_connections.max(1))),
            stats,
            last_report: std::sync::Mutex::new(None),
        }
    }

    /// The bounds.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// The counters.
    pub fn stats(&self) -> Arc<Stats> {
        self.stats.clone()
    }

    /// The bound address.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.inner.local_addr()
    }

    /// The next connection within the bound. Never fails: errors are
    /// skipped or backed off, connections past the bound closed.
    pub async fn accept(&self) -> Accepted {
        let mut backoff = Backoff::default();
        loop {
            match self.inner.accept().await {
                Ok((stream, remote)) => {
                    backoff.reset();
                    match self.slots.clone().try_acquire_owned() {
                        Ok(slot) => {
                            self.stats.accepted.fetch_add(1, Ordering::Relaxed);
                            let _ = stream.set_nodelay(true);
                            return Accepted {
                                stream,
                                remote,
                                slot,
                            };
                        }
                        Err(_) => {
                            drop(stream);
                            self.stats.refused_at_bound.fetch_add(1, Ordering::Relaxed);
                            self.report("connection bound reached: new connections are closed");
                        }
                    }
                }
                Err(e) => {
                    self.stats.accept_errors.fetch_add(1, Ordering::Relaxed);
                    match classify(&e) {
                        AcceptFailure::Connection => {}
                        AcceptFailure::Exhausted | AcceptFailure::Other => {
                            self.report_error(&e);
                            tokio::time::sleep(backoff.after_failure()).await;
                        }
                    }
                }
            }
        }
    }

    fn due(&self) -> bool {
        let mut last = self.last_report.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        if last.is_some_and(|t| now.duration_since(t) < REPORT_EVERY) {
            return false;
        }
        *last = Some(now);
        true
    }

    fn report(&self, what: &str) {
        if self.due() {
            tracing::warn!(
                listener = self.name,
                max_connections = self.limits.max_connections,
                refused_at_bound = self.stats.refused_at_bound.load(Ordering::Relaxed),
                "{what}"
            );
        }
    }

    fn report_error(&self, e: &std::io::Error) {
        if self.due() {
            tracing::warn!(
                listener = self.name,
                error = %e,
                accept_errors = self.stats.accept_errors.load(Ordering::Relaxed),
                "accept failed; backing off"
            );
        }
    }
}

/// Runs `fut` (a handshake) within `limits.handshake`; a miss is counted in
/// `stats` and is an error of kind `TimedOut`.
pub async fn handshake<T>(
    limits: Limits,
    stats: &Stats,
    fut: impl std::future::Future<Output = std::io::Result<T>>,
) -> std::io::Result<T> {
    match tokio::time::timeout(limits.handshake, fut).await {
        Ok(r) => r,
        Err(_) => {
            stats.handshake_timeouts.fetch_add(1, Ordering::Relaxed);
            Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "TLS handshake deadline passed",
            ))
        }
    }
}

/// The listener's connections as a stream (for tonic's
/// `serve_with_incoming`): each item holds its slot for as long as the
/// connection lives.
pub fn incoming(listener: Listener) -> impl futures::Stream<Item = std::io::Result<Held>> {
    futures::stream::unfold(listener, |l| async move {
        let a = l.accept().await;
        Some((Ok(Held::new(a)), l))
    })
}

/// A TCP stream that frees its listener slot when dropped.
#[derive(Debug)]
pub struct Held {
    stream: TcpStream,
    _slot: OwnedSemaphorePermit,
}

impl Held {
    fn new(a: Accepted) -> Self {
        Self {
            stream: a.stream,
            _slot: a.slot,
        }
    }

    /// The socket.
    pub fn get_ref(&self) -> &TcpStream {
        &self.stream
    }
}

impl tonic::transport::server::Connected for Held {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.stream.connect_info()
    }
}

impl tokio::io::AsyncRead for Held {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for Held {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(code: nix::errno::Errno) -> std::io::Error {
        std::io::Error::from_raw_os_error(code as i32)
    }

    #[test]
    fn failures_of_one_connection_are_skipped_and_exhaustion_backs_off() {
        use nix::errno::Errno;
        for e in [
            Errno::ECONNABORTED,
            Errno::EPROTO,
            Errno::EINTR,
            Errno::ECONNRESET,
        ] {
            assert_eq!(classify(&err(e)), AcceptFailure::Connection, "{e}");
        }
        for e in [Errno::EMFILE, Errno::ENFILE, Errno::ENOBUFS, Errno::ENOMEM] {
            assert_eq!(classify(&err(e)), AcceptFailure::Exhausted, "{e}");
        }
        assert_eq!(classify(&err(Errno::EINVAL)), AcceptFailure::Other);
        assert_eq!(
            classify(&std::io::Error::other("no errno")),
            AcceptFailure::Other
        );
    }

    #[test]
    fn backoff_doubles_to_a_second_and_resets() {
        let mut b = Backoff::default();
        let waits: Vec<u128> = (0..10).map(|_| b.after_failure().as_millis()).collect();
        assert_eq!(waits, [5, 10, 20, 40, 80, 160, 320, 640, 1000, 1000]);
        for _ in 0..100 {
            assert_eq!(b.after_failure(), Duration::from_secs(1));
        }
        b.reset();
        assert_eq!(b.after_failure(), Duration::from_millis(5));
    }

    #[tokio::test]
    async fn connections_past_the_bound_are_closed_and_a_freed_slot_is_reused() {
        use tokio::io::AsyncReadExt as _;
        let inner = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = inner.local_addr().unwrap();
        let l = Arc::new(Listener::new(
            inner,
            "test",
            Limits {
                max_connections: 2,
                ..Limits::default()
            },
        ));
        let _c1 = TcpStream::connect(addr).await.unwrap();
        let a1 = l.accept().await;
        let _c2 = TcpStream::connect(addr).await.unwrap();
        let _a2 = l.accept().await;
        let next = tokio::spawn({
            let l = l.clone();
            async move { l.accept().await }
        });
        // The third is accepted and closed at once; the loop goes on.
        let mut c3 = TcpStream::connect(addr).await.unwrap();
        let mut buf = [0u8; 1];
        assert_eq!(c3.read(&mut buf).await.unwrap(), 0, "the third was closed");
        assert_eq!(l.stats().refused_at_bound.load(Ordering::Relaxed), 1);
        // A freed slot takes the next connection.
        drop(a1);
        let mut c4 = TcpStream::connect(addr).await.unwrap();
        let a4 = next.await.unwrap();
        assert_eq!(a4.remote, c4.local_addr().unwrap());
        assert_eq!(l.stats().accepted.load(Ordering::Relaxed), 3);
        drop(a4);
        assert_eq!(c4.read(&mut buf).await.unwrap(), 0);
    }

    #[tokio::test]
    async fn a_handshake_past_its_deadline_is_a_counted_timeout() {
        let stats = Stats::default();
        let limits = Limits {
            handshake: Duration::from_millis(10),
            ..Limits::default()
        };
        let r = handshake(
            limits,
            &stats,
            std::future::pending::<std::io::Result<()>>(),
        )
        .await;
        assert_eq!(r.unwrap_err().kind(), std::io::ErrorKind::TimedOut);
        assert_eq!(stats.handshake_timeouts.load(Ordering::Relaxed), 1);
        assert!(handshake(limits, &stats, async { Ok(1) }).await.is_ok());
    }
}
