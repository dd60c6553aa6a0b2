use super::*;

fn entry(uid: &str, attempt: u64) -> OwnershipEntry {
    OwnershipEntry {
        namespace: "default".into(),
        run_name: format!("run-{uid}"),
        run_uid: uid.into(),
        runtime: "python".into(),
        attempt,
        ..Default::default()
    }
}

#[test]
fn subscribe_frames_the_current_table_as_a_snapshot() {
    let p = Publisher::new(SourceKind::Runtimed, "pod-1", 16);
    p.upsert(entry("b", 1));
    p.upsert(entry("a", 1));
    let (events, _rx) = p.subscribe();
    assert_eq!(events.len(), 4);
    assert!(matches!(events[0].event, Some(Event::SnapshotBegin(_))));
    assert!(matches!(&events[1].event, Some(Event::Upsert(e)) if e.run_uid == "a"));
    assert!(matches!(events[3].event, Some(Event::SnapshotEnd(_))));
    assert!(
        events
            .iter()
            .all(|e| e.revision == 2 && e.source_instance_id == "pod-1")
    );
}

#[test]
fn unchanged_upserts_and_absent_deletes_emit_nothing() {
    let p = Publisher::new(SourceKind::Runtimed, "pod-1", 16);
    let (_, mut rx) = p.subscribe();
    p.upsert(entry("a", 1));
    p.upsert(entry("a", 1));
    p.delete("zzz");
    p.delete("a");
    let first = rx.try_recv().unwrap();
    assert_eq!(first.revision, 1);
    let second = rx.try_recv().unwrap();
    assert!(matches!(second.event, Some(Event::Delete(_))));
    assert_eq!(second.revision, 2);
    assert!(rx.try_recv().is_err());
}

#[test]
fn framer_replaces_on_snapshot_then_applies_deltas() {
    let p = Publisher::new(SourceKind::ControlPlane, "cp", 16);
    p.upsert(entry("a", 1));
    let (events, mut rx) = p.subscribe();
    let mut f = Framer::default();
    let mut out = Vec::new();
    for ev in events {
        out.extend(f.push(ev).unwrap());
    }
    assert_eq!(
        out,
        vec![SourceUpdate::Snapshot {
            instance_id: "cp".into(),
            entries: vec![entry("a", 1)]
        }]
    );
    p.upsert(entry("a", 2));
    p.delete("a");
    assert_eq!(
        f.push(rx.try_recv().unwrap()).unwrap(),
        Some(SourceUpdate::Upsert(Box::new(entry("a", 2))))
    );
    assert_eq!(
        f.push(rx.try_recv().unwrap()).unwrap(),
        Some(SourceUpdate::Delete("a".into()))
    );
}

#[test]
fn framer_rejects_deltas_before_the_first_snapshot() {
    let p = Publisher::new(SourceKind::Runtimed, "pod", 16);
    let mut f = Framer::default();
    let ev = p.event(1, Event::Upsert(entry("a", 1)));
    assert!(f.push(ev).is_err());
    let end = p.event(1, Event::SnapshotEnd(SnapshotEnd {}));
    assert!(f.push(end).is_err());
}

#[tokio::test]
async fn slow_watcher_is_cut_off_instead_of_buffering() {
    let p = Publisher::new(SourceKind::Runtimed, "pod", 2);
    let resp = p
        .watch(Request::new(WatchRequest { client: "t".into() }))
        .await
        .unwrap();
    let mut stream = resp.into_inner();
    use futures::StreamExt;
    // Drain the (empty) snapshot.
    assert!(stream.next().await.unwrap().is_ok());
    assert!(stream.next().await.unwrap().is_ok());
    for i in 0..200 {
        p.upsert(entry(&format!("u{i}"), 1));
    }
    let mut saw_error = false;
    while let Some(item) = stream.next().await {
        if let Err(status) = item {
            assert_eq!(status.code(), tonic::Code::ResourceExhausted);
            saw_error = true;
            break;
        }
    }
    assert!(saw_error, "a lagging watcher must be cut off");
}

#[test]
fn replace_all_upserts_changes_and_deletes_what_is_missing() {
    let p = Publisher::new(SourceKind::ControlPlane, "cp", 16);
    p.upsert(entry("a", 1));
    p.upsert(entry("b", 1));
    let (_, mut rx) = p.subscribe();
    p.replace_all(vec![entry("a", 1), entry("c", 1), entry("b", 2)]);
    let mut events = Vec::new();
    while let Ok(ev) = rx.try_recv() {
        events.push(ev.event);
    }
    // `a` is unchanged: only `b` (new attempt) and `c` (new) are upserted.
    assert_eq!(events.len(), 2);
    p.replace_all(vec![entry("c", 1)]);
    assert_eq!(
        p.entries()
            .iter()
            .map(|e| e.run_uid.as_str())
            .collect::<Vec<_>>(),
        ["c"]
    );
}
