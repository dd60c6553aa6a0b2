use crate::admission::LimitError;
use crate::auth::{AuthError, Verb};
use crate::rejection;
use crate::table::RouteError;
use std::sync::Arc;

use kruntimes_proto::api::{ApiError, PathError};
use kruntimes_proto::ownership::v1::{OwnershipEntry, Phase};

fn answer(r: &ApiError) -> (u16, &'static str, &str) {
    (r.status(), r.code.as_str(), r.message.as_ref())
}

#[test]
fn path_errors_are_400_invalid_path() {
    let r = ApiError::from(PathError::InvalidSegment("namespace"));
    assert_eq!(
        answer(&r),
        (400, "InvalidPath", "invalid namespace in path")
    );
    let r = ApiError::from(PathError::UnknownRoute);
    assert_eq!(answer(&r), (400, "InvalidPath", "no such route"));
    assert_eq!(
        answer(&ApiError::not_a_run_route()),
        (400, "InvalidPath", "not a Run route")
    );
}

#[test]
fn limit_violations_get_their_own_statuses() {
    let cases = [
        (LimitError::HeadersTooLarge, 431, "HeadersTooLarge"),
        (LimitError::InvalidContentLength, 400, "BadRequest"),
        (LimitError::BodyTooLarge(1024), 413, "PayloadTooLarge"),
        (LimitError::InvalidInvocationId, 400, "InvalidInvocationId"),
        (LimitError::Overloaded, 503, "Overloaded"),
    ];
    for (e, status, code) in cases {
        let r = ApiError::from(e);
        assert_eq!((r.status(), r.code.as_str()), (status, code), "{e:?}");
        assert_eq!(r.message, e.to_string());
    }
    assert_eq!(
        ApiError::from(LimitError::BodyTooLarge(1024)).message,
        "body exceeds 1024 bytes"
    );
}

#[test]
fn rejected_credentials_are_401_and_an_unreachable_backend_503() {
    let r = ApiError::from(AuthError::Unauthenticated("token expired".into()));
    assert_eq!(answer(&r), (401, "Unauthenticated", "token expired"));
    let r = ApiError::from(AuthError::Unavailable("tokenreview timed out".into()));
    assert_eq!(
        answer(&r),
        (503, "AuthUnavailable", "tokenreview timed out")
    );
    assert_eq!(
        answer(&ApiError::missing_token()),
        (401, "Unauthenticated", "missing bearer token")
    );
}

#[test]
fn denied_callers_are_told_who_they_are_and_what_they_may_not_use() {
    let r = ApiError::forbidden("eve", Verb::Session.as_str(), "team-a");
    assert_eq!(
        answer(&r),
        (
            403,
            "Forbidden",
            "eve may not use runs/session of this run in namespace team-a"
        )
    );
}

#[test]
fn unknown_runs_are_404_and_unroutable_runs_503() {
    let r = ApiError::from(RouteError::NotFound);
    assert_eq!(r, ApiError::unknown_run());
    assert_eq!(
        answer(&r),
        (404, "NotFound", "no such run in this namespace and runtime")
    );
    let r = ApiError::from(RouteError::NotReady("run is not ready"));
    assert_eq!(answer(&r), (503, "NotReady", "run is not ready"));
    assert_eq!(r.run, None);
    let r = ApiError::from(RouteError::Stale("owner is unreachable"));
    assert_eq!(
        answer(&r),
        (503, "OwnerUnavailable", "owner is unreachable")
    );
    let r = ApiError::wrong_mode("u1", true);
    assert_eq!(answer(&r), (404, "NotFound", "run u1 is not a session run"));
    let r = ApiError::wrong_mode("u1", false);
    assert_eq!(r.message, "run u1 is not a function run");
}

#[test]
fn other_methods_are_405_naming_the_one_the_route_takes() {
    let r = ApiError::method_not_allowed(http::Method::GET.as_str());
    assert_eq!(
        answer(&r),
        (405, "MethodNotAllowed", "this route takes GET")
    );
}

fn entry(phase: Phase, run_phase: &str, reason: &str, message: &str) -> Arc<OwnershipEntry> {
    Arc::new(OwnershipEntry {
        run_name: "hello".into(),
        phase: phase as i32,
        run_phase: run_phase.into(),
        reason: reason.into(),
        message: message.into(),
        ..Default::default()
    })
}

#[test]
fn pending_runs_are_503_with_the_reason_they_wait() {
    let r = ApiError::from(RouteError::Pending(entry(
        Phase::Pending,
        "",
        "NoIdlePod",
        "",
    )));
    assert_eq!(
        answer(&r),
        (503, "NotReady", "run hello is pending (NoIdlePod)")
    );
    let body = r.body(None).error;
    assert_eq!(
        (body.phase.as_deref(), body.reason.as_deref()),
        (Some("Pending"), Some("NoIdlePod"))
    );
    let r = ApiError::from(RouteError::Pending(entry(Phase::Pending, "", "", "")));
    assert_eq!(r.message, "run hello is pending");
    assert_eq!(r.body(None).error.reason, None);
}

#[test]
fn failed_runs_are_409_and_ended_ones_410_saying_why_without_retry_after() {
    let cases = [
        (
            entry(
                Phase::Failed,
                "Failed",
                "RegistrationFailed",
                "SyntaxError: expected ':' (main.py, line 1)",
            ),
            409,
            "RunFailed",
            "run hello failed (RegistrationFailed): SyntaxError: expected ':' (main.py, line 1); it will not serve again",
        ),
        (
            entry(
                Phase::Failed,
                "Timeout",
                "IdleTimeout",
                "no activity within idleTimeoutSeconds",
            ),
            410,
            "RunEnded",
            "run hello has ended: Timeout (IdleTimeout): no activity within idleTimeoutSeconds; it will not serve again",
        ),
        (
            entry(Phase::Failed, "Succeeded", "Drained", ""),
            410,
            "RunEnded",
            "run hello has ended: Succeeded (Drained); it will not serve again",
        ),
        (
            entry(Phase::Draining, "Finalizing", "Draining", ""),
            410,
            "RunEnded",
            "run hello is finalizing (Draining); it will not serve again",
        ),
        // The owner's own word on idle expiry, before the control plane's.
        (
            entry(Phase::Failed, "", "IdleTimeout", ""),
            410,
            "RunEnded",
            "run hello has ended (IdleTimeout); it will not serve again",
        ),
    ];
    for (e, status, code, message) in cases {
        let r = ApiError::from(RouteError::Ended(e.clone()));
        assert_eq!(answer(&r), (status, code, message));
        assert_eq!(r.code.retry_after_secs(), None, "{code}");
        let body = r.body(Some("inv")).error;
        let phase = (!e.run_phase.is_empty()).then(|| e.run_phase.clone());
        assert_eq!(body.phase, phase);
        assert_eq!(body.reason.as_deref(), Some(e.reason.as_str()));
    }
}

fn proxy_failure(etype: pingora::ErrorType) -> Option<(u16, &'static str)> {
    let r = rejection::of_proxy_failure(&pingora::Error::new(etype), false)?;
    Some((r.status(), r.code.as_str()))
}

#[test]
fn owners_that_cannot_be_reached_are_503_and_slow_ones_504() {
    use pingora::ErrorType::*;
    for etype in [
        ConnectRefused,
        ConnectTimedout,
        TLSHandshakeFailure,
        InvalidCert,
    ] {
        assert_eq!(proxy_failure(etype), Some((503, "OwnerUnavailable")));
    }
    for etype in [ReadTimedout, WriteTimedout] {
        assert_eq!(proxy_failure(etype), Some((504, "DeadlineExceeded")));
    }
    let r = rejection::of_proxy_failure(&pingora::Error::new(ReadTimedout), true).unwrap();
    assert_eq!(r.message, "owner did not answer before the deadline");
    let upstream = pingora::Error::new(ConnectionClosed).into_up();
    let r = rejection::of_proxy_failure(&upstream, false).unwrap();
    assert_eq!(
        answer(&r),
        (503, "OwnerUnavailable", "owner is unreachable")
    );
}

#[test]
fn an_owner_that_breaks_off_after_the_request_was_sent_is_outcome_unknown() {
    use pingora::ErrorType::*;
    for etype in [ConnectionClosed, ReadError, WriteError, H2Error] {
        let upstream = pingora::Error::new(etype.clone()).into_up();
        let r = rejection::of_proxy_failure(&upstream, true).unwrap();
        assert_eq!(
            answer(&r),
            (
                500,
                "OutcomeUnknown",
                "the connection to the owner broke after the request was sent: the call may have run"
            ),
            "{etype:?}"
        );
        assert_eq!(r.code.retry_after_secs(), None);
    }
}

#[test]
fn streamed_bodies_over_the_limit_are_413() {
    let e = pingora::Error::explain(pingora::ErrorType::HTTPStatus(413), "over").into_down();
    let r = rejection::of_proxy_failure(&e, true).unwrap();
    assert_eq!(
        answer(&r),
        (413, "PayloadTooLarge", "request body over the limit")
    );
}

#[test]
fn clients_that_went_away_get_no_answer_and_other_client_errors_400() {
    use pingora::ErrorType::*;
    for etype in [WriteError, ReadError, ConnectionClosed] {
        let name = etype.as_str();
        let e = pingora::Error::new(etype).into_down();
        assert_eq!(rejection::of_proxy_failure(&e, true), None, "{name}");
    }
    let e = pingora::Error::new(InvalidHTTPHeader).into_down();
    let r = rejection::of_proxy_failure(&e, true).unwrap();
    assert_eq!(answer(&r), (400, "BadRequest", "request failed"));
    assert_eq!(proxy_failure(InternalError), Some((500, "Internal")));
}

#[test]
fn a_failure_is_blamed_on_the_side_that_caused_it() {
    use pingora::ErrorType::*;
    use rejection::Blame;
    let blame = |e: Box<pingora::Error>| rejection::blame(&e);
    for etype in [
        WriteError,
        ReadError,
        ConnectionClosed,
        H2Error,
        InvalidHTTPHeader,
    ] {
        let name = etype.as_str();
        assert_eq!(
            blame(pingora::Error::new(etype.clone()).into_down()),
            Blame::Client,
            "{name}"
        );
        assert_eq!(
            blame(pingora::Error::new(etype.clone()).into_up()),
            Blame::Owner,
            "{name}"
        );
        // Unmarked: writing the answer to the client.
        assert_eq!(blame(pingora::Error::new(etype)), Blame::Client, "{name}");
    }
    for etype in [
        ConnectRefused,
        TLSHandshakeFailure,
        ReadTimedout,
        WriteTimedout,
    ] {
        let name = etype.as_str();
        assert_eq!(blame(pingora::Error::new(etype)), Blame::Owner, "{name}");
    }
    assert_eq!(blame(pingora::Error::new(HTTPStatus(413))), Blame::Client);
    assert_eq!(blame(pingora::Error::new(HTTPStatus(502))), Blame::Gateway);
    assert_eq!(blame(pingora::Error::new(InternalError)), Blame::Gateway);
    assert_eq!(
        blame(pingora::Error::new(InternalError).into_down()),
        Blame::Client
    );
}
