//! A session's files, through the Runtime Server: the queued mutations
//! (`FileOperation`), and reads and listings outside the queue (`ReadFile`,
//! `ListFiles`). The server resolves every path beneath the workspace; its
//! refusals land in the public error table here.

use kruntimes_proto::api::ErrorCode;
use kruntimes_proto::runtime::v1 as rt;
use kruntimes_proto::runtime::{ErrorKind, ServerError};
use serde::{Deserialize, Serialize};

use super::ops::MAX_FILE_BYTES;
use crate::api_error::ApiError;
use crate::runtime::Client;

/// A refusal of the server's, as the API reports it.
pub fn api_error(e: ServerError) -> ApiError {
    let code = match e.kind {
        ErrorKind::Invalid => ErrorCode::InvalidPath,
        ErrorKind::NotFound => ErrorCode::NotFound,
        ErrorKind::TooLarge => ErrorCode::PayloadTooLarge,
        ErrorKind::Refused => ErrorCode::BadRequest,
        ErrorKind::Exhausted => ErrorCode::Busy,
        ErrorKind::Unavailable => ErrorCode::NotReady,
        ErrorKind::Internal => ErrorCode::Internal,
    };
    let message = match code {
        ErrorCode::NotReady => format!("the runtime server is unavailable: {}", e.message),
        _ => e.message,
    };
    ApiError::new(code, message)
}

/// Runs one file mutation; the error is the operation's failure message.
pub async fn mutate(mut client: Client, req: rt::FileOperationRequest) -> Result<(), String> {
    client
        .sessions
        .file_operation(req)
        .await
        .map(drop)
        .map_err(|s| api_error(s.into()).message.into_owned())
}

/// Reads a whole file (≤ 32 MiB).
pub async fn read(mut client: Client, run_uid: &str, path: &str) -> Result<Vec<u8>, ApiError> {
    let req = rt::ReadFileRequest {
        run_uid: run_uid.to_owned(),
        path: path.to_owned(),
        max_bytes: MAX_FILE_BYTES as u64,
    };
    match client.sessions.read_file(req).await {
        Ok(r) => Ok(r.into_inner().content),
        Err(s) => Err(api_error(s.into())),
    }
}

/// One listing entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// File name.
    pub name: String,
    /// `file`, `directory`, `symlink` or `other`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Size in bytes (of the link itself for symlinks).
    pub size: u64,
}

/// A page of a listing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Listing {
    /// Entries in UTF-8 byte order of their names.
    pub entries: Vec<Entry>,
    /// Token of the next page, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_page_token: Option<String>,
}

impl From<rt::ListFilesResponse> for Listing {
    fn from(r: rt::ListFilesResponse) -> Self {
        Self {
            entries: r
                .entries
                .into_iter()
                .map(|e| Entry {
                    name: e.name,
                    kind: e.r#type,
                    size: e.size,
                })
                .collect(),
            next_page_token: (!r.next_page_token.is_empty()).then_some(r.next_page_token),
        }
    }
}

/// Lists a directory, `limit` entries after the page token.
pub async fn list(
    mut client: Client,
    run_uid: &str,
    path: &str,
    limit: Option<usize>,
    page_token: Option<&str>,
) -> Result<Listing, ApiError> {
    let req = rt::ListFilesRequest {
        run_uid: run_uid.to_owned(),
        path: path.to_owned(),
        limit: limit.map_or(0, |l| u32::try_from(l).unwrap_or(u32::MAX)),
        page_token: page_token.unwrap_or_default().to_owned(),
    };
    match client.sessions.list_files(req).await {
        Ok(r) => Ok(r.into_inner().into()),
        Err(s) => Err(api_error(s.into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_servers_refusals_land_in_the_public_error_table() {
        let cases = [
            (ErrorKind::Invalid, 400, ErrorCode::InvalidPath),
            (ErrorKind::NotFound, 404, ErrorCode::NotFound),
            (ErrorKind::TooLarge, 413, ErrorCode::PayloadTooLarge),
            (ErrorKind::Refused, 400, ErrorCode::BadRequest),
            (ErrorKind::Unavailable, 503, ErrorCode::NotReady),
            (ErrorKind::Internal, 500, ErrorCode::Internal),
        ];
        for (kind, status, expected) in cases {
            let e = api_error(ServerError::new(kind, "why"));
            assert_eq!((e.code, e.code.status()), (expected, status), "{kind:?}");
        }
    }

    #[test]
    fn listings_keep_their_wire_shape() {
        let l = Listing::from(rt::ListFilesResponse {
            entries: vec![rt::FileEntry {
                name: "a".into(),
                r#type: "file".into(),
                size: 1,
            }],
            next_page_token: String::new(),
        });
        assert_eq!(
            serde_json::to_value(&l).unwrap(),
            serde_json::json!({"entries": [{"name": "a", "type": "file", "size": 1}]})
        );
    }
}
