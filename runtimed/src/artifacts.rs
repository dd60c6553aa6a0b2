//! Artifacts on runtimed's side: the Runtime's store (runtimed is the one
//! process of the Pod holding its credentials), the export of what a task
//! left in its artifacts directory — read back from the Runtime Server,
//! checked again, uploaded, retried while the store is away for at most
//! the export deadline — and the dataplane route the gateway forwards
//! artifact lists and downloads to.

use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use kruntimes_api::ArtifactRef;
use kruntimes_artifacts::{ByteRange, ExportError, Limits, Scope, Store, StoreError};
use kruntimes_proto::api::ErrorCode;
use kruntimes_proto::ownership::v1 as own;
use kruntimes_proto::runtime::v1 as rt;
use sha2::{Digest as _, Sha256};
use tokio_stream::StreamExt as _;

use crate::api_error::{ApiError, Reply};
use crate::runtime::Link;

/// First pause before an export is tried again; doubled up to
/// [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// Longest pause between two tries of an export.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// Why a Run fails when its artifacts are invalid.
pub const INVALID_REASON: &str = "ArtifactInvalid";
/// Why a Run fails when the store did not take its artifacts in time.
pub const EXPORT_FAILED_REASON: &str = "ArtifactExportFailed";

/// The Runtime's artifact store and the bounds of an export.
#[derive(Debug, Clone)]
pub struct Artifacts {
    /// The store.
    pub store: Store,
    /// Bounds of one export.
    pub limits: Limits,
    /// How long an export is tried before the Run fails.
    pub deadline: Duration,
    /// How long a Run's artifacts are kept after it ended (`None`: until
    /// it is deleted); on a cluster, enforced by the sweep.
    pub retain: Option<Duration>,
    /// Time between two sweeps of the store (Kubernetes mode).
    pub sweep_every: Duration,
    /// How long a stored UID must be unknown before it is an orphan.
    pub orphan_grace: Duration,
}

/// One export: of what, and for how long it is tried.
struct Export<'a> {
    namespace: &'a str,
    uid: &'a str,
    scope: Scope<'a>,
    within: Duration,
}

/// How an export ended, for the Run's status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exported {
    /// Uploaded (possibly nothing).
    Done(Vec<ArtifactRef>),
    /// The Run fails: `reason` ([`INVALID_REASON`] or
    /// [`EXPORT_FAILED_REASON`]) and a message naming the file or the
    /// store's last error.
    Failed {
        /// Machine-readable reason.
        reason: &'static str,
        /// For people.
        message: String,
    },
}

impl Exported {
    /// The outcome as the owner publishes it (at most
    /// [`kruntimes_api::MAX_STATUS_ARTIFACTS`] refs).
    pub fn to_wire(&self) -> own::ExportOutcome {
        match self {
            Self::Done(refs) => own::ExportOutcome {
                artifacts: refs
                    .iter()
                    .take(kruntimes_api::MAX_STATUS_ARTIFACTS)
                    .map(ArtifactRef::to_wire)
                    .collect(),
                ..Default::default()
            },
            Self::Failed { reason, message } => own::ExportOutcome {
                failure: (*reason).to_owned(),
                message: message.clone(),
                ..Default::default()
            },
        }
    }
}

impl Artifacts {
    /// Exports the artifacts directory of Run `uid`: tried again with
    /// backoff while the store (or the stream from the Runtime Server)
    /// fails, until [`Self::deadline`]; an invalid directory fails at once.
    pub async fn export(&self, link: &Link, namespace: &str, uid: &str) -> Exported {
        let export = Export {
            namespace,
            uid,
            scope: Scope::Run,
            within: self.deadline,
        };
        self.export_as(link, export).await
    }

    /// Exports what one invocation of function Run `uid` left in its
    /// artifacts directory, as `invocations/{segment}/…` of the Run, and
    /// empties the directory; tried again while the store fails, for at
    /// most `within`.
    pub async fn export_invocation(
        &self,
        link: &Link,
        namespace: &str,
        uid: &str,
        segment: &str,
        within: Duration,
    ) -> Exported {
        let export = Export {
            namespace,
            uid,
            scope: Scope::Invocation(segment),
            within,
        };
        self.export_as(link, export).await
    }

    /// Empties function Run `uid`'s artifacts directory without reading it
    /// (what an invocation that failed or was abandoned left).
    pub async fn discard(&self, link: &Link, uid: &str) -> Result<(), String> {
        let req = rt::CollectArtifactsRequest {
            run_uid: uid.to_owned(),
            clear: true,
            discard: true,
            ..Default::default()
        };
        let mut stream = match link.client().artifacts.collect_artifacts(req).await {
            Ok(s) => s.into_inner(),
            // A server that gives functions no directory left nothing.
            Err(s) if matches!(s.code(), tonic::Code::Unimplemented | tonic::Code::NotFound) => {
                return Ok(());
            }
            Err(s) => return Err(s.message().to_owned()),
        };
        // Its end says the directory is empty.
        while let Some(chunk) = stream.next().await {
            chunk.map_err(|s| s.message().to_owned())?;
        }
        Ok(())
    }

    async fn export_as(&self, link: &Link, export: Export<'_>) -> Exported {
        let Export {
            namespace,
            uid,
            scope,
            within,
        } = export;
        let deadline = tokio::time::Instant::now() + within;
        let mut backoff = FIRST_BACKOFF;
        let mut tries = 0u32;
        loop {
            tries += 1;
            let err = match self.try_export(link, namespace, uid, scope).await {
                Ok(refs) => {
                    // An invocation that left nothing is not an export.
                    if scope == Scope::Run || !refs.is_empty() {
                        crate::metrics::artifact_export("ok");
                        tracing::info!(run_uid = %uid, artifacts = refs.len(), bytes = refs.iter().map(|r| r.size).sum::<u64>(), tries, "artifacts exported");
                    }
                    return Exported::Done(refs);
                }
                Err(e) => e,
            };
            if !err.is_transient() {
                tracing::warn!(run_uid = %uid, error = %err, "artifacts refused");
                let reason = match err {
                    ExportError::Invalid { .. } => INVALID_REASON,
                    _ => EXPORT_FAILED_REASON,
                };
                crate::metrics::artifact_export(if reason == INVALID_REASON {
                    "invalid"
                } else {
                    "failed"
                });
                return Exported::Failed {
                    reason,
                    message: err.to_string(),
                };
            }
            let now = tokio::time::Instant::now();
            if now + backoff > deadline {
                tracing::warn!(run_uid = %uid, error = %err, tries, "artifact export gave up at its deadline");
                crate::metrics::artifact_export("failed");
                return Exported::Failed {
                    reason: EXPORT_FAILED_REASON,
                    message: format!(
                        "the artifacts could not be exported in {} s ({tries} tries): {err}",
                        within.as_secs()
                    ),
                };
            }
            tracing::info!(run_uid = %uid, error = %err, retry_in_ms = backoff.as_millis() as u64, "artifact export failed; trying again");
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }

    async fn try_export(
        &self,
        link: &Link,
        namespace: &str,
        uid: &str,
        scope: Scope<'_>,
    ) -> Result<Vec<ArtifactRef>, ExportError> {
        let req = rt::CollectArtifactsRequest {
            run_uid: uid.to_owned(),
            max_files: self.limits.max_files,
            max_file_bytes: self.limits.max_file_bytes,
            max_total_bytes: self.limits.max_total_bytes,
            // A function's directory holds one invocation's files: emptied
            // for the next once read (a retry finds it empty only after the
            // store took them all).
            clear: false,
            discard: false,
        };
        let stream = match link.client().artifacts.collect_artifacts(req).await {
            Ok(s) => s.into_inner(),
            // A server that keeps no artifacts directory has nothing to
            // export.
            Err(s) if s.code() == tonic::Code::Unimplemented => {
                tracing::warn!(run_uid = %uid, "the runtime server does not serve ArtifactRuntime: nothing exported");
                return Ok(Vec::new());
            }
            // The server said the call left something (`artifacts_left`),
            // and no longer holds the function (it restarted, or the Run
            // was released meanwhile): what was left is lost, and trying
            // again cannot find it.
            Err(s)
                if s.code() == tonic::Code::NotFound && matches!(scope, Scope::Invocation(_)) =>
            {
                return Err(ExportError::Invalid {
                    name: String::new(),
                    why: format!(
                        "the runtime server no longer holds the function's artifacts directory ({})",
                        s.message()
                    ),
                });
            }
            Err(s) => return Err(ExportError::Source(s.message().to_owned())),
        };
        let chunks = stream.map(|c| c.map_err(|s| s.message().to_owned()));
        kruntimes_artifacts::export(&self.store, namespace, uid, scope, chunks, &self.limits).await
    }

    /// Stages a Run's `spec.inputs.artifacts` on the Runtime Server
    /// (`ArtifactRuntime/StageInputs`) before it starts: each read from the
    /// store — only under the Run's own namespace — within the export's
    /// bounds, its SHA-256 checked before its last bytes are sent (a
    /// mismatch ends the stream short, so the server stages nothing).
    /// `Err` says which input and why.
    pub async fn stage(
        &self,
        link: &Link,
        run: &kruntimes_proto::runtime::v1::RunRef,
        attempt: u64,
        inputs: &[kruntimes_proto::agent::v1::InputArtifact],
    ) -> Result<(), String> {
        let mut keys = Vec::with_capacity(inputs.len());
        for i in inputs {
            let key = self.store.key_of(&i.uri, &run.namespace).ok_or_else(|| {
                format!(
                    "input {:?}: {:?} is not an artifact of namespace {} in this Runtime's store",
                    i.path, i.uri, run.namespace
                )
            })?;
            keys.push((key, i.clone()));
        }
        let (tx, rx) = tokio::sync::mpsc::channel::<rt::StageChunk>(4);
        let store = self.store.clone();
        let limits = self.limits;
        let target = rt::StageTarget {
            run_uid: run.uid.clone(),
            attempt,
        };
        let producer = tokio::spawn(async move {
            let send = |part| {
                let tx = tx.clone();
                async move {
                    tx.send(rt::StageChunk { part: Some(part) })
                        .await
                        .map_err(|_| "the runtime server stopped reading the inputs".to_owned())
                }
            };
            send(rt::stage_chunk::Part::Target(target)).await?;
            let mut total = 0u64;
            for (key, input) in keys {
                let what = format!("input {:?}", input.path);
                let mut read = store.read_key(&key).await.map_err(|e| match e {
                    StoreError::NotFound => format!("{what}: {:?} is not in the store", input.uri),
                    e => format!("{what}: {e}"),
                })?;
                if read.size > limits.max_file_bytes {
                    return Err(format!(
                        "{what}: {} bytes, over the {}-byte bound of one file",
                        read.size, limits.max_file_bytes
                    ));
                }
                total = total.saturating_add(read.size);
                if total > limits.max_total_bytes {
                    return Err(format!(
                        "{what}: the inputs add up to more than the {}-byte bound",
                        limits.max_total_bytes
                    ));
                }
                let mut hash = Sha256::new();
                let check = |hash: Sha256| -> Result<(), String> {
                    let got: String = hash.finalize().iter().map(|b| format!("{b:02x}")).collect();
                    match input.sha256.as_str() {
                        "" => Ok(()),
                        want if want == got => Ok(()),
                        want => Err(format!("{what}: its SHA-256 is {got}, not {want}")),
                    }
                };
                if read.size == 0 {
                    check(hash)?;
                    send(rt::stage_chunk::Part::File(rt::StagedFile {
                        path: input.path.clone(),
                        size: 0,
                    }))
                    .await?;
                    continue;
                }
                send(rt::stage_chunk::Part::File(rt::StagedFile {
                    path: input.path.clone(),
                    size: read.size,
                }))
                .await?;
                // Each chunk is sent once the next arrives: the last waits
                // for the digest.
                let mut held: Option<bytes::Bytes> = None;
                while let Some(chunk) = read.body.next().await {
                    let chunk = chunk.map_err(|e| format!("{what}: {e}"))?;
                    hash.update(&chunk);
                    if let Some(prev) = held.replace(chunk) {
                        send(rt::stage_chunk::Part::Data(prev.to_vec())).await?;
                    }
                }
                check(hash)?;
                if let Some(last) = held {
                    send(rt::stage_chunk::Part::Data(last.to_vec())).await?;
                }
            }
            Ok::<(), String>(())
        });
        let staged = link
            .client()
            .artifacts
            .stage_inputs(tokio_stream::wrappers::ReceiverStream::new(rx))
            .await;
        // The producer's reason first: the server only saw a stream end
        // short.
        match producer.await {
            Ok(Err(why)) => return Err(why),
            Err(e) => return Err(format!("staging the inputs failed: {e}")),
            Ok(Ok(())) => {}
        }
        let staged = staged.map_err(|s| format!("staging the inputs failed: {}", s.message()))?;
        let staged = staged.into_inner();
        tracing::info!(run_uid = %run.uid, attempt, files = staged.files, bytes = staged.bytes, "inputs staged");
        Ok(())
    }

    /// `GET …/runs/{uid}/artifacts`: the Run's artifacts as JSON.
    pub async fn list(&self, namespace: &str, uid: &str) -> Result<Response, ApiError> {
        let manifest = self
            .store
            .manifest(namespace, uid)
            .await
            .map_err(store_error)?
            .unwrap_or_default();
        let body = serde_json::json!({ "artifacts": manifest.artifacts });
        Ok((
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/json")],
            body.to_string(),
        )
            .into_response())
    }

    /// `GET …/runs/{uid}/artifacts/{name}`: the artifact's content, or the
    /// byte range the request's `Range` names, streamed from the store.
    pub async fn download(
        &self,
        namespace: &str,
        uid: &str,
        name: &str,
        headers: &HeaderMap,
        r: &Reply<'_>,
    ) -> Result<Response, ApiError> {
        // The Run's own, or one of its invocations'.
        let found = self
            .store
            .find(namespace, uid, name)
            .await
            .map_err(store_error)?;
        let Some(art) = found else {
            return Err(ApiError::new(
                ErrorCode::NotFound,
                format!("run {uid} has no artifact named {name:?}"),
            ));
        };
        let range = kruntimes_artifacts::parse_range(
            headers.get(header::RANGE).and_then(|v| v.to_str().ok()),
            art.size,
        );
        let part = match range {
            ByteRange::Whole => None,
            ByteRange::Part(r) => Some(r),
            ByteRange::Unsatisfiable => {
                let mut resp = r.error(ApiError::new(
                    ErrorCode::RangeNotSatisfiable,
                    format!(
                        "the range starts at or past the end of the {}-byte artifact",
                        art.size
                    ),
                ));
                resp.headers_mut().insert(
                    header::CONTENT_RANGE,
                    value(&format!("bytes */{}", art.size)),
                );
                return Ok(resp);
            }
        };
        // An empty artifact has nothing to ask the store for.
        let read = if art.size == 0 {
            None
        } else {
            Some(
                self.store
                    .read(namespace, uid, name, part.clone())
                    .await
                    .map_err(|e| match e {
                        StoreError::NotFound => ApiError::new(
                            ErrorCode::NotFound,
                            format!("artifact {name:?} of run {uid} is no longer in the store"),
                        ),
                        e => store_error(e),
                    })?,
            )
        };
        let (status, len) = match &part {
            Some(r) => (StatusCode::PARTIAL_CONTENT, r.end - r.start),
            None => (StatusCode::OK, art.size),
        };
        let body = match read {
            Some(r) => Body::from_stream(r.body),
            None => Body::empty(),
        };
        let mut resp = Response::new(body);
        *resp.status_mut() = status;
        let h = resp.headers_mut();
        h.insert(header::CONTENT_TYPE, value("application/octet-stream"));
        h.insert(header::CONTENT_LENGTH, value(&len.to_string()));
        h.insert(header::ACCEPT_RANGES, value("bytes"));
        h.insert(header::ETAG, value(&format!("\"{}\"", art.sha256)));
        h.insert("x-kruntimes-artifact-sha256", value(&art.sha256));
        h.insert("x-kruntimes-artifact-size", value(&art.size.to_string()));
        let file = name.rsplit('/').next().unwrap_or(name);
        h.insert(
            header::CONTENT_DISPOSITION,
            value(&format!("attachment; filename=\"{file}\"")),
        );
        if let Some(r) = part {
            h.insert(
                header::CONTENT_RANGE,
                value(&format!("bytes {}-{}/{}", r.start, r.end - 1, art.size)),
            );
        }
        Ok(resp)
    }
}

/// A header value of text this module builds (ASCII by construction: sizes,
/// hex digests, artifact names).
fn value(s: &str) -> HeaderValue {
    HeaderValue::from_str(s).unwrap_or_else(|_| HeaderValue::from_static(""))
}

fn store_error(e: StoreError) -> ApiError {
    tracing::warn!(error = %e, "artifact store call failed");
    ApiError::new(ErrorCode::ArtifactStoreUnavailable, e.to_string())
}
