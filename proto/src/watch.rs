//! The ownership watch protocol, both ends.
//!
//! [`Publisher`] holds one source's table (the control plane's assignments or
//! one runtimed's registrations) and serves `OwnershipTable/Watch`: a snapshot
//! framed by begin/end markers, then live upserts and deletes, plus heartbeats.
//! Live events go through a bounded broadcast channel; a consumer that falls
//! behind is cut off and re-snapshots, so nothing is buffered without bound.
//!
//! [`watch_source`] is the consumer: it connects, turns the framed stream into
//! [`SourceUpdate`]s (an atomic snapshot replace, then deltas), reports loss,
//! and reconnects with capped exponential backoff.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::Stream;
use tokio::sync::broadcast;
use tonic::transport::Endpoint;
use tonic::{Request, Response, Status};

use crate::ownership::v1::ownership_table_client::OwnershipTableClient;
use crate::ownership::v1::ownership_table_server::{OwnershipTable, OwnershipTableServer};
use crate::ownership::v1::{
    Deleted, Heartbeat, OwnershipEntry, SnapshotBegin, SnapshotEnd, SourceKind, WatchEvent,
    WatchRequest, watch_event::Event,
};

/// How often a publisher sends a heartbeat on an idle stream.
pub const HEARTBEAT_INTERVAL: Duration = Duration::from_secs(2);
/// A consumer declares a stream lost after this long without any event.
pub const STREAM_IDLE_TIMEOUT: Duration = Duration::from_secs(7);
/// Live events a slow consumer may lag behind before it is cut off.
pub const DEFAULT_LAG_CAPACITY: usize = 4096;

struct Table {
    entries: BTreeMap<String, OwnershipEntry>,
    revision: u64,
}

/// One source's ownership table and its live event fan-out.
#[derive(Clone)]
pub struct Publisher {
    table: Arc<Mutex<Table>>,
    tx: broadcast::Sender<WatchEvent>,
    instance_id: Arc<str>,
    kind: SourceKind,
}

impl Publisher {
    /// Creates an empty table for a source incarnation.
    pub fn new(kind: SourceKind, instance_id: impl Into<String>, lag_capacity: usize) -> Self {
        let (tx, _) = broadcast::channel(lag_capacity.max(1));
        Self {
            table: Arc::new(Mutex::new(Table {
                entries: BTreeMap::new(),
                revision: 0,
            })),
            tx,
            instance_id: instance_id.into().into(),
            kind,
        }
    }

    /// This source incarnation's id.
    pub fn instance_id(&self) -> &str {
        &self.instance_id
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        // A poisoned lock only means another thread panicked mid-update of a
        // map of plain values; the data is still consistent per entry.
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn event(&self, revision: u64, event: Event) -> WatchEvent {
        WatchEvent {
            source_instance_id: self.instance_id.to_string(),
            source_kind: self.kind as i32,
            revision,
            event: Some(event),
        }
    }

    /// Inserts or replaces an entry; unchanged entries emit nothing.
    pub fn upsert(&self, entry: OwnershipEntry) {
        let mut t = self.lock();
        if t.entries.get(&entry.run_uid) == Some(&entry) {
            return;
        }
        t.revision += 1;
        let ev = self.event(t.revision, Event::Upsert(entry.clone()));
        t.entries.insert(entry.run_uid.clone(), entry);
        // No receivers is fine: the next watcher gets a snapshot.
        let _ = self.tx.send(ev);
    }

    /// Removes an entry; absent entries emit nothing.
    pub fn delete(&self, run_uid: &str) {
        let mut t = self.lock();
        if t.entries.remove(run_uid).is_none() {
            return;
        }
        t.revision += 1;
        let ev = self.event(
            t.revision,
            Event::Delete(Deleted {
                run_uid: run_uid.to_owned(),
            }),
        );
        let _ = self.tx.send(ev);
    }

    /// Makes the table equal to `entries`: changed entries are upserted,
    /// missing ones deleted, unchanged ones emit nothing.
    pub fn replace_all(&self, entries: Vec<OwnershipEntry>) {
        let keep: std::collections::BTreeSet<String> =
            entries.iter().map(|e| e.run_uid.clone()).collect();
        let gone: Vec<String> = self
            .lock()
            .entries
            .keys()
            .filter(|uid| !keep.contains(*uid))
            .cloned()
            .collect();
        for uid in gone {
            self.delete(&uid);
        }
        for e in entries {
            self.upsert(e);
        }
    }

    /// Current entries, ordered by Run UID.
    pub fn entries(&self) -> Vec<OwnershipEntry> {
        self.lock().entries.values().cloned().collect()
    }

    /// Snapshot events plus a receiver positioned right after them; taken
    /// under the table lock so no live event can fall between the two.
    fn subscribe(&self) -> (Vec<WatchEvent>, broadcast::Receiver<WatchEvent>) {
        let t = self.lock();
        let rx = self.tx.subscribe();
        let rev = t.revision;
        let mut events = Vec::with_capacity(t.entries.len() + 2);
        events.push(self.event(rev, Event::SnapshotBegin(SnapshotBegin {})));
        events.extend(
            t.entries
                .values()
                .map(|e| self.event(rev, Event::Upsert(e.clone()))),
        );
        events.push(self.event(rev, Event::SnapshotEnd(SnapshotEnd {})));
        (events, rx)
    }

    /// The tonic service serving this table.
    pub fn service(&self) -> OwnershipTableServer<Publisher> {
        OwnershipTableServer::new(self.clone())
    }
}

type WatchStream = Pin<Box<dyn Stream<Item = Result<WatchEvent, Status>> + Send>>;

#[tonic::async_trait]
impl OwnershipTable for Publisher {
    type WatchStream = WatchStream;

    async fn watch(
        &self,
        request: Request<WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let client = request.into_inner().client;
        tracing::debug!(client = %client, "ownership watch started");
        let (snapshot, mut rx) = self.subscribe();
        let this = self.clone();
        let (tx, out) = tokio::sync::mpsc::channel::<Result<WatchEvent, Status>>(64);
        tokio::spawn(async move {
            for ev in snapshot {
                if tx.send(Ok(ev)).await.is_err() {
                    return;
                }
            }
            let mut beat = tokio::time::interval(HEARTBEAT_INTERVAL);
            beat.tick().await;
            loop {
                let next = tokio::select! {
                    ev = rx.recv() => ev,
                    _ = beat.tick() => {
                        let rev = this.lock().revision;
                        Ok(this.event(rev, Event::Heartbeat(Heartbeat {})))
                    }
                    _ = tx.closed() => return,
                };
                match next {
                    Ok(ev) => {
                        if tx.send(Ok(ev)).await.is_err() {
                            return;
                        }
                    }
                    Err(broadcast::error::RecvError::Lagged(n)) => {
                        tracing::warn!(client = %client, lagged = n, "cutting off slow ownership watcher");
                        let _ = tx
                            .send(Err(Status::resource_exhausted(
                                "watcher fell behind; watch again for a fresh snapshot",
                            )))
                            .await;
                        return;
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                }
            }
        });
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(out),
        )))
    }
}

/// What a consumer learns from one source.
#[derive(Debug, Clone, PartialEq)]
pub enum SourceUpdate {
    /// A complete table replacing everything previously known from the source.
    Snapshot {
        /// Incarnation id of the source.
        instance_id: String,
        /// All entries.
        entries: Vec<OwnershipEntry>,
    },
    /// One entry added or changed (boxed: updates wait in channels, and an
    /// entry is ten times the size of the other variants).
    Upsert(Box<OwnershipEntry>),
    /// One entry removed.
    Delete(String),
    /// The stream was lost; the consumer's table for this source is now
    /// only as good as its staleness window.
    Lost,
}

/// Assembles framed watch events into [`SourceUpdate`]s. Pure.
#[derive(Debug, Default)]
pub struct Framer {
    staging: Option<Vec<OwnershipEntry>>,
    synced: bool,
}

impl Framer {
    /// Feeds one event; returns the update it completes, if any.
    pub fn push(&mut self, ev: WatchEvent) -> Result<Option<SourceUpdate>, &'static str> {
        match ev.event {
            Some(Event::SnapshotBegin(_)) => {
                self.staging = Some(Vec::new());
                Ok(None)
            }
            Some(Event::Upsert(e)) => match self.staging.as_mut() {
                Some(s) => {
                    s.push(e);
                    Ok(None)
                }
                None if self.synced => Ok(Some(SourceUpdate::Upsert(Box::new(e)))),
                None => Err("upsert before snapshot"),
            },
            Some(Event::Delete(d)) if self.staging.is_none() && self.synced => {
                Ok(Some(SourceUpdate::Delete(d.run_uid)))
            }
            Some(Event::Delete(_)) => Err("delete before or inside snapshot"),
            Some(Event::SnapshotEnd(_)) => match self.staging.take() {
                Some(entries) => {
                    self.synced = true;
                    Ok(Some(SourceUpdate::Snapshot {
                        instance_id: ev.source_instance_id,
                        entries,
                    }))
                }
                None => Err("snapshot end without begin"),
            },
            Some(Event::Heartbeat(_)) | None => Ok(None),
        }
    }
}

/// Watches one source until `sink` returns `false`, reconnecting with capped
/// exponential backoff and re-snapshotting after every loss.
pub async fn watch_source<F>(endpoint: Endpoint, client: String, sink: F)
where
    F: FnMut(SourceUpdate) -> bool + Send,
{
    watch_source_with(move || Ok(endpoint.clone()), client, sink).await
}

/// [`watch_source`] with the endpoint made anew for every connection (so a
/// rotated client certificate on disk is used from the next reconnect on);
/// a `make` error counts as a lost connection.
pub async fn watch_source_with<M, F>(mut make: M, client: String, mut sink: F)
where
    M: FnMut() -> Result<Endpoint, String> + Send,
    F: FnMut(SourceUpdate) -> bool + Send,
{
    let mut backoff = Duration::from_millis(50);
    let max_backoff = Duration::from_secs(2);
    loop {
        let mut synced = false;
        match make() {
            Ok(endpoint) => match watch_once(&endpoint, &client, &mut sink, &mut synced).await {
                Ok(false) => return,
                Ok(true) => {}
                Err(e) => {
                    tracing::debug!(uri = %endpoint.uri(), error = %e, "ownership watch lost");
                }
            },
            Err(e) => tracing::warn!(error = %e, "ownership watch endpoint not built"),
        }
        if !sink(SourceUpdate::Lost) {
            return;
        }
        if synced {
            backoff = Duration::from_millis(50);
        }
        let jitter = rand::random::<u64>() % (backoff.as_millis() as u64 / 2 + 1);
        tokio::time::sleep(backoff + Duration::from_millis(jitter)).await;
        backoff = (backoff * 2).min(max_backoff);
    }
}

/// One connection; `Ok(false)` when the sink asked to stop.
async fn watch_once<F>(
    endpoint: &Endpoint,
    client: &str,
    sink: &mut F,
    synced: &mut bool,
) -> Result<bool, Box<dyn std::error::Error + Send + Sync>>
where
    F: FnMut(SourceUpdate) -> bool + Send,
{
    let channel = endpoint.connect().await?;
    let mut stream = OwnershipTableClient::new(channel)
        .watch(WatchRequest {
            client: client.to_owned(),
        })
        .await?
        .into_inner();
    let mut framer = Framer::default();
    loop {
        let next = tokio::time::timeout(STREAM_IDLE_TIMEOUT, stream.message()).await;
        let ev = match next {
            Err(_) => return Err("no event within the idle timeout".into()),
            Ok(Err(status)) => return Err(status.into()),
            Ok(Ok(None)) => return Err("stream ended".into()),
            Ok(Ok(Some(ev))) => ev,
        };
        if let Some(update) = framer.push(ev)? {
            *synced = true;
            if !sink(update) {
                return Ok(false);
            }
        }
    }
}

#[cfg(test)]
mod tests;
