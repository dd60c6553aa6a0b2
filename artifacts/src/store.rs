//! The store: put, read, list and delete a Run's artifacts.

use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt as _;
use futures::stream::BoxStream;
use object_store::aws::AmazonS3Builder;
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::{
    ClientOptions, GetOptions, GetRange, ObjectStore, PutPayload, RetryConfig, WriteMultipart,
};
use secrecy::ExposeSecret as _;
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use kruntimes_api::ArtifactRef;

use crate::config::{Credentials, StoreConfig};

/// Key prefix of an S3 store without one.
const DEFAULT_PREFIX: &str = "kruntimes";
/// Region of an S3 store without one.
const DEFAULT_REGION: &str = "us-east-1";
/// Files up to this size are uploaded in one request; larger ones in parts
/// of this size (S3's smallest part is 5 MiB).
pub const PART_BYTES: usize = 8 * 1024 * 1024;
/// Parts of one upload in flight at once: bounds an upload's memory to
/// about `(PARTS_IN_FLIGHT + 1) × PART_BYTES`.
const PARTS_IN_FLIGHT: usize = 2;
/// Largest manifest read back (100,000 refs of the longest names fit).
const MAX_MANIFEST_BYTES: u64 = 128 * 1024 * 1024;

/// Why a store call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// No such object.
    #[error("not found")]
    NotFound,
    /// The store could not be reached or refused the call; a later call
    /// may succeed.
    #[error("artifact store unavailable: {0}")]
    Unavailable(String),
    /// The store is not configured right (a bad endpoint, missing
    /// credentials): retrying does not help.
    #[error("artifact store misconfigured: {0}")]
    Config(String),
}

impl From<object_store::Error> for StoreError {
    fn from(e: object_store::Error) -> Self {
        match e {
            object_store::Error::NotFound { .. } => Self::NotFound,
            other => Self::Unavailable(bounded(&other.to_string())),
        }
    }
}

/// A store's message, bounded (it may quote a server's whole answer).
fn bounded(s: &str) -> String {
    kruntimes_proto::api::truncate_utf8(s.to_owned(), 512)
}

/// What the last export of a Run uploaded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    /// Every artifact, in upload order.
    pub artifacts: Vec<ArtifactRef>,
}

impl Manifest {
    /// The ref named `name`.
    pub fn get(&self, name: &str) -> Option<&ArtifactRef> {
        self.artifacts.iter().find(|a| a.name == name)
    }
}

/// The directory of a function Run's artifact names that holds its
/// invocations' artifacts: `invocations/{id}/{name}`.
pub const INVOCATIONS: &str = "invocations";

/// What one export replaces: a Run's artifacts (what its task left, or
/// its session when drained), or what one invocation of a function Run left
/// (named `invocations/{segment}/…` in the Run, with a manifest of its own).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope<'a> {
    /// The Run's own.
    Run,
    /// One invocation's, by its [`invocation_segment`].
    Invocation(&'a str),
}

impl Scope<'_> {
    /// The name in the Run of the artifact an export of this scope got as
    /// `name`.
    pub fn name(&self, name: &str) -> String {
        match self {
            Self::Run => name.to_owned(),
            Self::Invocation(seg) => format!("{INVOCATIONS}/{seg}/{name}"),
        }
    }
}

/// The name segment of an invocation's artifacts: its id when that is one
/// valid artifact name segment (a generated UUID, `order-42`), else the
/// first 32 hex digits of the id's SHA-256 (an id with `/`, `:` or a
/// space).
pub fn invocation_segment(id: &str) -> String {
    let plain = !id.contains('/') && kruntimes_proto::api::artifact_name(id).is_none();
    if plain {
        id.to_owned()
    } else {
        Sha256::digest(id.as_bytes())[..16]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }
}

/// An open read of an artifact.
pub struct Read {
    /// The whole object's size.
    pub size: u64,
    /// The bytes this read returns.
    pub range: Range<u64>,
    /// Its content, as the store sends it.
    pub body: BoxStream<'static, Result<Bytes, StoreError>>,
}

impl std::fmt::Debug for Read {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Read")
            .field("size", &self.size)
            .field("range", &self.range)
            .finish_non_exhaustive()
    }
}

/// A Runtime's artifact store.
#[derive(Clone)]
pub struct Store {
    inner: Arc<dyn ObjectStore>,
    /// `s3://bucket` or `file:///dir`: an object's URI is this, `/`, its key.
    root_uri: String,
    prefix: Option<String>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("root", &self.root_uri)
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl Store {
    /// Opens a store: a directory is created if missing; an S3 bucket is
    /// reached with `credentials`, or without them with the identity the
    /// environment provides (`AWS_*`, instance or Pod identity). Nothing is
    /// requested yet.
    pub fn open(
        config: &StoreConfig,
        credentials: Option<Credentials>,
    ) -> Result<Self, StoreError> {
        match config {
            StoreConfig::Directory { path } => {
                std::fs::create_dir_all(path)
                    .map_err(|e| StoreError::Config(format!("create {}: {e}", path.display())))?;
                let path = path
                    .canonicalize()
                    .map_err(|e| StoreError::Config(format!("resolve {}: {e}", path.display())))?;
                let fs = LocalFileSystem::new_with_prefix(&path)
                    .map_err(|e| StoreError::Config(bounded(&e.to_string())))?
                    .with_automatic_cleanup(true);
                Ok(Self {
                    inner: Arc::new(fs),
                    root_uri: format!("file://{}", path.display()),
                    prefix: None,
                })
            }
            StoreConfig::S3(s3) => {
                let mut b = match &credentials {
                    Some(c) => AmazonS3Builder::new()
                        .with_access_key_id(&c.access_key_id)
                        .with_secret_access_key(c.secret_access_key.expose_secret()),
                    None => AmazonS3Builder::from_env(),
                };
                b = b
                    .with_bucket_name(&s3.bucket)
                    .with_region(s3.region.as_deref().unwrap_or(DEFAULT_REGION))
                    .with_virtual_hosted_style_request(!s3.path_style.unwrap_or(true))
                    // Retries are the exporter's (with a deadline): a call
                    // fails fast here.
                    .with_retry(RetryConfig {
                        max_retries: 2,
                        retry_timeout: Duration::from_secs(10),
                        ..RetryConfig::default()
                    })
                    .with_client_options(
                        ClientOptions::new()
                            .with_connect_timeout(Duration::from_secs(5))
                            .with_timeout(Duration::from_secs(300)),
                    );
                if let Some(endpoint) = &s3.endpoint {
                    b = b
                        .with_endpoint(endpoint)
                        .with_allow_http(endpoint.starts_with("http://"));
                }
                let store = b
                    .build()
                    .map_err(|e| StoreError::Config(bounded(&e.to_string())))?;
                let prefix = s3
                    .prefix
                    .as_deref()
                    .map(|p| p.trim_matches('/'))
                    .unwrap_or(DEFAULT_PREFIX);
                Ok(Self {
                    inner: Arc::new(store),
                    root_uri: format!("s3://{}", s3.bucket),
                    prefix: (!prefix.is_empty()).then(|| prefix.to_owned()),
                })
            }
        }
    }

    /// The key prefix of everything of one Run.
    pub fn run_prefix(&self, namespace: &str, uid: &str) -> Path {
        match &self.prefix {
            Some(p) => Path::from(format!("{p}/{namespace}/{uid}")),
            None => Path::from(format!("{namespace}/{uid}")),
        }
    }

    /// The key of a Run's artifact `name` (a valid artifact name).
    pub fn file_key(&self, namespace: &str, uid: &str, name: &str) -> Path {
        Path::from(format!("{}/files/{name}", self.run_prefix(namespace, uid)))
    }

    fn manifest_key(&self, namespace: &str, uid: &str, scope: Scope<'_>) -> Path {
        let run = self.run_prefix(namespace, uid);
        match scope {
            Scope::Run => Path::from(format!("{run}/manifest.json")),
            Scope::Invocation(seg) => Path::from(format!("{run}/{INVOCATIONS}/{seg}.json")),
        }
    }

    /// The key of the object `uri` names, if it is in this store under
    /// `namespace` (a Run reads only its own namespace's artifacts).
    pub fn key_of(&self, uri: &str, namespace: &str) -> Option<Path> {
        let key = uri.strip_prefix(&self.root_uri)?.strip_prefix('/')?;
        let allowed = match &self.prefix {
            Some(p) => format!("{p}/{namespace}/"),
            None => format!("{namespace}/"),
        };
        let rest = key.strip_prefix(&allowed)?;
        // `{uid}/files/{name}`, nothing that climbs out.
        let mut parts = rest.splitn(3, '/');
        let (uid, files, name) = (parts.next()?, parts.next()?, parts.next()?);
        (files == "files"
            && kruntimes_proto::api::valid_run_uid(uid)
            && kruntimes_proto::api::artifact_name(name).is_none())
        .then(|| Path::from(key))
    }

    /// Opens the object at `key` (one [`Self::key_of`] gave) for reading.
    pub async fn read_key(&self, key: &Path) -> Result<Read, StoreError> {
        self.get(key, None).await
    }

    /// Opens the object at `key`, `range` of it when given.
    async fn get(&self, key: &Path, range: Option<Range<u64>>) -> Result<Read, StoreError> {
        let opts = GetOptions {
            range: range.map(GetRange::Bounded),
            ..GetOptions::default()
        };
        let got = self.inner.get_opts(key, opts).await?;
        Ok(Read {
            size: got.meta.size,
            range: got.range.clone(),
            body: got
                .into_stream()
                .map(|r| r.map_err(StoreError::from))
                .boxed(),
        })
    }

    /// The URI of the object at `key`.
    pub fn uri(&self, key: &Path) -> String {
        format!("{}/{key}", self.root_uri)
    }

    /// Starts an upload of `size` bytes to `key`.
    pub async fn upload(&self, key: Path, size: u64) -> Result<Upload, StoreError> {
        let sink = if size <= PART_BYTES as u64 {
            Sink::Whole(Vec::with_capacity(usize::try_from(size).unwrap_or(0)))
        } else {
            let upload = self.inner.put_multipart(&key).await?;
            Sink::Parts(WriteMultipart::new_with_chunk_size(upload, PART_BYTES))
        };
        Ok(Upload {
            store: self.inner.clone(),
            uri: self.uri(&key),
            key,
            sink,
            hash: Sha256::new(),
            written: 0,
        })
    }

    /// Writes the manifest of an export of `scope` (after its files).
    pub async fn write_manifest(
        &self,
        namespace: &str,
        uid: &str,
        scope: Scope<'_>,
        manifest: &Manifest,
    ) -> Result<(), StoreError> {
        let body = serde_json::to_vec(manifest)
            .map_err(|e| StoreError::Config(format!("encode the manifest: {e}")))?;
        self.inner
            .put(
                &self.manifest_key(namespace, uid, scope),
                PutPayload::from(body),
            )
            .await?;
        Ok(())
    }

    /// A Run's manifest; `None` when it has none (no export finished).
    pub async fn manifest(
        &self,
        namespace: &str,
        uid: &str,
    ) -> Result<Option<Manifest>, StoreError> {
        self.manifest_of(namespace, uid, Scope::Run).await
    }

    /// The artifact of a Run named `name`, from the manifest that lists it:
    /// the Run's, else, for `invocations/{segment}/…`, that invocation's.
    pub async fn find(
        &self,
        namespace: &str,
        uid: &str,
        name: &str,
    ) -> Result<Option<ArtifactRef>, StoreError> {
        if let Some(found) = self
            .manifest(namespace, uid)
            .await?
            .and_then(|m| m.get(name).cloned())
        {
            return Ok(Some(found));
        }
        let invocation = name
            .strip_prefix(INVOCATIONS)
            .and_then(|rest| rest.strip_prefix('/'))
            .and_then(|rest| rest.split_once('/'))
            .map(|(seg, _)| seg);
        let Some(seg) = invocation else {
            return Ok(None);
        };
        Ok(self
            .manifest_of(namespace, uid, Scope::Invocation(seg))
            .await?
            .and_then(|m| m.get(name).cloned()))
    }

    /// The manifest of an export of `scope`; `None` when there is none.
    pub async fn manifest_of(
        &self,
        namespace: &str,
        uid: &str,
        scope: Scope<'_>,
    ) -> Result<Option<Manifest>, StoreError> {
        let got = match self
            .inner
            .get(&self.manifest_key(namespace, uid, scope))
            .await
        {
            Ok(got) => got,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        if got.meta.size > MAX_MANIFEST_BYTES {
            return Err(StoreError::Unavailable(format!(
                "the manifest of run {uid} is {} bytes, over the {MAX_MANIFEST_BYTES} read",
                got.meta.size
            )));
        }
        let body = got.bytes().await?;
        serde_json::from_slice(&body).map(Some).map_err(|e| {
            StoreError::Unavailable(format!("the manifest of run {uid} is unreadable: {e}"))
        })
    }

    /// Opens the artifact `name` of a Run for reading, `range` of it when
    /// given (bounded by the caller to the object's size, non-empty).
    pub async fn read(
        &self,
        namespace: &str,
        uid: &str,
        name: &str,
        range: Option<Range<u64>>,
    ) -> Result<Read, StoreError> {
        self.get(&self.file_key(namespace, uid, name), range).await
    }

    /// Deletes everything of a Run — its manifest first, so nothing is
    /// served from then on, then its files — and returns how many objects
    /// went.
    pub async fn delete_run(&self, namespace: &str, uid: &str) -> Result<usize, StoreError> {
        self.delete_scope(namespace, uid, Scope::Run).await
    }

    /// Deletes what an export of `scope` stored, its manifest first: the
    /// whole Run's ([`Self::delete_run`]), or one invocation's.
    pub async fn delete_scope(
        &self,
        namespace: &str,
        uid: &str,
        scope: Scope<'_>,
    ) -> Result<usize, StoreError> {
        let prefix = match scope {
            Scope::Run => self.run_prefix(namespace, uid),
            Scope::Invocation(seg) => Path::from(format!(
                "{}/files/{INVOCATIONS}/{seg}",
                self.run_prefix(namespace, uid)
            )),
        };
        // The manifest first: from here on nothing is served.
        match self
            .inner
            .delete(&self.manifest_key(namespace, uid, scope))
            .await
        {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(e.into()),
        }
        let keys = self
            .inner
            .list(Some(&prefix))
            .map(|m| m.map(|m| m.location));
        let mut deleted = 0;
        let mut results = self.inner.delete_stream(keys.boxed());
        while let Some(r) = results.next().await {
            match r {
                Ok(_) => deleted += 1,
                Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(deleted)
    }

    /// Every Run with anything stored, as `(namespace, uid)` (for the
    /// sweep).
    pub async fn stored_runs(&self) -> Result<Vec<(String, String)>, StoreError> {
        let root = self.prefix.as_deref().map(Path::from);
        let namespaces = self.inner.list_with_delimiter(root.as_ref()).await?;
        let mut out = Vec::new();
        for ns in namespaces.common_prefixes {
            let Some(name) = ns.filename().map(str::to_owned) else {
                continue;
            };
            for uid in self.runs(&name).await? {
                out.push((name.clone(), uid));
            }
        }
        Ok(out)
    }

    /// The Run UIDs with anything stored in `namespace` (for the orphan
    /// sweep).
    pub async fn runs(&self, namespace: &str) -> Result<Vec<String>, StoreError> {
        let prefix = match &self.prefix {
            Some(p) => Path::from(format!("{p}/{namespace}")),
            None => Path::from(namespace),
        };
        let listed = self.inner.list_with_delimiter(Some(&prefix)).await?;
        Ok(listed
            .common_prefixes
            .iter()
            .filter_map(|p| p.filename().map(str::to_owned))
            .collect())
    }
}

enum Sink {
    Whole(Vec<u8>),
    Parts(WriteMultipart),
}

/// One artifact being uploaded: its bytes are hashed as they pass.
pub struct Upload {
    store: Arc<dyn ObjectStore>,
    key: Path,
    uri: String,
    sink: Sink,
    hash: Sha256,
    written: u64,
}

impl std::fmt::Debug for Upload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upload")
            .field("uri", &self.uri)
            .field("written", &self.written)
            .finish_non_exhaustive()
    }
}

impl Upload {
    /// Bytes written so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Writes the next bytes; waits while the parts in flight are at their
    /// bound.
    pub async fn write(&mut self, data: &[u8]) -> Result<(), StoreError> {
        self.hash.update(data);
        self.written += data.len() as u64;
        match &mut self.sink {
            Sink::Whole(buf) => buf.extend_from_slice(data),
            Sink::Parts(parts) => {
                parts.wait_for_capacity(PARTS_IN_FLIGHT).await?;
                parts.write(data);
            }
        }
        Ok(())
    }

    /// Completes the upload: the object exists from here on.
    pub async fn finish(self, name: &str) -> Result<ArtifactRef, StoreError> {
        match self.sink {
            Sink::Whole(buf) => {
                self.store.put(&self.key, PutPayload::from(buf)).await?;
            }
            Sink::Parts(parts) => {
                parts.finish().await?;
            }
        }
        let sha256 = self
            .hash
            .finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        Ok(ArtifactRef {
            name: name.to_owned(),
            uri: self.uri,
            size: self.written,
            sha256,
        })
    }

    /// Gives the upload up (its parts are deleted).
    pub async fn abort(self) {
        if let Sink::Parts(parts) = self.sink
            && let Err(e) = parts.abort().await
        {
            tracing::debug!(error = %e, "could not abort a multipart upload");
        }
    }
}
