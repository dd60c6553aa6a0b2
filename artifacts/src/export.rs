//! The export of a Run's artifacts directory: the stream the Runtime
//! Server sends (`ArtifactRuntime/CollectArtifacts`), checked again here —
//! the server is on the untrusted side — and uploaded.

use futures::{Stream, StreamExt as _};
use kruntimes_api::ArtifactRef;
use kruntimes_proto::runtime::v1::{ArtifactChunk, artifact_chunk::Part};

use crate::store::{Manifest, Scope, Store, StoreError, Upload};

/// Bounds of one export.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most files.
    pub max_files: u32,
    /// Largest file, bytes.
    pub max_file_bytes: u64,
    /// Largest sum of all files, bytes.
    pub max_total_bytes: u64,
}

impl Default for Limits {
    /// 1,000 files, 1 GiB each, 4 GiB in all.
    fn default() -> Self {
        Self {
            max_files: 1000,
            max_file_bytes: 1 << 30,
            max_total_bytes: 4 << 30,
        }
    }
}

/// Why an export failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExportError {
    /// An entry cannot be an artifact (or the directory crosses a bound):
    /// exporting again fails the same way.
    #[error("{}", invalid_message(name, why))]
    Invalid {
        /// The entry, relative to the artifacts directory (empty for the
        /// directory as a whole).
        name: String,
        /// Why.
        why: String,
    },
    /// The store failed; a later export may succeed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Reading the directory back from the Runtime Server failed; a later
    /// export may succeed.
    #[error("reading the artifacts from the runtime server failed: {0}")]
    Source(String),
}

fn invalid_message(name: &str, why: &str) -> String {
    if name.is_empty() {
        format!("the artifacts directory is invalid: {why}")
    } else {
        format!("artifact {name:?} is invalid: {why}")
    }
}

impl ExportError {
    /// Whether exporting again may succeed.
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Invalid { .. } => false,
            Self::Store(e) => !matches!(e, StoreError::Config(_)),
            Self::Source(_) => true,
        }
    }

    fn invalid(name: &str, why: impl Into<String>) -> Self {
        Self::Invalid {
            name: name.to_owned(),
            why: why.into(),
        }
    }
}

/// The file being received.
struct Open {
    /// As the stream names it.
    name: String,
    /// As the Run names it ([`Scope::name`]).
    full: String,
    size: u64,
    upload: Upload,
}

/// Exports what `chunks` carries as the artifacts of Run `uid` in
/// `namespace`, of `scope`: replaces whatever an earlier export of the same
/// scope stored, uploads each file as it arrives (never more than an
/// upload's parts in memory), then writes the manifest. An invocation's
/// export that carries no file does not reach the store at all. Returns the refs,
/// in the order received, named as the Run names them
/// ([`Scope::name`]); errors name files as the stream did.
pub async fn export<S>(
    store: &Store,
    namespace: &str,
    uid: &str,
    scope: Scope<'_>,
    chunks: S,
    limits: &Limits,
) -> Result<Vec<ArtifactRef>, ExportError>
where
    S: Stream<Item = Result<ArtifactChunk, String>>,
{
    // An earlier attempt's files are not this one's. An invocation's
    // export touches the store only once a file comes: most invocations
    // leave nothing, and they neither wait for nor depend on the store.
    let mut replaced = false;
    if scope == Scope::Run {
        store.delete_scope(namespace, uid, scope).await?;
        replaced = true;
    }
    let mut chunks = std::pin::pin!(chunks);
    let mut refs = Vec::new();
    let mut total = 0u64;
    let mut open: Option<Open> = None;
    let result = async {
        while let Some(chunk) = chunks.next().await {
            let chunk = chunk.map_err(ExportError::Source)?;
            match chunk.part {
                Some(Part::File(f)) => {
                    if let Some(done) = open.take() {
                        refs.push(close(done).await?);
                    }
                    if let Some(why) = kruntimes_proto::api::artifact_name(&f.name) {
                        return Err(ExportError::invalid(&f.name, why));
                    }
                    let full = scope.name(&f.name);
                    if let Some(why) = kruntimes_proto::api::artifact_name(&full) {
                        return Err(ExportError::invalid(&f.name, format!("as {full:?}: {why}")));
                    }
                    if refs.len() >= limits.max_files as usize {
                        return Err(ExportError::invalid(
                            "",
                            format!("more than {} files", limits.max_files),
                        ));
                    }
                    if refs.iter().any(|r: &ArtifactRef| r.name == full) {
                        return Err(ExportError::invalid(&f.name, "sent twice"));
                    }
                    if f.size > limits.max_file_bytes {
                        return Err(ExportError::invalid(
                            &f.name,
                            format!(
                                "{} bytes, over the {}-byte bound of one file",
                                f.size, limits.max_file_bytes
                            ),
                        ));
                    }
                    total = total.saturating_add(f.size);
                    if total > limits.max_total_bytes {
                        return Err(ExportError::invalid(
                            &f.name,
                            format!(
                                "the files add up to more than the {}-byte bound",
                                limits.max_total_bytes
                            ),
                        ));
                    }
                    if !replaced {
                        store.delete_scope(namespace, uid, scope).await?;
                        replaced = true;
                    }
                    let key = store.file_key(namespace, uid, &full);
                    open = Some(Open {
                        upload: store.upload(key, f.size).await?,
                        name: f.name,
                        full,
                        size: f.size,
                    });
                }
                Some(Part::Data(data)) => {
                    let Some(o) = open.as_mut() else {
                        return Err(ExportError::Source("content before any file".into()));
                    };
                    if o.upload.written() + data.len() as u64 > o.size {
                        return Err(ExportError::invalid(
                            &o.name,
                            format!("it grew past the {} bytes it had when read", o.size),
                        ));
                    }
                    o.upload.write(&data).await?;
                }
                Some(Part::Refused(r)) => {
                    return Err(ExportError::invalid(&r.name, r.reason));
                }
                None => return Err(ExportError::Source("an empty chunk".into())),
            }
        }
        if let Some(done) = open.take() {
            refs.push(close(done).await?);
        }
        Ok(())
    }
    .await;
    if let Err(e) = result {
        if let Some(o) = open {
            o.upload.abort().await;
        }
        return Err(e);
    }
    if !replaced {
        return Ok(refs);
    }
    store
        .write_manifest(
            namespace,
            uid,
            scope,
            &Manifest {
                artifacts: refs.clone(),
            },
        )
        .await?;
    Ok(refs)
}

async fn close(o: Open) -> Result<ArtifactRef, ExportError> {
    if o.upload.written() != o.size {
        let written = o.upload.written();
        o.upload.abort().await;
        return Err(ExportError::invalid(
            &o.name,
            format!(
                "{written} bytes were read of the {} it had when listed (it changed while exported)",
                o.size
            ),
        ));
    }
    Ok(o.upload.finish(&o.full).await?)
}
