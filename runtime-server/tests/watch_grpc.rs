//! Watching a session's directories over the Unix socket: the changes a
//! client sees (recursive or not), a reader that falls behind losing
//! events with a count, the bounds, refused paths, and a closed session
//! ending the stream.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use kruntimes_proto::runtime::v1 as pb;
use tokio_stream::StreamExt;

async fn watch(
    s: &mut Server,
    path: &str,
    recursive: bool,
) -> Result<tonic::Streaming<pb::WatchEvent>, tonic::Status> {
    let mut stream = s
        .client
        .sessions
        .watch_dir(pb::WatchDirRequest {
            run_uid: UID.into(),
            path: path.into(),
            recursive,
        })
        .await?
        .into_inner();
    // Every change from the `ready` event on is reported.
    let first = stream.next().await.unwrap().unwrap();
    assert_eq!(first.event, Some(pb::watch_event::Event::Ready(true)));
    Ok(stream)
}

/// (change, path) events until `until` holds for what came.
async fn events_until(
    stream: &mut tonic::Streaming<pb::WatchEvent>,
    until: impl Fn(&[(pb::FileChange, String)]) -> bool,
) -> (Vec<(pb::FileChange, String)>, u64) {
    events_and_lost_until(stream, |seen, _| until(seen)).await
}

/// [`events_until`], with what was lost so far given to `until` too.
async fn events_and_lost_until(
    stream: &mut tonic::Streaming<pb::WatchEvent>,
    until: impl Fn(&[(pb::FileChange, String)], u64) -> bool,
) -> (Vec<(pb::FileChange, String)>, u64) {
    let mut seen = Vec::new();
    let mut lost = 0;
    while !until(&seen, lost) {
        let ev = tokio::time::timeout(WITHIN, stream.next())
            .await
            .unwrap_or_else(|_| {
                let last = &seen[seen.len().saturating_sub(5)..];
                panic!(
                    "no event in time; {} seen, {lost} lost, the last {last:?}",
                    seen.len()
                )
            })
            .expect("the stream ended")
            .unwrap();
        match ev.event.unwrap() {
            pb::watch_event::Event::File(f) => {
                seen.push((pb::FileChange::try_from(f.change).unwrap(), f.path))
            }
            pb::watch_event::Event::Lost(n) => lost += n,
            pb::watch_event::Event::Ready(_) => panic!("ready twice"),
        }
    }
    (seen, lost)
}

fn has(seen: &[(pb::FileChange, String)], change: pb::FileChange, path: &str) -> bool {
    seen.iter().any(|(c, p)| *c == change && p == path)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recursive_watch_sees_every_change_beneath_its_directory() {
    let mut s = start().await;
    s.open().await;
    let ws = s.workspace();
    std::fs::create_dir(ws.join("src")).unwrap();
    let mut w = watch(&mut s, "src", true).await.unwrap();
    std::fs::write(ws.join("src/a.txt"), b"1").unwrap();
    std::fs::create_dir(ws.join("src/sub")).unwrap();
    // A directory made after the watch is watched too (once it is seen).
    let (seen, _) = events_until(&mut w, |s| has(s, pb::FileChange::Create, "src/sub")).await;
    assert!(has(&seen, pb::FileChange::Create, "src/a.txt"), "{seen:?}");
    tokio::time::sleep(Duration::from_millis(100)).await;
    std::fs::write(ws.join("src/sub/b.txt"), b"2").unwrap();
    std::fs::rename(ws.join("src/a.txt"), ws.join("src/c.txt")).unwrap();
    std::fs::remove_file(ws.join("src/c.txt")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        ws.join("src/sub/b.txt"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    let (seen, lost) = events_until(&mut w, |s| {
        has(s, pb::FileChange::Remove, "src/c.txt")
            && has(s, pb::FileChange::Chmod, "src/sub/b.txt")
    })
    .await;
    assert_eq!(lost, 0);
    let renames = seen
        .iter()
        .filter(|(c, _)| *c == pb::FileChange::Rename)
        .count();
    assert_eq!(renames, 2, "one event for each name: {seen:?}");
    for (change, path) in [
        (pb::FileChange::Create, "src/sub/b.txt"),
        (pb::FileChange::Write, "src/sub/b.txt"),
        (pb::FileChange::Rename, "src/a.txt"),
        (pb::FileChange::Rename, "src/c.txt"),
    ] {
        assert!(has(&seen, change, path), "{change:?} {path}: {seen:?}");
    }
    // Nothing outside the watched directory.
    std::fs::write(ws.join("outside.txt"), b"x").unwrap();
    std::fs::write(ws.join("src/last.txt"), b"x").unwrap();
    let (seen, _) = events_until(&mut w, |s| has(s, pb::FileChange::Create, "src/last.txt")).await;
    assert!(!seen.iter().any(|(_, p)| p == "outside.txt"), "{seen:?}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flat_watch_ignores_subdirectories_and_a_late_reader_misses_nothing_uncounted() {
    let mut s = start().await;
    s.open().await;
    let ws = s.workspace();
    std::fs::create_dir_all(ws.join("d/sub")).unwrap();
    let mut flat = watch(&mut s, "d", false).await.unwrap();
    std::fs::write(ws.join("d/sub/deep.txt"), b"x").unwrap();
    std::fs::write(ws.join("d/top.txt"), b"x").unwrap();
    let (seen, _) = events_until(&mut flat, |s| has(s, pb::FileChange::Create, "d/top.txt")).await;
    assert!(!seen.iter().any(|(_, p)| p == "d/sub/deep.txt"), "{seen:?}");
    // Nobody reads while 3,000 files come and go: every one of the 9,000
    // events is either delivered or counted as lost (what the queue and
    // the transport's windows hold is delivered; the queue's bound is
    // tested in the watcher's unit tests). Fewer than the kernel's own
    // queue holds (16,384), whose overflow is one `lost` of unknown size.
    let mut slow = watch(&mut s, "", true).await.unwrap();
    for i in 0..3000 {
        let p = ws.join(format!("f{i}"));
        std::fs::write(&p, b"x").unwrap();
        std::fs::remove_file(&p).unwrap();
    }
    let (seen, lost) =
        events_and_lost_until(&mut slow, |seen, lost| seen.len() as u64 + lost >= 9_000).await;
    assert_eq!(
        seen.len() as u64 + lost,
        9_000,
        "{} seen, {lost} lost",
        seen.len()
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_are_bounded_paths_checked_and_a_closed_session_ends_them() {
    let mut s = start().await;
    s.open().await;
    let ws = s.workspace();
    std::fs::write(ws.join("file"), b"x").unwrap();
    std::os::unix::fs::symlink("/etc", ws.join("out")).unwrap();
    for (path, code) in [
        ("file", tonic::Code::FailedPrecondition),
        ("missing", tonic::Code::NotFound),
        ("out", tonic::Code::InvalidArgument),
        ("../x", tonic::Code::InvalidArgument),
    ] {
        let e = watch(&mut s, path, true).await.err().unwrap();
        assert_eq!(e.code(), code, "{path}: {e:?}");
    }
    let mut open = Vec::new();
    for _ in 0..16 {
        open.push(watch(&mut s, "", false).await.unwrap());
    }
    let e = watch(&mut s, "", false).await.err().unwrap();
    assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{e:?}");
    // A watch whose reader left frees its place.
    drop(open.pop());
    let mut again = None;
    for _ in 0..100 {
        if let Ok(w) = watch(&mut s, "", false).await {
            again = Some(w);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut again = again.expect("the place was never freed");
    s.client
        .sessions
        .close_session(pb::CloseSessionRequest {
            run_uid: UID.into(),
        })
        .await
        .unwrap();
    let end = tokio::time::timeout(WITHIN, async {
        while let Some(Ok(_)) = again.next().await {}
    })
    .await;
    assert!(end.is_ok(), "the stream outlived its session");
    s.stop().await;
}
