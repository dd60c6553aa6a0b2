#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]
//! The checks every store backend passes, run against a local directory
//! (`directory.rs`) and a real S3-compatible server (`s3.rs`).

use futures::StreamExt as _;
use kruntimes_artifacts::{
    ExportError, Limits, Scope, Store, StoreError, export, invocation_segment,
};
use kruntimes_proto::runtime::v1::{
    ArtifactChunk, ArtifactFile, ArtifactRefused, artifact_chunk::Part,
};
use sha2::{Digest as _, Sha256};

pub fn file(name: &str, size: u64) -> Result<ArtifactChunk, String> {
    Ok(ArtifactChunk {
        part: Some(Part::File(ArtifactFile {
            name: name.into(),
            size,
        })),
    })
}

pub fn data(bytes: &[u8]) -> Result<ArtifactChunk, String> {
    Ok(ArtifactChunk {
        part: Some(Part::Data(bytes.to_vec())),
    })
}

pub fn refused(name: &str, reason: &str) -> Result<ArtifactChunk, String> {
    Ok(ArtifactChunk {
        part: Some(Part::Refused(ArtifactRefused {
            name: name.into(),
            reason: reason.into(),
        })),
    })
}

/// A file's chunks, content in 1 MiB pieces.
pub fn whole(name: &str, content: &[u8]) -> Vec<Result<ArtifactChunk, String>> {
    let mut v = vec![file(name, content.len() as u64)];
    v.extend(content.chunks(1 << 20).map(data));
    v
}

pub fn sha(b: &[u8]) -> String {
    Sha256::digest(b)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

pub async fn read_all(store: &Store, ns: &str, uid: &str, name: &str) -> Vec<u8> {
    let mut r = store.read(ns, uid, name, None).await.unwrap();
    let mut out = Vec::new();
    while let Some(b) = r.body.next().await {
        out.extend_from_slice(&b.unwrap());
    }
    out
}

/// Content that is not all one byte (so a misplaced part shows).
pub fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8).collect()
}

pub async fn exports_read_back_with_sizes_and_digests(store: &Store) {
    let big = pattern(20 * 1024 * 1024 + 17); // multipart: 3 parts
    let mut chunks = whole("report.json", b"{\"ok\":true}");
    chunks.extend(whole("out/deep/big.bin", &big));
    chunks.extend(whole("empty", b""));
    let refs = export(
        store,
        "ns",
        "uid-1",
        Scope::Run,
        futures::stream::iter(chunks),
        &Limits::default(),
    )
    .await
    .unwrap();
    let names: Vec<&str> = refs.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["report.json", "out/deep/big.bin", "empty"]);
    assert_eq!(refs[1].size, big.len() as u64);
    assert_eq!(refs[1].sha256, sha(&big));
    assert_eq!(refs[2].sha256, sha(b""));
    assert!(
        refs[1].uri.ends_with("/ns/uid-1/files/out/deep/big.bin"),
        "{}",
        refs[1].uri
    );
    assert_eq!(
        read_all(store, "ns", "uid-1", "out/deep/big.bin").await,
        big
    );
    assert_eq!(read_all(store, "ns", "uid-1", "empty").await, b"");
    let manifest = store.manifest("ns", "uid-1").await.unwrap().unwrap();
    assert_eq!(manifest.artifacts, refs);
    // A range.
    let mut r = store
        .read("ns", "uid-1", "out/deep/big.bin", Some(10..20))
        .await
        .unwrap();
    assert_eq!(r.size, big.len() as u64);
    assert_eq!(r.range, 10..20);
    let mut got = Vec::new();
    while let Some(b) = r.body.next().await {
        got.extend_from_slice(&b.unwrap());
    }
    assert_eq!(got, &big[10..20]);
    assert_eq!(store.runs("ns").await.unwrap(), ["uid-1"]);
}

pub async fn a_new_export_replaces_the_last_and_deletion_removes_all(store: &Store) {
    let first = [whole("a", b"1"), whole("b", b"2")].concat();
    export(
        store,
        "ns",
        "uid-2",
        Scope::Run,
        futures::stream::iter(first),
        &Limits::default(),
    )
    .await
    .unwrap();
    export(
        store,
        "ns",
        "uid-2",
        Scope::Run,
        futures::stream::iter(whole("c", b"3")),
        &Limits::default(),
    )
    .await
    .unwrap();
    let m = store.manifest("ns", "uid-2").await.unwrap().unwrap();
    assert_eq!(m.artifacts.len(), 1);
    assert_eq!(m.artifacts[0].name, "c");
    assert_eq!(
        store.read("ns", "uid-2", "a", None).await.err(),
        Some(StoreError::NotFound),
        "the older attempt's file is gone"
    );
    assert!(store.delete_run("ns", "uid-2").await.unwrap() >= 1);
    assert_eq!(store.manifest("ns", "uid-2").await.unwrap(), None);
    assert_eq!(
        store.read("ns", "uid-2", "c", None).await.err(),
        Some(StoreError::NotFound)
    );
    assert_eq!(
        store.delete_run("ns", "uid-2").await.unwrap(),
        0,
        "idempotent"
    );
}

pub async fn invalid_directories_fail_naming_the_file_and_leave_no_manifest(store: &Store) {
    let limits = Limits {
        max_files: 2,
        max_file_bytes: 10,
        max_total_bytes: 15,
    };
    type Case<'a> = (Vec<Result<ArtifactChunk, String>>, &'a str, &'a str);
    let cases: Vec<Case> = vec![
        (
            [whole("ok", b"x"), vec![refused("link", "a symbolic link")]].concat(),
            "link",
            "symbolic link",
        ),
        (whole("big", &[0; 11]), "big", "11 bytes"),
        (
            [whole("a", &[0; 8]), whole("b", &[0; 8])].concat(),
            "b",
            "add up",
        ),
        (
            [whole("a", b"1"), whole("b", b"2"), whole("c", b"3")].concat(),
            "",
            "more than 2 files",
        ),
        (whole("../etc/passwd", b"x"), "../etc/passwd", "`..`"),
        (whole("a b", b"x"), "a b", "character"),
        ([whole("a", b"x"), whole("a", b"y")].concat(), "a", "twice"),
        (vec![file("grew", 1), data(b"12")], "grew", "grew past"),
        (
            vec![file("shrank", 5), data(b"12")],
            "shrank",
            "2 bytes were read of the 5",
        ),
    ];
    for (i, (chunks, name, why)) in cases.into_iter().enumerate() {
        let uid = format!("bad-{i}");
        let err = export(
            store,
            "ns",
            &uid,
            Scope::Run,
            futures::stream::iter(chunks),
            &limits,
        )
        .await
        .unwrap_err();
        match &err {
            ExportError::Invalid { name: n, why: w } => {
                assert_eq!(n, name, "case {i}: {err}");
                assert!(w.contains(why), "case {i}: {w}");
                assert!(!err.is_transient());
            }
            other => panic!("case {i}: {other:?}"),
        }
        assert_eq!(store.manifest("ns", &uid).await.unwrap(), None, "case {i}");
    }
    // A broken source is transient.
    let err = export(
        store,
        "ns",
        "broken",
        Scope::Run,
        futures::stream::iter(vec![file("a", 3), Err("connection reset".to_string())]),
        &limits,
    )
    .await
    .unwrap_err();
    assert!(err.is_transient(), "{err:?}");
    assert_eq!(store.manifest("ns", "broken").await.unwrap(), None);
}

/// A function Run's invocations: each export its own, named
/// `invocations/{segment}/…` in the Run, found through its own manifest,
/// replaced on its own; the Run's deletion takes them all.
pub async fn invocations_export_beside_each_other(store: &Store) {
    let one = export(
        store,
        "ns",
        "uid-f",
        Scope::Invocation("order-42"),
        futures::stream::iter(whole("diagnosis.json", b"{}")),
        &Limits::default(),
    )
    .await
    .unwrap();
    assert_eq!(one[0].name, "invocations/order-42/diagnosis.json");
    assert!(
        one[0]
            .uri
            .ends_with("/ns/uid-f/files/invocations/order-42/diagnosis.json"),
        "{}",
        one[0].uri
    );
    let seg = invocation_segment("a/b c");
    assert_eq!(seg.len(), 32, "{seg}");
    let two = export(
        store,
        "ns",
        "uid-f",
        Scope::Invocation(&seg),
        futures::stream::iter([whole("x", b"1"), whole("y/z", b"22")].concat()),
        &Limits::default(),
    )
    .await
    .unwrap();
    assert_eq!(two[1].name, format!("invocations/{seg}/y/z"));
    // Each found through its own manifest; the Run has none of its own.
    assert_eq!(store.manifest("ns", "uid-f").await.unwrap(), None);
    let found = store
        .find("ns", "uid-f", "invocations/order-42/diagnosis.json")
        .await
        .unwrap();
    assert_eq!(found.as_ref(), Some(&one[0]));
    assert_eq!(
        store
            .find("ns", "uid-f", &two[1].name)
            .await
            .unwrap()
            .as_ref(),
        Some(&two[1])
    );
    for absent in [
        "invocations/order-42/other",
        "invocations/order-43/diagnosis.json",
        "invocations/order-42",
        "diagnosis.json",
    ] {
        assert_eq!(
            store.find("ns", "uid-f", absent).await.unwrap(),
            None,
            "{absent}"
        );
    }
    assert_eq!(read_all(store, "ns", "uid-f", &two[1].name).await, b"22");
    // The same invocation again replaces only its own.
    export(
        store,
        "ns",
        "uid-f",
        Scope::Invocation("order-42"),
        futures::stream::iter(whole("again", b"3")),
        &Limits::default(),
    )
    .await
    .unwrap();
    assert_eq!(
        store
            .find("ns", "uid-f", "invocations/order-42/diagnosis.json")
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        store.read("ns", "uid-f", &one[0].name, None).await.err(),
        Some(StoreError::NotFound)
    );
    assert!(
        store
            .find("ns", "uid-f", &two[0].name)
            .await
            .unwrap()
            .is_some()
    );
    // A name too long once placed under its invocation is refused by name.
    let long = "n".repeat(500);
    let err = export(
        store,
        "ns",
        "uid-f",
        Scope::Invocation("order-44"),
        futures::stream::iter(whole(&long, b"1")),
        &Limits::default(),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&err, ExportError::Invalid { name, .. } if *name == long),
        "{err}"
    );
    assert!(store.delete_run("ns", "uid-f").await.unwrap() >= 3);
    assert_eq!(store.find("ns", "uid-f", &two[0].name).await.unwrap(), None);
    assert!(store.runs("ns").await.unwrap().iter().all(|u| u != "uid-f"));
}

/// An invocation that left nothing: no store call at all (a store that is
/// away does not fail it), and an earlier call of the id keeps its files.
pub async fn an_empty_invocation_does_not_reach_the_store(store: &Store, away: &Store) {
    export(
        store,
        "ns",
        "uid-e",
        Scope::Invocation("i-1"),
        futures::stream::iter(whole("kept", b"1")),
        &Limits::default(),
    )
    .await
    .unwrap();
    for s in [store, away] {
        let refs = export(
            s,
            "ns",
            "uid-e",
            Scope::Invocation("i-1"),
            futures::stream::iter(Vec::new()),
            &Limits::default(),
        )
        .await
        .unwrap();
        assert!(refs.is_empty());
    }
    assert!(
        store
            .find("ns", "uid-e", "invocations/i-1/kept")
            .await
            .unwrap()
            .is_some()
    );
    // A file does reach it: the away store fails, transiently.
    let err = export(
        away,
        "ns",
        "uid-e",
        Scope::Invocation("i-2"),
        futures::stream::iter(whole("x", b"1")),
        &Limits::default(),
    )
    .await
    .unwrap_err();
    assert!(err.is_transient(), "{err:?}");
}
