use std::time::Duration;

use kruntimes_proto::api::{ErrorCode, SessionOp};
use kruntimes_proto::ownership::v1::{Mode, Phase};
use kruntimes_proto::watch::SourceUpdate;

use super::*;
use crate::table::fixtures::{W, owned_table};

fn target<'a>(
    namespace: &'a str,
    runtime: &'a str,
    uid: &'a str,
    session: Option<SessionOp>,
) -> RunTarget<'a> {
    RunTarget {
        namespace,
        runtime,
        uid,
        session,
        artifacts: false,
    }
}

fn invoke(uid: &str) -> RunTarget<'_> {
    target("default", "python", uid, None)
}

fn table(now: Instant) -> Table {
    owned_table(
        now,
        &[
            ("f1", Mode::Function, Phase::Ready),
            ("s1", Mode::Session, Phase::Ready),
            ("pending", Mode::Function, Phase::Pending),
        ],
    )
}

/// The route of `t`, looked up in `table` at `now`.
fn route(table: &Table, t: &RunTarget<'_>, now: Instant) -> Result<Route, ApiError> {
    lookup(table, t, now).into_route(t)
}

#[test]
fn a_ready_run_of_the_routes_mode_is_routed_to_its_owner() {
    let now = Instant::now();
    let l = lookup(&table(now), &invoke("f1"), now);
    assert_eq!(l.run_name(), Some("run-f1"));
    let r = l.into_route(&invoke("f1")).unwrap();
    assert_eq!((r.address(), r.pod_uid()), ("10.0.0.1:1", "pod-a"));
    let s1 = target("default", "python", "s1", Some(SessionOp::Execute));
    assert!(route(&table(now), &s1, now).is_ok());
}

#[test]
fn an_unknown_uid_is_404_and_has_no_name() {
    let now = Instant::now();
    let l = lookup(&table(now), &invoke("nope"), now);
    assert_eq!(l.run_name(), None);
    assert_eq!(l.into_route(&invoke("nope")), Err(ApiError::unknown_run()));
}

#[test]
fn a_uid_of_another_namespace_or_runtime_is_404_and_has_no_name() {
    let now = Instant::now();
    for t in [
        target("other", "python", "f1", None),
        target("default", "bash", "f1", None),
    ] {
        let l = lookup(&table(now), &t, now);
        assert_eq!(l.run_name(), None);
        assert_eq!(l.into_route(&t), Err(ApiError::unknown_run()));
    }
}

#[test]
fn a_run_of_the_other_mode_is_404() {
    let now = Instant::now();
    let r = route(&table(now), &invoke("s1"), now).unwrap_err();
    assert_eq!(r, ApiError::wrong_mode("s1", false));
    let session = target("default", "python", "f1", Some(SessionOp::Status));
    let r = route(&table(now), &session, now).unwrap_err();
    assert_eq!(
        (r.status(), r.message.as_ref()),
        (404, "run f1 is not a session run")
    );
}

#[test]
fn a_known_run_that_is_not_ready_is_503_with_retry_after_and_keeps_its_name() {
    let now = Instant::now();
    let l = lookup(&table(now), &invoke("pending"), now);
    // Authorization still names the Run: only an allowed caller learns it
    // is not ready.
    assert_eq!(l.run_name(), Some("run-pending"));
    let r = l.into_route(&invoke("pending")).unwrap_err();
    assert_eq!(r.code, ErrorCode::NotReady);
    assert_eq!((r.status(), r.code.retry_after_secs()), (503, Some(1)));
}

#[test]
fn a_stale_owner_is_503_owner_unavailable() {
    let now = Instant::now();
    let mut t = table(now);
    t.apply_runtimed("10.0.0.1:1", SourceUpdate::Lost, now);
    let later = now + W + Duration::from_secs(1);
    let l = lookup(&t, &invoke("f1"), later);
    assert_eq!(l.run_name(), Some("run-f1"));
    let r = l.into_route(&invoke("f1")).unwrap_err();
    assert_eq!(r.code, ErrorCode::OwnerUnavailable);
    assert_eq!(r.code.retry_after_secs(), Some(1));
}

#[test]
fn a_stale_control_plane_is_503_for_every_run() {
    let now = Instant::now();
    let mut t = table(now);
    t.apply_control_plane(SourceUpdate::Lost, now);
    let later = now + W;
    let r = route(&t, &invoke("f1"), later).unwrap_err();
    assert_eq!(
        (r.code, r.message.as_ref()),
        (ErrorCode::OwnerUnavailable, "control plane table is stale")
    );
}
