//! `GET …/files:watch?path=&recursive=`: what changes beneath a workspace
//! directory, as NDJSON, until the client goes away or the session ends
//! (bypasses the queue: it reads).

use std::sync::Arc;

use axum::http::Uri;
use axum::response::Response;
use kruntimes_proto::api::ErrorCode;
use kruntimes_proto::runtime::v1 as rt;
use serde_json::{Value, json};

use super::HostedSession;
use crate::api_error::ApiError;

/// A watch event as one NDJSON line: `ready`, `file` (`change`, `path`) or
/// `lost` (`events`).
pub fn event_line(e: rt::watch_event::Event) -> Value {
    use rt::watch_event::Event;
    match e {
        Event::Ready(_) => json!({"type": "ready"}),
        Event::Lost(n) => json!({"type": "lost", "events": n}),
        Event::File(f) => {
            let change = match rt::FileChange::try_from(f.change) {
                Ok(rt::FileChange::Create) => "create",
                Ok(rt::FileChange::Write) => "write",
                Ok(rt::FileChange::Remove) => "remove",
                Ok(rt::FileChange::Rename) => "rename",
                Ok(rt::FileChange::Chmod) => "chmod",
                _ => "other",
            };
            json!({"type": "file", "change": change, "path": f.path})
        }
    }
}

/// Whether the query's `recursive` is set (`true`/`1`; absent: `false`).
pub fn recursive(q: Option<&str>) -> Result<bool, ApiError> {
    match q {
        None | Some("false") | Some("0") => Ok(false),
        Some("true") | Some("1") => Ok(true),
        Some(other) => Err(ApiError::new(
            ErrorCode::BadRequest,
            format!("recursive must be true or false, not {other:?}"),
        )),
    }
}

/// Serves `files:watch`.
pub async fn handle(
    h: &Arc<HostedSession>,
    uri: &Uri,
    invocation_id: &str,
) -> Result<Response, ApiError> {
    let q: std::collections::HashMap<String, String> = axum::extract::Query::try_from_uri(uri)
        .map(|q| q.0)
        .map_err(|e| ApiError::new(ErrorCode::BadRequest, format!("query: {e}")))?;
    h.session.touch();
    let path = q.get("path").map(String::as_str).unwrap_or("");
    kruntimes_proto::runtime::path::normalize(path)
        .map_err(|e| ApiError::new(ErrorCode::InvalidPath, format!("{path}: {e}")))?;
    let req = rt::WatchDirRequest {
        run_uid: h.run.uid.clone(),
        path: path.to_owned(),
        recursive: recursive(q.get("recursive").map(String::as_str))?,
    };
    let events = h
        .session
        .runtime()
        .sessions
        .watch_dir(req)
        .await
        .map_err(|s| {
            let e = super::process::api_error(s.into());
            match e.code {
                // A path that escapes, through a symlink.
                ErrorCode::BadRequest => ApiError::new(ErrorCode::InvalidPath, e.message),
                _ => e,
            }
        })?
        .into_inner();
    Ok(super::ndjson::stream(
        events,
        |e: rt::WatchEvent| Some((event_line(e.event?), false)),
        None,
        invocation_id.to_owned(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_lines_of_the_documented_shape() {
        use rt::watch_event::Event;
        assert_eq!(event_line(Event::Ready(true)), json!({"type": "ready"}));
        assert_eq!(
            event_line(Event::Lost(3)),
            json!({"type": "lost", "events": 3})
        );
        let f = event_line(Event::File(rt::FileEvent {
            change: rt::FileChange::Rename as i32,
            path: "src/a.py".into(),
        }));
        assert_eq!(
            f,
            json!({"type": "file", "change": "rename", "path": "src/a.py"})
        );
    }

    #[test]
    fn recursive_is_a_boolean_or_refused() {
        assert!(!recursive(None).unwrap());
        assert!(recursive(Some("true")).unwrap());
        assert!(!recursive(Some("0")).unwrap());
        assert_eq!(
            recursive(Some("yes")).unwrap_err().code,
            ErrorCode::BadRequest
        );
    }
}
