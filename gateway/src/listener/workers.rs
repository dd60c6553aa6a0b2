//! The worker threads the public listeners hand connections to.
//!
//! Each worker is a Pingora service of its own, so a runtime of its own
//! (one thread without work stealing), and serves the connections given to
//! it with its own app: the gateway's proxy with its own upstream pool. A
//! connection is handed over once, after `accept`; from then on its reads,
//! its requests and the upstream connections they reuse all stay on its
//! worker's thread, as in nginx's worker processes. Pingora's own no-steal
//! runtime would instead put each connection on a random thread, with every
//! thread sharing one pool and one reactor per thread registering the
//! sockets it accepted: a wake-up of another thread on most requests.
//!
//! A connection goes to the worker with the fewest open, so long-lived
//! connections (HTTP/2 clients, session WebSockets) spread evenly.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
#[cfg(unix)]
use pingora::server::ListenFds;
use pingora::server::ShutdownWatch;
use tokio::runtime::Handle;

/// The workers, as the listeners see them.
pub struct Workers {
    workers: Vec<Worker>,
    started: tokio::sync::watch::Sender<usize>,
}

struct Worker {
    handle: OnceLock<Handle>,
    open: AtomicUsize,
}

/// A connection's place on its worker: dropping it frees the place.
pub struct Placed {
    workers: Arc<Workers>,
    index: usize,
}

impl Placed {
    /// The worker's index (which of the listener's apps serves it).
    pub fn index(&self) -> usize {
        self.index
    }
}

impl Drop for Placed {
    fn drop(&mut self) {
        self.workers.workers[self.index]
            .open
            .fetch_sub(1, Ordering::Relaxed);
    }
}

impl Workers {
    /// `count` workers (at least one), none started yet.
    pub fn new(count: usize) -> Arc<Self> {
        Arc::new(Self {
            workers: (0..count.max(1))
                .map(|_| Worker {
                    handle: OnceLock::new(),
                    open: AtomicUsize::new(0),
                })
                .collect(),
            started: tokio::sync::watch::Sender::new(0),
        })
    }

    /// How many there are.
    pub fn len(&self) -> usize {
        self.workers.len()
    }

    /// The Pingora service that runs worker `index` on `threads` threads
    /// (the server's when `None`).
    pub fn service(self: &Arc<Self>, index: usize, threads: Option<usize>) -> WorkerService {
        WorkerService {
            name: format!("worker-{index}"),
            workers: self.clone(),
            index,
            threads,
        }
    }

    /// Waits until every worker runs.
    pub async fn all_started(&self) {
        let total = self.workers.len();
        let mut started = self.started.subscribe();
        // The sender lives in `self`: the watch cannot close meanwhile.
        let _ = started.wait_for(|n| *n >= total).await;
    }

    /// Places a connection on the worker with the fewest open (the lowest
    /// index among equals), returning the place and that worker's runtime;
    /// `None` until every worker runs ([`Self::all_started`]).
    pub fn place(self: &Arc<Self>) -> Option<(Placed, Handle)> {
        let index = least_loaded(self.workers.iter().map(|w| w.open.load(Ordering::Relaxed)))?;
        let handle = self.workers[index].handle.get()?.clone();
        self.workers[index].open.fetch_add(1, Ordering::Relaxed);
        Some((
            Placed {
                workers: self.clone(),
                index,
            },
            handle,
        ))
    }
}

/// The index of the smallest count (the first among equals).
fn least_loaded(open: impl Iterator<Item = usize>) -> Option<usize> {
    open.enumerate()
        .min_by_key(|&(i, n)| (n, i))
        .map(|(i, _)| i)
}

/// One worker's service: it lends its runtime to the listeners (which
/// spawn each connection given to it there) until the server stops.
pub struct WorkerService {
    name: String,
    workers: Arc<Workers>,
    index: usize,
    threads: Option<usize>,
}

#[async_trait]
impl pingora::services::Service for WorkerService {
    async fn start_service(
        &mut self,
        #[cfg(unix)] _fds: Option<ListenFds>,
        mut shutdown: ShutdownWatch,
        _listeners_per_fd: usize,
    ) {
        if self.workers.workers[self.index]
            .handle
            .set(Handle::current())
            .is_ok()
        {
            self.workers.started.send_modify(|n| *n += 1);
        }
        // The runtime outlives this call (Pingora keeps it until the
        // server stops); waiting keeps the service's state alive with it.
        while !*shutdown.borrow() {
            if shutdown.changed().await.is_err() {
                break;
            }
        }
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn threads(&self) -> Option<usize> {
        self.threads
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_least_loaded_worker_is_picked_the_first_among_equals() {
        assert_eq!(least_loaded(std::iter::empty()), None);
        assert_eq!(least_loaded([0].into_iter()), Some(0));
        assert_eq!(least_loaded([3].into_iter()), Some(0));
        assert_eq!(least_loaded([0, 0].into_iter()), Some(0));
        assert_eq!(least_loaded([1, 0].into_iter()), Some(1));
        assert_eq!(least_loaded([2, 1, 1].into_iter()), Some(1));
        assert_eq!(least_loaded([5, 7, 4, 4].into_iter()), Some(2));
    }

    #[tokio::test]
    async fn connections_are_placed_evenly_once_every_worker_runs() {
        let workers = Workers::new(2);
        assert!(workers.place().is_none(), "no worker runs yet");
        // Worker 0 runs; worker 1 does not yet.
        let _ = workers.workers[0].handle.set(Handle::current());
        workers.started.send_modify(|n| *n += 1);
        let waiting = tokio::spawn({
            let workers = workers.clone();
            async move { workers.all_started().await }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        let _ = workers.workers[1].handle.set(Handle::current());
        workers.started.send_modify(|n| *n += 1);
        waiting.await.unwrap();

        let placed: Vec<Placed> = (0..5).map(|_| workers.place().unwrap().0).collect();
        let on = |w: usize| placed.iter().filter(|p| p.index() == w).count();
        assert_eq!((on(0), on(1)), (3, 2));
        // Closing worker 0's connections sends the next ones there.
        let (on_zero, rest): (Vec<Placed>, Vec<Placed>) =
            placed.into_iter().partition(|p| p.index() == 0);
        drop(on_zero);
        let next: Vec<usize> = (0..3).map(|_| workers.place().unwrap().0.index()).collect();
        // Each placement is dropped at once, so worker 0 stays the emptier.
        assert_eq!(next, [0, 0, 0]);
        assert_eq!(rest.len(), 2);
        assert_eq!(workers.workers[1].open.load(Ordering::Relaxed), 2);
        drop(rest);
        assert_eq!(workers.workers[1].open.load(Ordering::Relaxed), 0);
    }
}
