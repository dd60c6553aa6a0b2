#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The store over a local directory (`krt up`'s default).

mod common;

use kruntimes_artifacts::{Store, StoreConfig};

fn store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(
        &StoreConfig::Directory {
            path: dir.path().join("artifacts"),
        },
        None,
    )
    .unwrap();
    (dir, store)
}

#[tokio::test]
async fn exports_read_back_with_sizes_and_digests() {
    let (_d, s) = store();
    common::exports_read_back_with_sizes_and_digests(&s).await;
}

#[tokio::test]
async fn a_new_export_replaces_the_last_and_deletion_removes_all() {
    let (_d, s) = store();
    common::a_new_export_replaces_the_last_and_deletion_removes_all(&s).await;
}

#[tokio::test]
async fn invocations_export_beside_each_other() {
    let (_d, s) = store();
    common::invocations_export_beside_each_other(&s).await;
}

#[tokio::test]
async fn invalid_directories_fail_naming_the_file_and_leave_no_manifest() {
    let (_d, s) = store();
    common::invalid_directories_fail_naming_the_file_and_leave_no_manifest(&s).await;
}

#[tokio::test]
async fn uris_name_the_directory() {
    let (d, s) = store();
    let key = s.file_key("ns", "u", "a/b");
    let root = d.path().join("artifacts").canonicalize().unwrap();
    assert_eq!(
        s.uri(&key),
        format!("file://{}/ns/u/files/a/b", root.display())
    );
}

#[tokio::test]
async fn a_uri_maps_back_to_a_key_only_inside_its_namespace() {
    let (_d, s) = store();
    let key = s.file_key("ns", "0a-1", "out/a.json");
    let uri = s.uri(&key);
    assert_eq!(s.key_of(&uri, "ns"), Some(key));
    assert_eq!(s.key_of(&uri, "other"), None, "another namespace's");
    for bad in [
        uri.replace("/files/", "/manifests/"),
        uri.replace("out/a.json", "../../x"),
        uri.replace("0a-1", "UPPER"),
        "s3://elsewhere/ns/0a-1/files/a".to_string(),
        format!("{uri}/../../../etc/passwd"),
    ] {
        assert_eq!(s.key_of(&bad, "ns"), None, "{bad}");
    }
}
