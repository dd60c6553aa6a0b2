//! The open connections of the gateway's listeners, by their two ends: what
//! the accept loop's deadlines need to know of their requests.
//!
//! The accept loop registers a connection after its handshake and removes
//! it when it ends ([`Registered`]); the proxy's request filter calls
//! [`Connections::request`] for every request and holds the returned
//! [`InFlight`] until the request ends, and the connection's reads and
//! writes stamp it ([`Connection::touch`]). The first request releases the
//! connection from its first-request deadline; the requests in flight, the
//! end of the last one and the last bytes read or written are its idle
//! clock ([`idle_for`]). Bounded by the listeners' connection bounds.
//!
//! A request costs a lookup in one mutex-guarded map (uncontended: one
//! worker thread by default) and two atomic updates; a read or a write, one
//! clock read and an atomic store. Nothing here wakes a task per request:
//! the idle check runs on tokio's timer at most once per idle timeout.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

// Looked up on every request; seeded per process, and the map is bounded by
// the listeners' connection bounds.
use foldhash::HashMap;
use tokio::sync::Notify;
use tokio::time::Instant;

/// The open connections, by their two ends.
#[derive(Debug, Default)]
pub struct Connections {
    open: Mutex<HashMap<ConnKey, Arc<Connection>>>,
}

/// A connection's identity while it is open: its two ends.
type ConnKey = (SocketAddr, SocketAddr);

/// What the accept loop, the reads and the requests of one connection
/// share.
#[derive(Debug)]
pub(super) struct Connection {
    /// Signalled by the first request (a permit if nobody waits yet).
    pub(super) spoke: Notify,
    /// Requests (HTTP/2 streams, HTTP/1.1 requests) in flight.
    in_flight: AtomicUsize,
    /// The latest of: the registration, the end of a request, bytes read
    /// or written; in milliseconds since `since`.
    active_ms: AtomicU64,
    /// The latest of: the registration, the end of a request; in
    /// milliseconds since `since`.
    ended_ms: AtomicU64,
    since: Instant,
}

impl Connection {
    fn new() -> Self {
        Self {
            spoke: Notify::new(),
            in_flight: AtomicUsize::new(0),
            active_ms: AtomicU64::new(0),
            ended_ms: AtomicU64::new(0),
            since: Instant::now(),
        }
    }

    /// Marks the connection active now: the end of a request, and every
    /// read or write that moves bytes. Bytes arriving may be a request on
    /// its way before any filter sees it (an HTTP/1.1 header still coming,
    /// an HTTP/2 stream not yet handed to the proxy); bytes leaving may be
    /// an answer written after its request stopped counting (the metrics
    /// endpoint's body, written by Pingora after the handler returns). A
    /// peer that stops reading stops the writes, and so the stamps.
    pub(super) fn touch(&self) {
        self.active_ms.fetch_max(self.now_ms(), Ordering::AcqRel);
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.since.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// When the connection is idle from, if nothing is in flight.
    fn idle_since(&self) -> Option<Instant> {
        self.quiet_since(&self.active_ms)
    }

    /// When the connection's last request ended (or it was registered), if
    /// nothing is in flight; bytes moved since do not count.
    fn ended_since(&self) -> Option<Instant> {
        self.quiet_since(&self.ended_ms)
    }

    /// `stamp` as an instant, if nothing is in flight.
    fn quiet_since(&self, stamp: &AtomicU64) -> Option<Instant> {
        // The count, the stamp, the count. A request that ends before the
        // first load stamped before it was uncounted, so the stamp load sees
        // its end; one that begins before the second load read its bytes, and
        // so moved the stamp, before it was counted. With the stamp first, a
        // request ending between the loads would leave an old stamp beside a
        // count of zero, and a long request would be cut as it finished.
        let idle = || self.in_flight.load(Ordering::Acquire) == 0;
        if !idle() {
            return None;
        }
        let at = stamp.load(Ordering::Acquire);
        idle().then(|| self.since + Duration::from_millis(at))
    }
}

/// One request in flight on a registered connection; its end when dropped.
#[derive(Debug)]
pub struct InFlight(Arc<Connection>);

impl Drop for InFlight {
    fn drop(&mut self) {
        let now = self.0.now_ms();
        self.0.active_ms.fetch_max(now, Ordering::AcqRel);
        self.0.ended_ms.fetch_max(now, Ordering::AcqRel);
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A registration, removed when dropped (whatever ended the connection's
/// task, a panic included).
pub(super) struct Registered<'a> {
    open: &'a Connections,
    key: ConnKey,
    pub(super) conn: Arc<Connection>,
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        self.open.forget(&self.key, &self.conn);
    }
}

impl Connections {
    /// Registers the connection `peer` → `local` until the returned
    /// registration is dropped.
    pub(super) fn register(&self, peer: SocketAddr, local: SocketAddr) -> Registered<'_> {
        let conn = Arc::new(Connection::new());
        self.lock().insert((peer, local), conn.clone());
        Registered {
            open: self,
            key: (peer, local),
            conn,
        }
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

/// Returns once `conn` has had no request in flight and nothing read or
/// written for `idle`, checking with tokio's timer at most once per `idle`.
pub(super) async fn idle_for(conn: &Connection, idle: Duration) {
    quiet_for(idle, || conn.idle_since()).await;
}

/// Returns once `conn` has had no request in flight for `limit` since its
/// last request ended (or its registration), whatever bytes it read or
/// wrote meanwhile: the bound on the time between two requests, where a
/// header trickled a byte at a time (HTTP/1.1) or PINGs with no stream
/// (HTTP/2) would otherwise keep the idle clock running for ever (Pingora
/// times each read, not the header).
pub(super) async fn between_requests_for(conn: &Connection, limit: Duration) {
    quiet_for(limit, || conn.ended_since()).await;
}

/// Returns once `since()` (`None`: busy) is at least `limit` ago, checking
/// with tokio's timer at most once per `limit`.
async fn quiet_for(limit: Duration, since: impl Fn() -> Option<Instant>) {
    let mut deadline = Instant::now() + limit;
    loop {
        tokio::time::sleep_until(deadline).await;
        let now = Instant::now();
        match since() {
            Some(since) if now.saturating_duration_since(since) >= limit => return,
            Some(since) => deadline = since + limit,
            None => deadline = now + limit,
        }
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
        let a = open.register(addr(1000), addr(443));
        let b = open.register(addr(1001), addr(443));
        // Another listener's address, or an unknown connection: nothing.
        assert!(open.request(addr(1000), addr(80)).is_none());
        assert!(a.conn.idle_since().is_some());
        let first = open.request(addr(1000), addr(443)).unwrap();
        let second = open.request(addr(1000), addr(443)).unwrap();
        assert_eq!(a.conn.in_flight.load(Ordering::Acquire), 2);
        assert!(
            a.conn.idle_since().is_none(),
            "busy while a request is in flight"
        );
        assert!(
            b.conn.idle_since().is_some(),
            "the other connection is untouched"
        );
        drop(first);
        assert!(a.conn.idle_since().is_none());
        std::thread::sleep(Duration::from_millis(5));
        drop(second);
        let since = a.conn.idle_since().unwrap();
        assert!(
            since >= a.conn.since + Duration::from_millis(5),
            "idle from the last end"
        );
        drop(a);
        assert!(open.request(addr(1000), addr(443)).is_none());
        assert_eq!(open.lock().len(), 1);
    }

    #[test]
    fn a_connections_end_leaves_a_newer_one_with_the_same_ends_registered() {
        let open = Connections::default();
        let old = open.register(addr(1001), addr(443));
        let newer = open.register(addr(1001), addr(443));
        drop(old);
        let r = open.request(addr(1001), addr(443)).unwrap();
        assert!(Arc::ptr_eq(&r.0, &newer.conn));
        drop(r);
        drop(newer);
        assert!(open.lock().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn the_first_request_releases_the_deadline_even_before_it_is_awaited() {
        let open = Connections::default();
        let c = open.register(addr(1000), addr(443));
        let _r = open.request(addr(1000), addr(443)).unwrap();
        // The permit waits for the accept loop.
        tokio::time::timeout(Duration::from_secs(1), c.conn.spoke.notified())
            .await
            .unwrap();
        let silent = open.register(addr(1001), addr(443));
        assert!(
            tokio::time::timeout(Duration::from_secs(1), silent.conn.spoke.notified())
                .await
                .is_err()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn idle_means_nothing_in_flight_and_nothing_read_for_the_whole_timeout() {
        let open = Connections::default();
        let c = open.register(addr(1000), addr(443));
        let idle = Duration::from_secs(60);
        // A request in flight across several timeouts keeps it open ...
        let r = open.request(addr(1000), addr(443)).unwrap();
        let watch = idle_for(&c.conn, idle);
        tokio::pin!(watch);
        assert!(
            tokio::time::timeout(Duration::from_secs(150), &mut watch)
                .await
                .is_err()
        );
        // ... and its end starts a whole idle period ...
        drop(r);
        let ended = Instant::now();
        // ... which bytes read in the meantime start again (a request on
        // its way, not yet counted).
        tokio::time::sleep(Duration::from_secs(30)).await;
        c.conn.touch();
        let read = Instant::now();
        watch.await;
        let closed = Instant::now();
        assert_eq!(read - ended, Duration::from_secs(30));
        assert_eq!(
            closed - read,
            idle,
            "closed one timeout after the last read"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn between_requests_bytes_do_not_count_only_request_ends_do() {
        let open = Connections::default();
        let c = open.register(addr(1000), addr(80));
        let limit = Duration::from_secs(70);
        // A request in flight across several limits keeps it open.
        let r = open.request(addr(1000), addr(80)).unwrap();
        let watch = between_requests_for(&c.conn, limit);
        tokio::pin!(watch);
        assert!(
            tokio::time::timeout(Duration::from_secs(200), &mut watch)
                .await
                .is_err()
        );
        drop(r);
        let ended = Instant::now();
        // A byte every 10 s (a header trickling in) moves nothing: the
        // limit runs from the request's end.
        let trickle = async {
            loop {
                tokio::time::sleep(Duration::from_secs(10)).await;
                c.conn.touch();
            }
        };
        tokio::select! {
            () = &mut watch => {}
            () = trickle => unreachable!(),
        }
        assert_eq!(Instant::now() - ended, limit);
        // A request counted in time restarts the limit from its own end.
        let watch = between_requests_for(&c.conn, limit);
        tokio::pin!(watch);
        tokio::time::sleep(Duration::from_secs(60)).await;
        drop(open.request(addr(1000), addr(80)).unwrap());
        let second = Instant::now();
        watch.await;
        assert_eq!(Instant::now() - second, limit);
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_still_being_written_after_its_request_ended_keeps_the_connection() {
        let open = Connections::default();
        let c = open.register(addr(1000), addr(443));
        let idle = Duration::from_secs(60);
        let watch = idle_for(&c.conn, idle);
        tokio::pin!(watch);
        // A body leaving in pieces, each within the timeout, to a peer that
        // reads slowly: the connection stays however long the whole takes.
        for _ in 0..4 {
            tokio::time::sleep(Duration::from_secs(45)).await;
            c.conn.touch();
        }
        let wrote = Instant::now();
        assert!(
            tokio::time::timeout(Duration::from_secs(59), &mut watch)
                .await
                .is_err()
        );
        // The peer stopped reading, so the writes stopped: one timeout later
        // it is closed.
        watch.await;
        assert_eq!(Instant::now() - wrote, idle);
    }
}
