//! Watching a workspace directory (inotify, through the `notify` crate):
//! what is created, written, removed, renamed or changes its metadata
//! beneath it, as workspace-relative paths, until the caller goes away or
//! the session closes. The kernel's events go into a bounded queue; a
//! reader that falls behind loses the newest ones, counted and reported,
//! never the server's memory. Symlinks are not followed: a watch never
//! reaches outside the workspace.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use kruntimes_proto::runtime::v1 as pb;
use notify::event::{EventKind, ModifyKind, RenameMode};
use notify::{RecursiveMode, Watcher as _};
use tokio::sync::mpsc;
use tonic::Status;

use super::{Session, path};
use crate::error::{Error, Result};

/// Watches a session may hold at once.
pub const MAX_WATCHES: usize = 16;
/// Events queued for one watch's reader.
pub const QUEUE: usize = 1024;
/// How soon a count of lost events is reported when nothing else comes.
const LOST_EVERY: Duration = Duration::from_millis(500);

/// The change an event of the kernel's is, if it is one a client sees.
/// Pure.
pub fn change(kind: &EventKind) -> Option<pb::FileChange> {
    match kind {
        EventKind::Create(_) => Some(pb::FileChange::Create),
        EventKind::Remove(_) => Some(pb::FileChange::Remove),
        // A rename comes as `From` (the old name) and `To` (the new one),
        // and again as `Both` with the two: that one would say it twice.
        EventKind::Modify(ModifyKind::Name(RenameMode::Both)) => None,
        EventKind::Modify(ModifyKind::Name(_)) => Some(pb::FileChange::Rename),
        EventKind::Modify(ModifyKind::Metadata(_)) => Some(pb::FileChange::Chmod),
        EventKind::Modify(_) => Some(pb::FileChange::Write),
        EventKind::Access(_) | EventKind::Any | EventKind::Other => None,
    }
}

/// `path` relative to the workspace `root`, `/`-separated, if beneath it.
/// Pure.
pub fn relative(root: &Path, path: &Path) -> Option<String> {
    let rel = path.strip_prefix(root).ok()?;
    let parts: Option<Vec<&str>> = rel.components().map(|c| c.as_os_str().to_str()).collect();
    Some(parts?.join("/"))
}

/// The error a watch that could not start answers with: the kernel's
/// bounds (inotify instances, `max_user_watches`) are exhausted, a
/// directory that went meanwhile is not found, anything else internal.
fn watch_error(rel: &str, e: notify::Error) -> Error {
    use notify::ErrorKind as K;
    let exhausted = || Error::Exhausted(format!("watch {rel}: {e} (the kernel's inotify limits)"));
    match &e.kind {
        K::MaxFilesWatch => exhausted(),
        K::PathNotFound => Error::NotFound(format!("directory {rel}")),
        K::Io(io)
            if matches!(
                io.raw_os_error(),
                Some(nix::libc::ENOSPC | nix::libc::EMFILE)
            ) =>
        {
            exhausted()
        }
        K::Io(io) if io.kind() == std::io::ErrorKind::NotFound => {
            Error::NotFound(format!("directory {rel}"))
        }
        _ => Error::Io(std::io::Error::other(format!("watch {rel}: {e}"))),
    }
}

/// Queues one event for the reader, or counts it lost when the queue is
/// full (the reader fell behind) or gone.
fn offer(
    tx: &mpsc::Sender<(pb::FileChange, PathBuf)>,
    lost: &AtomicU64,
    change: pb::FileChange,
    path: PathBuf,
) {
    if tx.try_send((change, path)).is_err() {
        lost.fetch_add(1, Ordering::Relaxed);
    }
}

/// Decrements the session's watch count when the watch ends.
struct Held<'a>(&'a AtomicUsize);

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Starts watching `rel` in `session`; events go to `events` until it is
/// closed or the session closes.
pub fn start(
    session: &Arc<Session>,
    rel: &str,
    recursive: bool,
    events: mpsc::Sender<Result<pb::WatchEvent, Status>>,
) -> Result<()> {
    let root = session.root().to_path_buf();
    let resolved =
        path::resolve(&root, rel, true).map_err(|e| Error::Invalid(format!("{rel}: {e}")))?;
    let dir = match resolved.path.canonicalize() {
        Ok(d) if d.starts_with(&root) && d.is_dir() => d,
        Ok(d) if d.starts_with(&root) => {
            return Err(Error::Conflict(format!("{rel} is not a directory")));
        }
        Ok(_) => {
            return Err(Error::Invalid(format!(
                "{rel}: path resolves outside the workspace"
            )));
        }
        Err(_) => return Err(Error::NotFound(format!("directory {rel}"))),
    };
    if session.watches.fetch_add(1, Ordering::AcqRel) >= MAX_WATCHES {
        session.watches.fetch_sub(1, Ordering::AcqRel);
        return Err(Error::Exhausted(format!(
            "{MAX_WATCHES} watches are already open in this session"
        )));
    }
    let (tx, rx) = mpsc::channel::<(pb::FileChange, PathBuf)>(QUEUE);
    let lost = Arc::new(AtomicU64::new(0));
    let dropped = lost.clone();
    let watcher = notify::RecommendedWatcher::new(
        move |res: notify::Result<notify::Event>| {
            // An error, or the kernel's queue overflowing (a rescan
            // flag): events were lost, how many is unknown — at least one.
            let event = match res {
                Ok(e) if e.need_rescan() => {
                    dropped.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                Ok(e) => e,
                Err(_) => {
                    dropped.fetch_add(1, Ordering::Relaxed);
                    return;
                }
            };
            let Some(c) = change(&event.kind) else { return };
            for p in event.paths {
                offer(&tx, &dropped, c, p);
            }
        },
        notify::Config::default().with_follow_symlinks(false),
    );
    let mut watcher = match watcher {
        Ok(w) => w,
        Err(e) => {
            session.watches.fetch_sub(1, Ordering::AcqRel);
            return Err(watch_error(rel, e));
        }
    };
    let mode = if recursive {
        RecursiveMode::Recursive
    } else {
        RecursiveMode::NonRecursive
    };
    if let Err(e) = watcher.watch(&dir, mode) {
        session.watches.fetch_sub(1, Ordering::AcqRel);
        return Err(watch_error(rel, e));
    }
    let task = tokio::spawn(forward(session.clone(), watcher, rx, lost, events));
    session.track(task);
    Ok(())
}

fn file_event(change: pb::FileChange, path: String) -> pb::WatchEvent {
    pb::WatchEvent {
        event: Some(pb::watch_event::Event::File(pb::FileEvent {
            change: change as i32,
            path,
        })),
    }
}

fn lost_event(n: u64) -> pb::WatchEvent {
    pb::WatchEvent {
        event: Some(pb::watch_event::Event::Lost(n)),
    }
}

/// Sends `event`, unless the session closes first: a reader that stopped
/// reading never holds a closing session up. `false` when it was not sent.
async fn send(
    events: &mpsc::Sender<Result<pb::WatchEvent, Status>>,
    closing: &mut tokio::sync::watch::Receiver<bool>,
    event: pb::WatchEvent,
) -> bool {
    tokio::select! {
        r = events.send(Ok(event)) => r.is_ok(),
        _ = closing.wait_for(|c| *c) => false,
    }
}

/// Passes the watch's events on until the reader or the session goes.
async fn forward(
    session: Arc<Session>,
    watcher: notify::RecommendedWatcher,
    mut rx: mpsc::Receiver<(pb::FileChange, PathBuf)>,
    lost: Arc<AtomicU64>,
    events: mpsc::Sender<Result<pb::WatchEvent, Status>>,
) {
    let _held = Held(&session.watches);
    let _watcher = watcher;
    let root = session.root().to_path_buf();
    let mut closing = session.closing();
    let ready = pb::WatchEvent {
        event: Some(pb::watch_event::Event::Ready(true)),
    };
    if !send(&events, &mut closing, ready).await {
        return;
    }
    let mut tick = tokio::time::interval(LOST_EVERY);
    loop {
        let next = tokio::select! {
            e = rx.recv() => match e {
                Some(e) => Some(e),
                None => return,
            },
            _ = tick.tick() => None,
            _ = closing.wait_for(|c| *c) => return,
            () = events.closed() => return,
        };
        let n = lost.swap(0, Ordering::Relaxed);
        if n > 0 && !send(&events, &mut closing, lost_event(n)).await {
            return;
        }
        if let Some((change, p)) = next
            && let Some(rel) = relative(&root, &p)
            && !send(&events, &mut closing, file_event(change, rel)).await
        {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use notify::event::{CreateKind, DataChange, MetadataKind, RemoveKind};

    use super::*;

    #[test]
    fn kernel_events_become_the_five_changes_a_client_sees() {
        let cases = [
            (
                EventKind::Create(CreateKind::File),
                Some(pb::FileChange::Create),
            ),
            (
                EventKind::Create(CreateKind::Folder),
                Some(pb::FileChange::Create),
            ),
            (
                EventKind::Modify(ModifyKind::Data(DataChange::Any)),
                Some(pb::FileChange::Write),
            ),
            (
                EventKind::Modify(ModifyKind::Any),
                Some(pb::FileChange::Write),
            ),
            (
                EventKind::Modify(ModifyKind::Name(RenameMode::From)),
                Some(pb::FileChange::Rename),
            ),
            (
                EventKind::Modify(ModifyKind::Metadata(MetadataKind::Permissions)),
                Some(pb::FileChange::Chmod),
            ),
            (
                EventKind::Remove(RemoveKind::File),
                Some(pb::FileChange::Remove),
            ),
            (EventKind::Access(notify::event::AccessKind::Any), None),
            (EventKind::Other, None),
        ];
        for (kind, want) in cases {
            assert_eq!(change(&kind), want, "{kind:?}");
        }
    }

    #[test]
    fn a_reader_that_falls_behind_loses_events_past_the_queue_counted() {
        let (tx, mut rx) = mpsc::channel(QUEUE);
        let lost = AtomicU64::new(0);
        for i in 0..QUEUE + 500 {
            offer(
                &tx,
                &lost,
                pb::FileChange::Write,
                PathBuf::from(format!("/w/{i}")),
            );
        }
        assert_eq!(lost.load(Ordering::Relaxed), 500);
        let mut queued = 0;
        while rx.try_recv().is_ok() {
            queued += 1;
        }
        assert_eq!(queued, QUEUE);
        // Room again: nothing more is lost.
        offer(&tx, &lost, pb::FileChange::Write, PathBuf::from("/w/x"));
        assert_eq!(lost.load(Ordering::Relaxed), 500);
    }

    #[test]
    fn paths_are_workspace_relative_and_outside_ones_dropped() {
        let root = Path::new("/w/abc");
        assert_eq!(
            relative(root, Path::new("/w/abc/src/a.py")),
            Some("src/a.py".into())
        );
        assert_eq!(relative(root, Path::new("/w/abc")), Some(String::new()));
        assert_eq!(relative(root, Path::new("/w/abcd/x")), None);
        assert_eq!(relative(root, Path::new("/etc/passwd")), None);
    }
}
