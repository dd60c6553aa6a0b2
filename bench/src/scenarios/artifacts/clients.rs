//! The clients the artifact paths are measured with: the store's own
//! client for the baseline uploads (the `object_store` crate's S3 client,
//! which `kruntimes-artifacts` is built on, and that crate's
//! `Store::upload`), the gateway's client identity for reading straight
//! from runtimed, and a streaming download that discards what it reads.

use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use object_store::aws::AmazonS3Builder;
use object_store::path::Path as Key;
use object_store::{ObjectStore, WriteMultipart};
use tokio::io::AsyncReadExt as _;

use kruntimes_artifacts::{Credentials, S3Config, Store, StoreConfig};
use kruntimes_proto::runtime::ARTIFACT_CHUNK_BYTES;
use kruntimes_testkit::S3Server;

/// The part size of runtimed's multipart uploads (`kruntimes-artifacts`'
/// `PART_BYTES`, not exported; docs/artifacts.md, "Store layout").
pub(super) const PART_BYTES: usize = 8 * 1024 * 1024;
/// Parts of one multipart upload in flight at once, as runtimed's store
/// has them (`kruntimes-artifacts`' `PARTS_IN_FLIGHT`).
pub(super) const PARTS_IN_FLIGHT: usize = 2;

/// Writes `bytes` random bytes to `path` (so nothing on the way can
/// compress them), left in the page cache for the uploads that read it.
pub(super) fn random_file(path: &Path, bytes: u64) -> anyhow::Result<()> {
    use std::io::Read as _;
    let mut src = std::fs::File::open("/dev/urandom")?.take(bytes);
    let mut dst = std::fs::File::create(path)?;
    let copied = std::io::copy(&mut src, &mut dst)?;
    ensure!(copied == bytes, "wrote {copied} of {bytes} random bytes");
    Ok(())
}

/// The bucket as the baselines reach it: the `object_store` S3 client and
/// `kruntimes-artifacts`' store over it, with runtimed's settings (path
/// style, the same endpoint and keys).
pub(super) struct Bucket {
    raw: Arc<dyn ObjectStore>,
    store: Store,
}

impl Bucket {
    /// Both clients of `bucket` on `s3`; the store's keys under `prefix`.
    pub fn open(s3: &S3Server, bucket: &str, prefix: &str) -> anyhow::Result<Self> {
        let raw = AmazonS3Builder::new()
            .with_access_key_id(s3.access_key())
            .with_secret_access_key(s3.secret_key())
            .with_bucket_name(bucket)
            .with_region(s3.region())
            .with_endpoint(s3.endpoint())
            .with_allow_http(true)
            .with_virtual_hosted_style_request(false)
            .build()?;
        let store = Store::open(
            &StoreConfig::S3(S3Config {
                endpoint: Some(s3.endpoint()),
                bucket: bucket.to_owned(),
                prefix: Some(prefix.to_owned()),
                region: None,
                path_style: None,
            }),
            Some(Credentials {
                access_key_id: s3.access_key().to_owned(),
                secret_access_key: s3.secret_key().to_owned().into(),
            }),
        )?;
        Ok(Self {
            raw: Arc::new(raw),
            store,
        })
    }

    /// The `object_store` client's multipart PUT of `source` to `key`:
    /// [`PART_BYTES`] parts, [`PARTS_IN_FLIGHT`] in flight, fed
    /// [`ARTIFACT_CHUNK_BYTES`] at a time as runtimed is fed by the Runtime
    /// Server. From the upload's creation to its completion.
    pub async fn put_raw(&self, source: &Path, key: &str) -> anyhow::Result<Duration> {
        let mut file = tokio::fs::File::open(source).await?;
        let mut buf = vec![0u8; ARTIFACT_CHUNK_BYTES];
        let began = Instant::now();
        let upload = self.raw.put_multipart(&Key::from(key)).await?;
        let mut parts = WriteMultipart::new_with_chunk_size(upload, PART_BYTES);
        loop {
            let n = file.read(&mut buf).await?;
            if n == 0 {
                break;
            }
            parts.wait_for_capacity(PARTS_IN_FLIGHT).await?;
            parts.write(&buf[..n]);
        }
        parts.finish().await?;
        Ok(began.elapsed())
    }

    /// `kruntimes-artifacts`' `Store::upload` of `source` (what runtimed
    /// runs for each file: the same multipart PUT, SHA-256 computed as the
    /// bytes pass), fed the same way. Returns the time and the key.
    pub async fn put_store(&self, source: &Path, uid: &str) -> anyhow::Result<(Duration, String)> {
        let size = tokio::fs::metadata(source).await?.len();
        let mut file = tokio::fs::File::open(source).await?;
        let mut buf = vec![0u8; ARTIFACT_CHUNK_BYTES];
        let key = self.store.file_key("baseline", uid, "big.bin");
        let began = Instant::now();
        let mut upload = self.store.upload(key.clone(), size).await?;
        loop {
            let n = file.read(&mut buf).await?;
            if n == 0 {
                break;
            }
            upload.write(&buf[..n]).await?;
        }
        let done = upload.finish("big.bin").await?;
        let took = began.elapsed();
        ensure!(done.size == size, "uploaded {} of {size} bytes", done.size);
        Ok((took, key.to_string()))
    }

    /// Removes object `key` (what was measured is not kept: the disk is
    /// the machine's).
    pub async fn delete(&self, key: &str) -> anyhow::Result<()> {
        self.raw
            .delete(&Key::from(key))
            .await
            .with_context(|| format!("delete {key}"))
    }
}

/// A client of runtimed's dataplane with the gateway's own identity (the
/// stack's `gateway-client.crt`), reaching `owner` under the name its
/// certificate has: the path without the gateway.
pub(super) fn runtimed_client(
    pki: &Path,
    owner: SocketAddr,
    http1_only: bool,
) -> anyhow::Result<reqwest::Client> {
    let mut pem = std::fs::read(pki.join("gateway-client.crt"))?;
    pem.extend(std::fs::read(pki.join("gateway-client.key"))?);
    let mut b = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(&std::fs::read(
            pki.join("internal-ca.crt"),
        )?)?)
        .identity(reqwest::Identity::from_pem(&pem)?)
        .resolve(RUNTIMED_HOST, owner);
    if http1_only {
        b = b.http1_only();
    }
    Ok(b.build()?)
}

/// The name runtimed's dataplane certificate is issued for.
pub(super) const RUNTIMED_HOST: &str = "runtimed.kruntimes.internal";

/// An HTTPS client trusting the CA in `ca`, held to HTTP/1.1 with
/// `http1_only`.
pub(super) fn https_client(ca: &Path, http1_only: bool) -> anyhow::Result<reqwest::Client> {
    let mut b = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(&std::fs::read(ca)?)?);
    if http1_only {
        b = b.http1_only();
    }
    Ok(b.build()?)
}

/// What one download took.
pub(super) struct Got {
    /// From the request sent to its last byte read.
    pub took: Duration,
    /// The protocol it was answered over.
    pub version: reqwest::Version,
}

/// Sends a request (`send`, not yet polled) and reads its whole body as it
/// arrives, keeping none of it; fails unless it is a 200 of `bytes` bytes.
pub(super) async fn download<F>(send: F, bytes: u64) -> anyhow::Result<Got>
where
    F: Future<Output = anyhow::Result<reqwest::Response>>,
{
    let began = Instant::now();
    let mut resp = send.await?;
    let status = resp.status();
    let version = resp.version();
    if !status.is_success() {
        let body = resp.text().await.unwrap_or_default();
        anyhow::bail!("{status}: {body}");
    }
    let mut read = 0u64;
    while let Some(chunk) = resp.chunk().await? {
        read += chunk.len() as u64;
    }
    let took = began.elapsed();
    ensure!(read == bytes, "read {read} of {bytes} bytes");
    Ok(Got { took, version })
}
