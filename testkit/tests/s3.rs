//! The test S3 server (kruntimes_testkit::S3Server): a real versitygw on loopback that
//! creates buckets, stores and serves objects, survives a restart with its data, and refuses
//! a request signed with the wrong secret.

use kruntimes_testkit::S3Server;

#[tokio::test]
async fn stores_objects_across_a_restart() {
    let mut s3 = S3Server::start().await.unwrap();
    assert!(s3.endpoint().starts_with("http://127.0.0.1:"));
    assert_eq!(s3.region(), "us-east-1");

    s3.create_bucket("artifacts").await.unwrap();
    assert!(
        s3.data_dir().join("artifacts").is_dir(),
        "the posix backend keeps a bucket as a directory"
    );
    let body = b"hello, object store\n".repeat(1000);
    s3.put_object("artifacts", "runs/a b/out.txt", body.clone())
        .await
        .unwrap();
    assert_eq!(
        s3.get_object("artifacts", "runs/a b/out.txt")
            .await
            .unwrap(),
        body
    );

    let endpoint = s3.endpoint();
    s3.stop();
    let down = s3.get_object("artifacts", "runs/a b/out.txt").await;
    assert!(down.is_err(), "a stopped server answered: {down:?}");

    s3.restart().await.unwrap();
    assert_eq!(s3.endpoint(), endpoint, "restarted on another port");
    assert_eq!(
        s3.get_object("artifacts", "runs/a b/out.txt")
            .await
            .unwrap(),
        body
    );
    let missing = s3.get_object("artifacts", "none").await.unwrap_err();
    assert!(
        format!("{missing:#}").contains("404"),
        "a missing object: {missing:#}"
    );
}

#[tokio::test]
async fn refuses_a_wrong_secret_key() {
    let s3 = S3Server::start().await.unwrap();
    s3.create_bucket("private").await.unwrap();
    s3.put_object("private", "k", "v").await.unwrap();

    let resp = s3
        .signed_request(
            reqwest::Method::GET,
            "/private/k",
            Vec::new(),
            s3.access_key(),
            "not-the-secret-key",
        )
        .await
        .unwrap();
    assert_eq!(resp.status(), 403);
    let text = resp.text().await.unwrap();
    assert!(text.contains("SignatureDoesNotMatch"), "{text}");

    // The same request with the right secret is served.
    let resp = s3
        .signed_request(
            reqwest::Method::GET,
            "/private/k",
            Vec::new(),
            s3.access_key(),
            s3.secret_key(),
        )
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.text().await.unwrap(), "v");
}
