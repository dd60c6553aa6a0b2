//! Opening, re-opening and closing sessions: the registration rules as
//! sessions apply them, with real workspaces.

use kruntimes_proto::agent::v1 as agent;
use kruntimes_proto::runtime::v1::RunRef;

use super::*;
use crate::registration::{self, Mode};
use crate::runtime::fake::{self, Served};

const UID: &str = "0f0e0d0c-0000-4000-8000-000000000002";

async fn sessions() -> (Served, Arc<Sessions>) {
    let server = fake::start().await;
    let pod = LocalPod::new("runtimed-0", "pod-uid-0", "127.0.0.1:1");
    let sessions = Sessions::new(pod, server.link.clone(), None);
    (server, sessions)
}

fn open_request(attempt: u64, digest: &str) -> agent::AssignRequest {
    agent::AssignRequest {
        run: Some(RunRef {
            namespace: "default".into(),
            name: "sandbox".into(),
            uid: UID.into(),
            runtime: "bash".into(),
        }),
        attempt,
        digest: digest.into(),
        mode: Some(agent::assign_request::Mode::Session(
            agent::SessionAssignment::default(),
        )),
        ..Default::default()
    }
}

/// Opens the session `req` assigns, as the Agent service does.
async fn open(s: &Sessions, req: agent::AssignRequest) -> Result<String, RegisterError> {
    match registration::assignment(req)? {
        (a, Mode::Session(m)) => s.open(a, m).await,
        (_, Mode::Function(_) | Mode::Task(_)) => panic!("not a session"),
    }
}

#[tokio::test]
async fn reopening_at_the_same_attempt_and_digest_keeps_the_session() {
    let (server, s) = sessions().await;
    open(&s, open_request(1, "d1")).await.unwrap();
    let first = s.get(UID).unwrap();
    let again = open(&s, open_request(1, "d1")).await.unwrap();
    assert_eq!(again, first.record.registration_id);
    let same = s.get(UID).unwrap();
    assert!(Arc::ptr_eq(&first, &same), "the open session answers");
    let opened = server
        .fake
        .calls()
        .iter()
        .filter(|c| c.starts_with("open"))
        .count();
    assert_eq!(opened, 1, "the workspace is kept");
}

#[tokio::test]
async fn reopening_at_the_same_attempt_with_another_digest_is_refused() {
    let (_server, s) = sessions().await;
    open(&s, open_request(1, "d1")).await.unwrap();
    let err = open(&s, open_request(1, "d2")).await.unwrap_err();
    assert!(matches!(err, RegisterError::Conflict(1)), "{err}");
    assert_eq!(s.get(UID).unwrap().record.digest, "d1", "untouched");
}

#[tokio::test]
async fn a_higher_attempt_replaces_the_session_and_a_lower_one_is_stale() {
    let (_server, s) = sessions().await;
    open(&s, open_request(1, "d1")).await.unwrap();
    let old = s.get(UID).unwrap();
    let (_, running) = old
        .session
        .submit(
            crate::session::ops::Operation::Command {
                argv: vec!["sleep-ms".into(), "30000".into()],
                stdin: Vec::new(),
                cwd: String::new(),
                env: Default::default(),
                timeout_seconds: None,
            },
            None,
        )
        .unwrap();
    open(&s, open_request(2, "d2")).await.unwrap();
    let new = s.get(UID).unwrap();
    assert_eq!(new.record.attempt, 2);
    assert_ne!(new.record.registration_id, old.record.registration_id);
    assert_eq!(
        running.await.unwrap().state,
        crate::session::outcome::OpState::Cancelled,
        "the superseded session's work is cancelled"
    );
    let err = open(&s, open_request(1, "d1")).await.unwrap_err();
    assert!(
        matches!(
            err,
            RegisterError::Stale {
                requested: 1,
                current: 2
            }
        ),
        "{err}"
    );
}

#[tokio::test]
async fn fenced_requests_reach_only_the_current_attempt_on_this_pod() {
    let (_server, s) = sessions().await;
    let fence = Fence {
        run_uid: UID,
        owner_pod_uid: "pod-uid-0",
        attempt: 1,
    };
    assert!(matches!(
        s.fenced(fence, UID),
        Err(FenceError::NotRegistered { .. })
    ));
    open(&s, open_request(1, "d1")).await.unwrap();
    assert!(s.fenced(fence, UID).is_ok());
    assert!(matches!(
        s.fenced(
            Fence {
                attempt: 2,
                ..fence
            },
            UID
        ),
        Err(FenceError::WrongAttempt { .. })
    ));
    assert!(matches!(
        s.fenced(
            Fence {
                owner_pod_uid: "pod-uid-9",
                ..fence
            },
            UID
        ),
        Err(FenceError::WrongPod { .. })
    ));
}

#[tokio::test]
async fn closing_removes_the_session_its_entry_and_its_workspace() {
    let (server, s) = sessions().await;
    open(&s, open_request(1, "d1")).await.unwrap();
    assert_eq!(s.pod.publisher().entries().len(), 1);
    assert!(s.close(UID, Release::Drain).await);
    assert!(s.get(UID).is_none());
    assert!(s.pod.publisher().entries().is_empty());
    assert!(
        server.fake.state.lock().unwrap().sessions.is_empty(),
        "the server closed it (and removed its workspace)"
    );
    assert!(
        !s.close(UID, Release::Drain).await,
        "absent sessions close fine"
    );
}

#[tokio::test]
async fn malformed_runs_are_refused_before_anything_is_created() {
    let (server, s) = sessions().await;
    let mut req = open_request(1, "d1");
    req.run.as_mut().unwrap().uid = "../escape".into();
    assert!(matches!(
        open(&s, req).await,
        Err(RegisterError::Invalid(_))
    ));
    let mut req = open_request(1, "d1");
    req.run = None;
    assert!(matches!(
        open(&s, req).await,
        Err(RegisterError::Invalid(_))
    ));
    assert_eq!(server.fake.calls(), ["reset"], "nothing reached the server");
}

#[tokio::test]
async fn a_restarted_server_loses_the_session_and_readiness_says_so() {
    let (mut server, s) = sessions().await;
    open(&s, open_request(1, "d1")).await.unwrap();
    server.stop().await;
    let lost = server.link.check().await;
    s.server_changed(lost).await;
    let e = s.pod.publisher().entries().pop().unwrap();
    assert_eq!(
        e.phase,
        own::Phase::Running as i32,
        "not ready while unreachable"
    );
    server.restart().await;
    let change = server.link.check().await;
    assert_eq!(change, crate::runtime::Change::Restarted);
    s.server_changed(change).await;
    let e = s.pod.publisher().entries().pop().unwrap();
    assert_eq!(
        (e.phase, e.reason.as_str()),
        (own::Phase::Failed as i32, crate::runtime::LOST_REASON)
    );
}
