use super::*;

#[test]
fn every_code_maps_to_the_documented_status() {
    assert_eq!(ErrorCode::InvalidJson.status(), 400);
    assert_eq!(ErrorCode::Unauthenticated.status(), 401);
    assert_eq!(ErrorCode::Forbidden.status(), 403);
    assert_eq!(ErrorCode::NotFound.status(), 404);
    assert_eq!(ErrorCode::PayloadTooLarge.status(), 413);
    assert_eq!(ErrorCode::HeadersTooLarge.status(), 431);
    assert_eq!(ErrorCode::Busy.status(), 429);
    assert_eq!(ErrorCode::OwnerUnavailable.status(), 503);
    assert_eq!(ErrorCode::FunctionError.status(), 500);
    assert_eq!(ErrorCode::DeadlineExceeded.status(), 504);
    assert_eq!(ErrorCode::RunFailed.status(), 409);
    assert_eq!(ErrorCode::RunEnded.status(), 410);
    assert_eq!(ErrorCode::OutcomeUnknown.status(), 500);
    assert_eq!(ErrorCode::RunEnded.retry_after_secs(), None);
    assert_eq!(ErrorCode::Busy.retry_after_secs(), Some(1));
    assert_eq!(ErrorCode::NotFound.retry_after_secs(), None);
}

#[test]
fn all_lists_every_code_once_and_each_is_its_own_wire_name() {
    let names: std::collections::BTreeSet<&str> =
        ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
    assert_eq!(names.len(), ErrorCode::ALL.len());
    for c in ErrorCode::ALL {
        let wire = serde_json::to_value(c).unwrap();
        assert_eq!(wire, c.as_str());
        // A new variant missing from ALL fails this match.
        match c {
            ErrorCode::InvalidPath
            | ErrorCode::InvalidJson
            | ErrorCode::InvalidInvocationId
            | ErrorCode::BadRequest
            | ErrorCode::MethodNotAllowed
            | ErrorCode::Unauthenticated
            | ErrorCode::Forbidden
            | ErrorCode::NotFound
            | ErrorCode::PayloadTooLarge
            | ErrorCode::HeadersTooLarge
            | ErrorCode::Busy
            | ErrorCode::Conflict
            | ErrorCode::NotReady
            | ErrorCode::RunEnded
            | ErrorCode::RunFailed
            | ErrorCode::OwnerUnavailable
            | ErrorCode::StaleOwner
            | ErrorCode::Overloaded
            | ErrorCode::AuthUnavailable
            | ErrorCode::FunctionError
            | ErrorCode::WorkerCrashed
            | ErrorCode::InvalidOutput
            | ErrorCode::DeadlineExceeded
            | ErrorCode::OutcomeUnknown
            | ErrorCode::RangeNotSatisfiable
            | ErrorCode::ArtifactStoreUnavailable
            | ErrorCode::Internal => {}
        }
    }
}

#[test]
fn a_runs_state_is_in_the_body_only_when_given_and_not_empty() {
    let plain = ApiError::new(ErrorCode::NotReady, "later").body(None);
    let text = String::from_utf8(plain.to_json()).unwrap();
    assert!(
        !text.contains("phase") && !text.contains("reason"),
        "{text}"
    );
    let ended = ApiError::new(ErrorCode::RunEnded, "gone").with_run_state("Timeout", "IdleTimeout");
    let body = ended.body(Some("i"));
    assert_eq!(body.error.phase.as_deref(), Some("Timeout"));
    assert_eq!(body.error.reason.as_deref(), Some("IdleTimeout"));
    let back: ErrorBody = serde_json::from_slice(&body.to_json()).unwrap();
    assert_eq!(back, body);
    let no_reason = ApiError::new(ErrorCode::RunFailed, "x").with_run_state("Failed", "");
    assert_eq!(no_reason.body(None).error.reason, None);
}

#[test]
fn error_body_round_trips_and_bounds_message() {
    let body = ErrorBody::new(ErrorCode::Busy, "é".repeat(5000), Some("inv-1"));
    assert!(body.error.message.len() <= MAX_ERROR_MESSAGE_BYTES);
    let back: ErrorBody = serde_json::from_slice(&body.to_json()).unwrap();
    assert_eq!(back, body);
    let text = String::from_utf8(body.to_json()).unwrap();
    assert!(text.contains("\"code\":\"Busy\""));
    assert!(text.contains("\"invocationId\":\"inv-1\""));
}

#[test]
fn every_code_has_a_description_and_only_429_and_503_ask_for_a_retry() {
    for c in ErrorCode::ALL {
        assert!(!c.description().is_empty(), "{c:?}");
        assert!(!c.description().contains('\n'), "{c:?}: one line");
        assert!(!c.description().contains('|'), "{c:?}: no table separator");
        let retry = matches!(c.status(), 429 | 503);
        assert_eq!(c.retry_after_secs().is_some(), retry, "{c:?}");
    }
}

#[test]
fn the_table_lists_every_code_once_by_status() {
    let table = error_table();
    let rows: Vec<&str> = table.lines().skip(2).collect();
    assert_eq!(rows.len(), ErrorCode::ALL.len());
    let statuses: Vec<u16> = rows
        .iter()
        .map(|r| r.split('|').nth(1).unwrap().trim().parse().unwrap())
        .collect();
    let mut sorted = statuses.clone();
    sorted.sort();
    assert_eq!(statuses, sorted);
    for c in ErrorCode::ALL {
        let cell = format!("| `{}` |", c.as_str());
        assert_eq!(table.matches(&cell).count(), 1, "{c:?}");
    }
    assert!(table.contains("| 503 | `NotReady` | `Retry-After: 1` |"));
    assert!(table.contains("| 500 | `Internal` | no |"));
}

#[test]
fn api_errors_render_their_code_status_and_bounded_message() {
    let e = ApiError::new(ErrorCode::Busy, "one at a time");
    assert_eq!(
        (e.status(), e.to_string().as_str()),
        (429, "Busy: one at a time")
    );
    let body = e.body(Some("inv-1"));
    assert_eq!(body.error.code, ErrorCode::Busy);
    assert_eq!(body.error.invocation_id.as_deref(), Some("inv-1"));
    let long = ApiError::new(ErrorCode::Internal, "x".repeat(10_000));
    assert_eq!(long.body(None).error.message.len(), MAX_ERROR_MESSAGE_BYTES);
    assert_eq!(
        ApiError::from(PathError::InvalidSegment("namespace")),
        ApiError::new(ErrorCode::InvalidPath, "invalid namespace in path")
    );
    assert_eq!(
        ApiError::forbidden("eve", "session", "team-a").message,
        "eve may not use runs/session of this run in namespace team-a"
    );
    assert_eq!(ApiError::unknown_run().status(), 404);
    assert_eq!(
        ApiError::wrong_mode("u1", true).message,
        "run u1 is not a session run"
    );
    assert_eq!(ApiError::method_not_allowed("POST").status(), 405);
}
