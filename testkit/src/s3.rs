//! A real S3-compatible server for tests: [versitygw](https://github.com/versity/versitygw)
//! with its `posix` backend, on a loopback port, over a temporary directory.
//!
//! The binary is `KRT_VERSITYGW` if set, otherwise the one `testkit/s3/build.sh` builds
//! (with `go install`, cached by version under `~/.cache/kruntimes/tools/`). The server runs
//! in single-account mode with a random root access key and secret, listens on `127.0.0.1`
//! only, and is started with an empty environment, so no inherited `VGW_*` variable can
//! turn on its webhooks, event notifications, metrics, admin API or web UI. It is killed,
//! and reaped, when the [`S3Server`] is dropped.
//!
//! [`S3Server::create_bucket`], [`S3Server::put_object`] and [`S3Server::get_object`] are
//! plain path-style S3 requests signed with AWS Signature Version 4
//! ([`S3Server::signed_request`]); the tests of other crates talk to the server with the
//! `object_store` crate instead.

use std::fmt::Write as _;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use hmac::{Hmac, Mac};
use rand::Rng;
use sha2::{Digest, Sha256};

/// The variable that names a `versitygw` binary to use instead of building one; it is taken
/// as it is.
pub const VERSITYGW_VARIABLE: &str = "KRT_VERSITYGW";

/// The region the server is started with and requests are signed for.
pub const REGION: &str = "us-east-1";

/// How long a start or restart may take before the server answers HTTP.
const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// How many lines of the server's log an error quotes.
const LOG_TAIL_LINES: usize = 40;

/// A running versitygw (S3 API, `posix` backend) on a loopback port.
pub struct S3Server {
    binary: PathBuf,
    // Dropped after the process is killed (`Drop` runs before the fields are dropped).
    dir: tempfile::TempDir,
    data_dir: PathBuf,
    log_path: PathBuf,
    port: u16,
    access_key: String,
    secret_key: String,
    child: Option<Child>,
    http: reqwest::Client,
}

impl S3Server {
    /// Finds (or builds) versitygw, starts it on a free loopback port over a fresh temporary
    /// data directory, and waits until it answers HTTP.
    pub async fn start() -> anyhow::Result<Self> {
        let binary = versitygw_binary().await?;
        let dir = tempfile::tempdir().context("create the S3 server's temporary directory")?;
        let data_dir = dir.path().join("data");
        std::fs::create_dir(&data_dir)
            .with_context(|| format!("create the S3 data directory {}", data_dir.display()))?;
        let log_path = dir.path().join("versitygw.log");
        let http = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(30))
            .build()
            .context("build the S3 test HTTP client")?;
        let mut server = Self {
            binary,
            dir,
            data_dir,
            log_path,
            port: 0,
            access_key: random_string(20),
            secret_key: random_string(40),
            child: None,
            http,
        };
        // The port was free when picked, but tests run side by side and another may bind it
        // first: a start that finds the address taken is tried again on another port.
        let mut attempt = 1;
        loop {
            server.port = crate::free_port();
            match server.spawn_and_wait().await {
                Err(e) if attempt < 4 && format!("{e:#}").contains("address already in use") => {
                    eprintln!(
                        "versitygw found 127.0.0.1:{} taken (attempt {attempt}); starting again",
                        server.port
                    );
                    attempt += 1;
                }
                Err(e) => return Err(e),
                Ok(()) => return Ok(server),
            }
        }
    }

    /// The S3 endpoint, `http://127.0.0.1:PORT` (path-style addressing).
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The root user's access key id.
    pub fn access_key(&self) -> &str {
        &self.access_key
    }

    /// The root user's secret access key.
    pub fn secret_key(&self) -> &str {
        &self.secret_key
    }

    /// The region requests are signed for (`us-east-1`).
    pub fn region(&self) -> &str {
        REGION
    }

    /// The `posix` backend's root: each directory in it is a bucket, each file below a bucket
    /// an object.
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// Everything the server has logged so far (its stdout and stderr, across restarts).
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// Kills the server (SIGKILL) and reaps it; the port and data directory are kept for
    /// [`S3Server::restart`]. Does nothing if it is already stopped.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // An error here means the process is already gone: nothing is left to stop.
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops the server if it runs, starts it again on the same port over the same data
    /// directory, and waits until it answers HTTP.
    pub async fn restart(&mut self) -> anyhow::Result<()> {
        self.stop();
        self.spawn_and_wait()
            .await
            .with_context(|| format!("restart versitygw on 127.0.0.1:{}", self.port))
    }

    /// Creates bucket `name` (a signed `PUT /{name}`).
    pub async fn create_bucket(&self, name: &str) -> anyhow::Result<()> {
        let resp = self
            .signed_request(
                reqwest::Method::PUT,
                &format!("/{name}"),
                Vec::new(),
                &self.access_key,
                &self.secret_key,
            )
            .await
            .with_context(|| format!("create bucket {name}"))?;
        expect_success(resp, &format!("create bucket {name}")).await?;
        Ok(())
    }

    /// Writes object `key` of `bucket` (a signed `PUT /{bucket}/{key}`).
    pub async fn put_object(
        &self,
        bucket: &str,
        key: &str,
        body: impl Into<Vec<u8>>,
    ) -> anyhow::Result<()> {
        let what = format!("put object {bucket}/{key}");
        let resp = self
            .signed_request(
                reqwest::Method::PUT,
                &format!("/{bucket}/{key}"),
                body.into(),
                &self.access_key,
                &self.secret_key,
            )
            .await
            .with_context(|| what.clone())?;
        expect_success(resp, &what).await?;
        Ok(())
    }

    /// Reads object `key` of `bucket` (a signed `GET /{bucket}/{key}`).
    pub async fn get_object(&self, bucket: &str, key: &str) -> anyhow::Result<Vec<u8>> {
        let what = format!("get object {bucket}/{key}");
        let resp = self
            .signed_request(
                reqwest::Method::GET,
                &format!("/{bucket}/{key}"),
                Vec::new(),
                &self.access_key,
                &self.secret_key,
            )
            .await
            .with_context(|| what.clone())?;
        expect_success(resp, &what).await
    }

    /// Sends `method path` (path-style, e.g. `/bucket/key`; no query string) with `body`,
    /// signed with AWS Signature Version 4 for this server's region and service `s3` with the
    /// given credentials, and returns the answer whatever its status. The path is
    /// percent-encoded here (all but `A-Z a-z 0-9 - _ . ~ /`).
    pub async fn signed_request(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Vec<u8>,
        access_key: &str,
        secret_key: &str,
    ) -> anyhow::Result<reqwest::Response> {
        let host = format!("127.0.0.1:{}", self.port);
        let signed = sign_v4(&SigV4Request {
            method: method.as_str(),
            host: &host,
            path,
            body: &body,
            access_key,
            secret_key,
            region: REGION,
            now: time::OffsetDateTime::now_utc(),
        });
        let url = format!("http://{host}{}", signed.canonical_path);
        let resp = self
            .http
            .request(method.clone(), &url)
            .header("host", &host)
            .header("x-amz-date", &signed.amz_date)
            .header("x-amz-content-sha256", &signed.payload_hash)
            .header("authorization", &signed.authorization)
            .body(body)
            .send()
            .await
            .with_context(|| format!("send {method} {url} to versitygw"))?;
        Ok(resp)
    }

    /// Starts the process on `self.port` and waits until it answers; on failure the process
    /// is stopped and the error quotes the tail of its log.
    async fn spawn_and_wait(&mut self) -> anyhow::Result<()> {
        let log = File::options()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .with_context(|| format!("open versitygw's log {}", self.log_path.display()))?;
        let log_err = log
            .try_clone()
            .with_context(|| format!("duplicate versitygw's log {}", self.log_path.display()))?;
        let child = Command::new(&self.binary)
            // Nothing inherited: versitygw reads dozens of VGW_* (and WEBHOOK, LOGFILE)
            // variables that would turn on outbound connections or other listeners.
            .env_clear()
            .env("ROOT_ACCESS_KEY", &self.access_key)
            .env("ROOT_SECRET_KEY", &self.secret_key)
            .arg("--port")
            .arg(format!("127.0.0.1:{}", self.port))
            .arg("--region")
            .arg(REGION)
            .arg("posix")
            .arg(&self.data_dir)
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .spawn()
            .with_context(|| format!("spawn {}", self.binary.display()))?;
        self.child = Some(child);
        match self.wait_ready().await {
            Ok(()) => Ok(()),
            Err(e) => {
                self.stop();
                Err(e.context(format!(
                    "versitygw on 127.0.0.1:{}; the last lines of its log {}:\n{}",
                    self.port,
                    self.log_path.display(),
                    self.log_tail()
                )))
            }
        }
    }

    /// Polls until the server answers HTTP (any S3 answer: an unsigned `GET /` is refused
    /// with 403), bounded by [`READY_TIMEOUT`], failing early if the process exits.
    async fn wait_ready(&mut self) -> anyhow::Result<()> {
        let url = format!("{}/", self.endpoint());
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Some(child) = self.child.as_mut()
                && let Some(status) = child.try_wait().context("poll the versitygw process")?
            {
                self.child = None;
                bail!("versitygw exited ({status}) before it answered HTTP");
            }
            let answer = self
                .http
                .get(&url)
                .timeout(Duration::from_secs(2))
                .send()
                .await;
            if let Ok(resp) = answer
                && resp
                    .headers()
                    .get("server")
                    .is_some_and(|s| s.as_bytes().eq_ignore_ascii_case(b"versitygw"))
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "versitygw did not answer HTTP on {url} within {} s",
                    READY_TIMEOUT.as_secs()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn log_tail(&self) -> String {
        let log = self.log();
        let lines: Vec<&str> = log.lines().collect();
        if lines.is_empty() {
            return "(nothing logged)".to_owned();
        }
        lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n")
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The `versitygw` binary: `KRT_VERSITYGW` if set, otherwise the one
/// `testkit/s3/build.sh` builds with Go on first use.
pub async fn versitygw_binary() -> anyhow::Result<PathBuf> {
    tokio::task::spawn_blocking(|| {
        crate::tools::go_tool("testkit/s3/build.sh", Some(VERSITYGW_VARIABLE))
    })
    .await
    .context("the versitygw build task")?
}

/// Reads a successful answer's body, or fails with its status and S3 error document.
async fn expect_success(resp: reqwest::Response, what: &str) -> anyhow::Result<Vec<u8>> {
    let status = resp.status();
    let body = resp
        .bytes()
        .await
        .with_context(|| format!("{what}: read the answer's body"))?;
    if !status.is_success() {
        bail!(
            "{what}: versitygw answered {status}: {}",
            String::from_utf8_lossy(&body)
        );
    }
    Ok(body.to_vec())
}

fn random_string(len: usize) -> String {
    rand::rng()
        .sample_iter(rand::distr::Alphanumeric)
        .take(len)
        .map(char::from)
        .collect()
}

/// One request to sign.
struct SigV4Request<'a> {
    method: &'a str,
    /// `host[:port]`, exactly as the `Host` header carries it.
    host: &'a str,
    /// Unencoded path, starting with `/`.
    path: &'a str,
    body: &'a [u8],
    access_key: &'a str,
    secret_key: &'a str,
    region: &'a str,
    now: time::OffsetDateTime,
}

/// What to send for a signed request.
struct SigV4Signed {
    canonical_path: String,
    amz_date: String,
    payload_hash: String,
    authorization: String,
}

/// AWS Signature Version 4 for service `s3`, header-signed (`host`, `x-amz-content-sha256`,
/// `x-amz-date`), empty query string.
fn sign_v4(req: &SigV4Request<'_>) -> SigV4Signed {
    let now = req.now.to_offset(time::UtcOffset::UTC);
    let date = format!(
        "{:04}{:02}{:02}",
        now.year(),
        u8::from(now.month()),
        now.day()
    );
    let amz_date = format!(
        "{date}T{:02}{:02}{:02}Z",
        now.hour(),
        now.minute(),
        now.second()
    );
    let canonical_path = uri_encode_path(req.path);
    let payload_hash = hex(&Sha256::digest(req.body));
    let signed_headers = "host;x-amz-content-sha256;x-amz-date";
    let canonical_request = format!(
        "{}\n{canonical_path}\n\nhost:{}\nx-amz-content-sha256:{payload_hash}\nx-amz-date:{amz_date}\n\n{signed_headers}\n{payload_hash}",
        req.method, req.host
    );
    let scope = format!("{date}/{}/s3/aws4_request", req.region);
    let string_to_sign = format!(
        "AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{}",
        hex(&Sha256::digest(canonical_request.as_bytes()))
    );
    let key = signing_key(req.secret_key, &date, req.region, "s3");
    let signature = hex(&hmac_sha256(&key, string_to_sign.as_bytes()));
    SigV4Signed {
        canonical_path,
        amz_date,
        payload_hash,
        authorization: format!(
            "AWS4-HMAC-SHA256 Credential={}/{scope}, SignedHeaders={signed_headers}, Signature={signature}",
            req.access_key
        ),
    }
}

/// The SigV4 signing key of a secret for one day, region and service.
fn signing_key(secret_key: &str, date: &str, region: &str, service: &str) -> Vec<u8> {
    let key = hmac_sha256(format!("AWS4{secret_key}").as_bytes(), date.as_bytes());
    let key = hmac_sha256(&key, region.as_bytes());
    let key = hmac_sha256(&key, service.as_bytes());
    hmac_sha256(&key, b"aws4_request")
}

fn hmac_sha256(key: &[u8], data: &[u8]) -> Vec<u8> {
    // HMAC takes a key of any length: `new_from_slice` cannot fail for it.
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(key) else {
        unreachable!("HMAC accepts keys of any length")
    };
    mac.update(data);
    mac.finalize().into_bytes().to_vec()
}

fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(out, "{b:02x}");
    }
    out
}

/// S3's URI encoding of a path: every byte but the unreserved characters and `/` as `%XX`.
fn uri_encode_path(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for &b in path.as_bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~' | b'/') {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The signing-key example of AWS's SigV4 documentation ("Examples of how to derive a
    /// signing key for Signature Version 4").
    #[test]
    fn derives_the_documented_signing_key() {
        let key = signing_key(
            "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
            "20120215",
            "us-east-1",
            "iam",
        );
        assert_eq!(
            hex(&key),
            "f4780e2d9f65fa895f9c67b32ce1baf0b0d8a43505a000a1a9e090d414db404d"
        );
    }

    /// The date, payload hash and credential scope of a request of AWS's S3 SigV4 examples;
    /// the signature itself is checked against the server (testkit/tests/s3.rs).
    #[test]
    fn signs_with_the_documented_scope() {
        let now = time::OffsetDateTime::from_unix_timestamp(1_369_353_600).unwrap(); // 2013-05-24T00:00:00Z
        let signed = sign_v4(&SigV4Request {
            method: "GET",
            host: "examplebucket.s3.amazonaws.com",
            path: "/test.txt",
            body: b"",
            access_key: "AKIAIOSFODNN7EXAMPLE",
            secret_key: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            region: "us-east-1",
            now,
        });
        assert_eq!(signed.amz_date, "20130524T000000Z");
        assert_eq!(
            signed.payload_hash,
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert!(signed.authorization.starts_with(
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, SignedHeaders=host;x-amz-content-sha256;x-amz-date, Signature="
        ));
    }

    #[test]
    fn encodes_paths_as_s3_does() {
        assert_eq!(uri_encode_path("/b/a b/ü+~.txt"), "/b/a%20b/%C3%BC%2B~.txt");
    }
}
