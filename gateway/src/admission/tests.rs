//! The steps in order: which rejection a request gets, and what admission
//! records about it on the way.

use std::sync::Arc;

use kruntimes_proto::api::ErrorCode;
use kruntimes_proto::ownership::v1::{Mode, Phase};

use super::*;
use crate::auth::testing;
use crate::table::fixtures::owned_table;

const INVOKE: &str = "/v1/namespaces/default/runtimes/python/runs/f1:invoke";
const SESSION: &str = "/v1/namespaces/default/runtimes/python/sessions/5e55/operations:execute";
const UNKNOWN: &str = "/v1/namespaces/default/runtimes/python/runs/0ff:invoke";
const PENDING: &str = "/v1/namespaces/default/runtimes/python/runs/a1:invoke";

struct Fixture {
    admission: Admission,
    gauge: prometheus::IntGauge,
}

fn fixture(auth: bool, max_in_flight: usize) -> Fixture {
    settling_fixture(auth, max_in_flight, std::time::Duration::ZERO)
}

/// Runs `f1` (Ready), `5e55` (Ready session), `a1` (Pending) and `b2`
/// (Running: on its way to Ready).
fn settling_fixture(auth: bool, max_in_flight: usize, settle: std::time::Duration) -> Fixture {
    let table = owned_table(
        Instant::now(),
        &[
            ("f1", Mode::Function, Phase::Ready),
            ("5e55", Mode::Session, Phase::Ready),
            ("a1", Mode::Function, Phase::Pending),
            ("b2", Mode::Function, Phase::Running),
        ],
    );
    let gauge = prometheus::IntGauge::new("in_flight", "test").unwrap();
    let limits = Limits {
        max_body_bytes: 100,
        max_session_body_bytes: 1000,
        max_header_bytes: 200,
        max_in_flight,
        route_settle: settle,
    };
    Fixture {
        admission: Admission::new(
            Arc::new(RwLock::new(table)),
            auth.then(|| Arc::new(testing::cache())),
            limits,
            gauge.clone(),
        ),
        gauge,
    }
}

fn request(method: &str, path: &str, headers: &[(&'static str, &str)]) -> RequestHeader {
    let mut req = RequestHeader::build(method, path.as_bytes(), None).unwrap();
    for (k, v) in headers {
        req.insert_header(*k, *v).unwrap();
    }
    req
}

fn post(path: &str, token: &str) -> RequestHeader {
    request(
        "POST",
        path,
        &[("authorization", &format!("Bearer {token}"))],
    )
}

async fn admit(f: &Fixture, req: &RequestHeader) -> (Result<(), ApiError>, Facts) {
    let mut facts = Facts::default();
    let result = f.admission.admit(req, &mut facts).await;
    (result, facts)
}

async fn code(f: &Fixture, req: &RequestHeader) -> ErrorCode {
    admit(f, req).await.0.unwrap_err().code
}

#[tokio::test]
async fn an_allowed_invoke_is_routed_with_its_subject_and_body_limit() {
    let f = fixture(true, 10);
    let (result, facts) = admit(&f, &post(INVOKE, "alice")).await;
    assert_eq!(result, Ok(()));
    assert_eq!(facts.uid, "f1");
    assert_eq!(facts.session, None);
    assert_eq!(facts.max_body, 100);
    assert_eq!(facts.subject(), Some("alice"));
    assert_eq!(facts.route.as_ref().map(|r| r.pod_uid()), Some("pod-a"));
    assert_eq!(f.gauge.get(), 1, "the slot is held while the request runs");
    drop(facts);
    assert_eq!(f.gauge.get(), 0);
}

#[tokio::test]
async fn a_session_operation_gets_the_session_body_limit() {
    let f = fixture(true, 10);
    let (result, facts) = admit(&f, &post(SESSION, "alice")).await;
    assert_eq!(result, Ok(()));
    assert_eq!(facts.session, Some(SessionOp::Execute));
    assert_eq!(facts.max_body, 1000);
}

#[tokio::test]
async fn oversized_headers_win_over_every_other_rejection() {
    let f = fixture(true, 10);
    let big = "v".repeat(300);
    let req = request("GET", "/nope", &[("x-big", &big)]);
    assert_eq!(code(&f, &req).await, ErrorCode::HeadersTooLarge);
    let (_, facts) = admit(&f, &req).await;
    assert!(facts.uid.is_empty(), "no step after the failed one ran");
}

#[tokio::test]
async fn a_bad_path_is_400_before_the_method_or_the_token_is_looked_at() {
    let f = fixture(true, 10);
    let req = request(
        "GET",
        "/v1/namespaces/Bad/runtimes/python/runs/f1:invoke",
        &[],
    );
    assert_eq!(code(&f, &req).await, ErrorCode::InvalidPath);
}

#[tokio::test]
async fn a_wrong_method_is_405_and_the_uid_is_already_known() {
    let f = fixture(true, 10);
    let (result, facts) = admit(&f, &request("GET", INVOKE, &[])).await;
    assert_eq!(result.unwrap_err().status(), 405);
    assert_eq!(facts.uid, "f1");
}

#[tokio::test]
async fn a_declared_body_over_the_limit_is_413_even_without_a_token() {
    let f = fixture(true, 10);
    let req = request("POST", INVOKE, &[("content-length", "101")]);
    assert_eq!(code(&f, &req).await, ErrorCode::PayloadTooLarge);
    let req = request("POST", SESSION, &[("content-length", "101")]);
    assert_eq!(code(&f, &req).await, ErrorCode::Unauthenticated);
    assert_eq!(
        f.gauge.get(),
        0,
        "size checks come before the in-flight slot"
    );
}

#[tokio::test]
async fn the_in_flight_limit_is_taken_only_after_authorization() {
    let f = fixture(true, 1);
    let (first, held) = admit(&f, &post(INVOKE, "alice")).await;
    assert_eq!(first, Ok(()));
    // Made-up or missing tokens are 401 and take no slot, even when full.
    let (anon, _) = admit(&f, &request("POST", INVOKE, &[])).await;
    assert_eq!(anon, Err(ApiError::missing_token()));
    assert_eq!(
        code(&f, &post(INVOKE, "nobody")).await,
        ErrorCode::Unauthenticated
    );
    assert_eq!(code(&f, &post(INVOKE, "eve")).await, ErrorCode::Forbidden);
    assert_eq!(f.gauge.get(), 1, "only the admitted request holds a slot");
    let (second, rejected) = admit(&f, &post(INVOKE, "alice")).await;
    assert_eq!(second.unwrap_err().code, ErrorCode::Overloaded);
    assert_eq!(
        f.gauge.get(),
        2,
        "a rejected request is in flight until answered"
    );
    drop((held, rejected));
    assert_eq!(admit(&f, &post(INVOKE, "alice")).await.0, Ok(()));
}

#[tokio::test]
async fn a_missing_token_is_401_before_an_unknown_uid_is_revealed() {
    let f = fixture(true, 10);
    let (result, facts) = admit(&f, &request("POST", UNKNOWN, &[])).await;
    assert_eq!(result, Err(ApiError::missing_token()));
    assert_eq!(facts.subject(), None);
}

#[tokio::test]
async fn an_unknown_uid_is_404_for_an_authenticated_caller_and_401_for_others() {
    let f = fixture(true, 10);
    assert_eq!(code(&f, &post(UNKNOWN, "eve")).await, ErrorCode::NotFound);
    assert_eq!(
        code(&f, &post(UNKNOWN, "forged")).await,
        ErrorCode::Unauthenticated
    );
}

#[tokio::test]
async fn a_caller_without_the_grant_is_403_even_for_a_run_that_is_not_ready() {
    let f = fixture(true, 10);
    assert_eq!(code(&f, &post(INVOKE, "eve")).await, ErrorCode::Forbidden);
    assert_eq!(code(&f, &post(PENDING, "eve")).await, ErrorCode::Forbidden);
}

#[tokio::test]
async fn an_allowed_caller_learns_that_the_run_is_not_ready_and_is_logged() {
    let f = fixture(true, 10);
    let (result, facts) = admit(&f, &post(PENDING, "alice")).await;
    assert_eq!(result.unwrap_err().code, ErrorCode::NotReady);
    assert_eq!(facts.subject(), Some("alice"));
    assert!(facts.route.is_none());
}

#[tokio::test]
async fn a_run_of_the_other_mode_is_404_after_authorization() {
    let f = fixture(true, 10);
    let path = "/v1/namespaces/default/runtimes/python/runs/5e55:invoke";
    let (result, facts) = admit(&f, &post(path, "alice")).await;
    assert_eq!(result, Err(ApiError::wrong_mode("5e55", false)));
    assert_eq!(facts.subject(), Some("alice"));
}

#[tokio::test]
async fn without_authentication_no_token_is_needed_and_no_subject_recorded() {
    let f = fixture(false, 10);
    let (result, facts) = admit(&f, &request("POST", INVOKE, &[])).await;
    assert_eq!(result, Ok(()));
    assert_eq!(facts.subject(), None);
    assert_eq!(
        code(&f, &request("POST", UNKNOWN, &[])).await,
        ErrorCode::NotFound
    );
}

const RUNNING: &str = "/v1/namespaces/default/runtimes/python/runs/b2:invoke";

#[tokio::test]
async fn a_run_on_its_way_to_ready_is_routed_once_the_table_converges() {
    let f = settling_fixture(true, 10, std::time::Duration::from_secs(30));
    let table = f.admission.table.clone();
    let ready = tokio::spawn(async move {
        tokio::task::yield_now().await;
        let mut e =
            crate::table::fixtures::assignment("b2", "pod-a", "10.0.0.1:1", 1, Phase::Ready);
        e.mode = Mode::Function as i32;
        table::write(&table).apply_control_plane(
            kruntimes_proto::watch::SourceUpdate::Upsert(Box::new(e)),
            Instant::now(),
        );
    });
    let (result, facts) = admit(&f, &post(RUNNING, "alice")).await;
    ready.await.unwrap();
    assert_eq!(result, Ok(()));
    assert_eq!(facts.route.as_ref().map(|r| r.run_name()), Some("run-b2"));
}

#[tokio::test]
async fn a_run_that_does_not_converge_is_not_ready_after_the_wait() {
    let f = settling_fixture(true, 10, std::time::Duration::from_millis(20));
    assert_eq!(code(&f, &post(RUNNING, "alice")).await, ErrorCode::NotReady);
}

#[tokio::test]
async fn pending_runs_and_unauthorized_callers_never_wait() {
    // A 30 s budget: a test that waited would time out the suite.
    let f = settling_fixture(true, 10, std::time::Duration::from_secs(30));
    assert_eq!(code(&f, &post(PENDING, "alice")).await, ErrorCode::NotReady);
    assert_eq!(code(&f, &post(RUNNING, "eve")).await, ErrorCode::Forbidden);
}

/// A Run the table does not know yet (`c3`, ready on pod-c).
const NEW: &str = "/v1/namespaces/default/runtimes/python/runs/c3:invoke";

/// The control plane's and the owner's word that function Run `uid` is
/// Ready on `pod` at `addr` (`attempt`), as the watch streams bring them.
fn publish_ready(table: &RwLock<Table>, uid: &str, pod: &str, addr: &str, attempt: u64) {
    let mut e = crate::table::fixtures::assignment(uid, pod, addr, attempt, Phase::Ready);
    e.mode = Mode::Function as i32;
    let mut t = table::write(table);
    t.apply_control_plane(
        kruntimes_proto::watch::SourceUpdate::Upsert(Box::new(e.clone())),
        Instant::now(),
    );
    t.apply_runtimed(
        addr,
        crate::table::fixtures::snap(pod, vec![e]),
        Instant::now(),
    );
}

/// `c3`, new to the table, arrives Ready on pod-c once the caller waits.
async fn new_run_arrives(table: &RwLock<Table>) {
    tokio::task::yield_now().await;
    publish_ready(table, "c3", "pod-c", "10.0.0.3:1", 1);
}

#[tokio::test]
async fn a_run_the_table_learns_of_while_the_caller_waits_is_routed() {
    for auth in [true, false] {
        let f = settling_fixture(auth, 10, std::time::Duration::from_secs(30));
        let req = post(NEW, "alice");
        let ((result, facts), ()) =
            tokio::join!(admit(&f, &req), new_run_arrives(&f.admission.table));
        assert_eq!(result, Ok(()), "auth {auth}");
        assert_eq!(facts.route.as_ref().map(|r| r.pod_uid()), Some("pod-c"));
        if auth {
            // Authorized for the Run by its name, once known.
            assert_eq!(facts.subject(), Some("alice"));
        }
    }
}

#[tokio::test]
async fn an_unknown_run_is_not_found_after_the_wait_and_its_caller_authorized_then() {
    for auth in [true, false] {
        let f = settling_fixture(auth, 10, std::time::Duration::from_millis(20));
        assert_eq!(code(&f, &post(NEW, "alice")).await, ErrorCode::NotFound);
        assert_eq!(f.gauge.get(), 0, "the slot is given back");
    }
    // A Run that arrives but may not be used by the caller is forbidden.
    let f = settling_fixture(true, 10, std::time::Duration::from_secs(30));
    let req = post(NEW, "eve");
    let (denied, ()) = tokio::join!(code(&f, &req), new_run_arrives(&f.admission.table));
    assert_eq!(denied, ErrorCode::Forbidden);
}

/// A Run that arrives on its way to Ready and stays there is waited for
/// once: the wait for it to be known and for it to be Ready share one
/// budget.
#[tokio::test(start_paused = true)]
async fn an_unknown_run_that_stays_on_its_way_is_waited_for_once() {
    let settle = std::time::Duration::from_millis(100);
    let f = settling_fixture(true, 10, settle);
    let arrives_running = async {
        tokio::task::yield_now().await;
        let mut e =
            crate::table::fixtures::assignment("c3", "pod-c", "10.0.0.3:1", 1, Phase::Running);
        e.mode = Mode::Function as i32;
        table::write(&f.admission.table).apply_control_plane(
            kruntimes_proto::watch::SourceUpdate::Upsert(Box::new(e)),
            Instant::now(),
        );
    };
    let start = tokio::time::Instant::now();
    let req = post(NEW, "alice");
    let (answer, ()) = tokio::join!(code(&f, &req), arrives_running);
    assert_eq!(answer, ErrorCode::NotReady);
    // The clock is paused: it moved only to the one deadline.
    assert_eq!(start.elapsed(), settle);
}

#[tokio::test]
async fn strangers_never_wait_for_an_unknown_run() {
    // A 30 s budget: a test that waited would time out the suite.
    let f = settling_fixture(true, 10, std::time::Duration::from_secs(30));
    assert_eq!(
        code(&f, &post(NEW, "mallory")).await,
        ErrorCode::Unauthenticated
    );
    assert_eq!(
        code(&f, &request("POST", NEW, &[])).await,
        ErrorCode::Unauthenticated
    );
    assert_eq!(f.gauge.get(), 0);
}

#[tokio::test]
async fn a_caller_waiting_for_an_unknown_run_holds_an_in_flight_slot() {
    let f = settling_fixture(true, 1, std::time::Duration::from_secs(30));
    let table = f.admission.table.clone();
    let meanwhile = async {
        // The waiting caller takes its slot within a few polls (bounded, so
        // a caller that does not wait fails the test instead of hanging it).
        for _ in 0..1000 {
            if f.gauge.get() != 0 {
                break;
            }
            tokio::task::yield_now().await;
        }
        // The one slot is the waiting caller's: the bound holds.
        let other = code(&f, &post(INVOKE, "alice")).await;
        publish_ready(&table, "c3", "pod-c", "10.0.0.3:1", 1);
        other
    };
    let req = post(NEW, "alice");
    let ((result, facts), other) = tokio::join!(admit(&f, &req), meanwhile);
    assert_eq!(other, ErrorCode::Overloaded);
    assert_eq!(result, Ok(()));
    assert_eq!(f.gauge.get(), 1, "one slot, taken once");
    drop(facts);
    assert_eq!(f.gauge.get(), 0);
}

#[tokio::test]
async fn an_owner_that_moves_while_the_caller_is_authorized_is_routed_to_its_new_pod() {
    let f = fixture(true, 10);
    let table = f.admission.table.clone();
    // Runs while the token review of `slow-alice` yields: `f1` moves to
    // pod-b (attempt 2), which reports it Ready.
    let moved = tokio::spawn(async move {
        publish_ready(&table, "f1", "pod-b", "10.0.0.2:1", 2);
    });
    let (result, facts) = admit(&f, &post(INVOKE, "slow-alice")).await;
    moved.await.unwrap();
    assert_eq!(result, Ok(()));
    let route = facts.route.as_ref().unwrap();
    assert_eq!(route.pod_uid(), "pod-b", "not the owner looked up before");
    // A caller already cached is not held up, and sees the move too.
    let (result, facts) = admit(&f, &post(INVOKE, "slow-alice")).await;
    assert_eq!(result, Ok(()));
    assert_eq!(facts.route.as_ref().map(|r| r.pod_uid()), Some("pod-b"));
}
