#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The store over a real S3-compatible server (versitygw, started on
//! loopback by the test harness).

mod common;

use kruntimes_artifacts::{
    Credentials, ExportError, Limits, S3Config, Scope, Store, StoreConfig, export,
};
use kruntimes_testkit::S3Server;
use secrecy::SecretString;

async fn server() -> (S3Server, Store) {
    let s3 = S3Server::start().await.unwrap();
    s3.create_bucket("artifacts").await.unwrap();
    let store = open(&s3, s3.secret_key());
    (s3, store)
}

fn open(s3: &S3Server, secret: &str) -> Store {
    Store::open(
        &StoreConfig::S3(S3Config {
            endpoint: Some(s3.endpoint()),
            bucket: "artifacts".into(),
            prefix: Some("team-a".into()),
            region: Some(s3.region().into()),
            path_style: Some(true),
        }),
        Some(Credentials {
            access_key_id: s3.access_key().into(),
            secret_access_key: SecretString::from(secret.to_owned()),
        }),
    )
    .unwrap()
}

#[tokio::test]
async fn exports_read_back_with_sizes_and_digests() {
    let (s3, store) = server().await;
    common::exports_read_back_with_sizes_and_digests(&store).await;
    // Under the prefix, in the bucket: the server's own files show it.
    assert!(
        s3.data_dir()
            .join("artifacts/team-a/ns/uid-1/files/out/deep/big.bin")
            .is_file()
    );
}

#[tokio::test]
async fn a_new_export_replaces_the_last_and_deletion_removes_all() {
    let (_s3, store) = server().await;
    common::a_new_export_replaces_the_last_and_deletion_removes_all(&store).await;
}

#[tokio::test]
async fn invocations_export_beside_each_other() {
    let (_s3, store) = server().await;
    common::invocations_export_beside_each_other(&store).await;
}

#[tokio::test]
async fn invalid_directories_fail_naming_the_file_and_leave_no_manifest() {
    let (_s3, store) = server().await;
    common::invalid_directories_fail_naming_the_file_and_leave_no_manifest(&store).await;
}

/// Exports one file `a` as Run `u` of `ns`.
async fn export_a(store: &Store) -> Result<Vec<kruntimes_api::ArtifactRef>, ExportError> {
    export(
        store,
        "ns",
        "u",
        Scope::Run,
        futures::stream::iter(common::whole("a", b"x")),
        &Limits::default(),
    )
    .await
}

#[tokio::test]
async fn a_store_that_is_down_or_refuses_the_key_is_a_transient_failure_without_secrets() {
    let (mut s3, store) = server().await;
    let wrong = open(&s3, "not-the-secret-key-at-all");
    let err = export_a(&wrong).await.unwrap_err();
    assert!(matches!(err, ExportError::Store(_)), "{err:?}");
    let shown = err.to_string();
    assert!(!shown.contains(s3.secret_key()), "{shown}");
    s3.stop();
    let err = export_a(&store).await.unwrap_err();
    assert!(err.is_transient(), "{err:?}");
    s3.restart().await.unwrap();
    let refs = export_a(&store).await.unwrap();
    assert_eq!(refs[0].uri, "s3://artifacts/team-a/ns/u/files/a");
}

#[tokio::test]
async fn an_empty_invocation_does_not_reach_the_store() {
    let (s3, store) = server().await;
    // The same bucket with a key the server refuses: any request fails.
    let refused = open(&s3, "not-the-secret-key-at-all");
    common::an_empty_invocation_does_not_reach_the_store(&store, &refused).await;
}
