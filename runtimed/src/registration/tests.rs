//! The registration rules, once for both modes, and the table applying them.

use std::sync::Arc;

use super::rules::{RegisterDecision, check_fence, decide_register};
use super::*;

fn rec(attempt: u64, digest: &str, id: &str) -> Record {
    Record {
        attempt,
        digest: digest.into(),
        registration_id: id.into(),
    }
}

#[test]
fn register_decisions_follow_attempt_then_digest() {
    let r = rec(2, "d1", "id-2");
    assert_eq!(decide_register(None, 1, "d1"), RegisterDecision::Create);
    assert_eq!(
        decide_register(Some(&r), 2, "d1"),
        RegisterDecision::Idempotent
    );
    assert_eq!(
        decide_register(Some(&r), 2, "d2"),
        RegisterDecision::Conflict
    );
    assert_eq!(
        decide_register(Some(&r), 3, "d1"),
        RegisterDecision::Supersede
    );
    assert_eq!(
        decide_register(Some(&r), 3, "d9"),
        RegisterDecision::Supersede
    );
    assert_eq!(decide_register(Some(&r), 1, "d1"), RegisterDecision::Stale);
    assert_eq!(decide_register(Some(&r), 0, "d2"), RegisterDecision::Stale);
}

#[test]
fn stale_ids_never_match_a_newer_registration() {
    let r = rec(3, "d", "id-3");
    assert_eq!(check_id(Some(&r), "id-3"), IdCheck::Current);
    assert_eq!(check_id(Some(&r), "id-2"), IdCheck::Stale);
    assert_eq!(check_id(Some(&r), ""), IdCheck::Current);
    assert_eq!(check_id(None, "id-2"), IdCheck::Absent);
}

#[test]
fn fencing_checks_run_pod_and_attempt() {
    let r = rec(2, "d", "id");
    let ok = Fence {
        run_uid: "u",
        owner_pod_uid: "pod-a",
        attempt: 2,
    };
    assert_eq!(check_fence(ok, "u", "pod-a", Some(&r)), Ok(()));
    assert_eq!(
        check_fence(ok, "other", "pod-a", Some(&r)),
        Err(FenceError::RunMismatch {
            routed: "u".into(),
            path: "other".into()
        })
    );
    assert_eq!(
        check_fence(ok, "u", "pod-b", Some(&r)),
        Err(FenceError::WrongPod {
            this_pod: "pod-b".into(),
            routed_to: "pod-a".into()
        })
    );
    assert_eq!(
        check_fence(ok, "u", "pod-a", None),
        Err(FenceError::NotRegistered { run: "u".into() })
    );
    let stale = Fence { attempt: 1, ..ok };
    assert_eq!(
        check_fence(stale, "u", "pod-a", Some(&r)),
        Err(FenceError::WrongAttempt {
            run: "u".into(),
            registered: 2,
            requested: 1
        })
    );
    let newer = Fence { attempt: 3, ..ok };
    assert_eq!(
        check_fence(newer, "u", "pod-a", Some(&r)),
        Err(FenceError::WrongAttempt {
            run: "u".into(),
            registered: 2,
            requested: 3
        })
    );
}

#[test]
fn fencing_refusals_read_as_sentences_with_the_values() {
    let r = rec(2, "d", "id");
    let fence = Fence {
        run_uid: "u-1",
        owner_pod_uid: "pod-a",
        attempt: 1,
    };
    let say = |fence: Fence<'_>, path: &str, pod: &str, current: Option<&Record>| {
        check_fence(fence, path, pod, current)
            .unwrap_err()
            .to_string()
    };
    assert_eq!(
        say(fence, "u-1", "pod-b", Some(&r)),
        "this Pod (uid pod-b) is not the owner the gateway routed to (pod-a)"
    );
    assert_eq!(
        say(fence, "u-1", "pod-a", Some(&r)),
        "run u-1 is registered here at attempt 2, the request carries attempt 1"
    );
    assert_eq!(
        say(fence, "u-1", "pod-a", None),
        "run u-1 is not registered on this Pod"
    );
    assert_eq!(
        say(fence, "u-2", "pod-a", Some(&r)),
        "the gateway routed run u-1 but the path names run u-2"
    );
}

fn run(uid: &str) -> kruntimes_proto::runtime::v1::RunRef {
    kruntimes_proto::runtime::v1::RunRef {
        namespace: "default".into(),
        name: "hello".into(),
        uid: uid.into(),
        runtime: "python".into(),
    }
}

fn registration(
    uid: &str,
    attempt: u64,
    digest: &str,
    mode: &'static str,
) -> Arc<Registration<&'static str>> {
    Arc::new(Registration {
        run: run(uid),
        record: Record::issue(attempt, digest),
        mode,
    })
}

#[test]
fn issued_records_get_distinct_registration_ids() {
    let a = Record::issue(1, "d");
    let b = Record::issue(1, "d");
    assert_eq!((a.attempt, a.digest.as_str()), (1, "d"));
    assert!(a.registration_id.starts_with("reg-"));
    assert_ne!(a.registration_id, b.registration_id);
}

#[test]
fn the_table_plans_create_idempotent_supersede_and_refuses_the_rest() {
    let table = Table::default();
    assert!(matches!(table.plan("u", 1, "d1"), Ok(Plan::Create)));
    let first = registration("u", 2, "d1", "first");
    table.insert(first.clone());
    assert!(matches!(table.plan("u", 2, "d1"), Ok(Plan::Idempotent(r)) if Arc::ptr_eq(&r, &first)));
    assert!(matches!(table.plan("u", 3, "d2"), Ok(Plan::Supersede(r)) if Arc::ptr_eq(&r, &first)));
    assert!(matches!(
        table.plan("u", 2, "d2"),
        Err(RegisterError::Conflict(2))
    ));
    assert!(matches!(
        table.plan("u", 1, "d1"),
        Err(RegisterError::Stale {
            requested: 1,
            current: 2
        })
    ));
    assert!(matches!(table.plan("other", 1, "d1"), Ok(Plan::Create)));
}

#[test]
fn removing_an_older_registration_never_touches_the_newer_one() {
    let table = Table::default();
    let old = registration("u", 1, "d", "old");
    let new = registration("u", 2, "d", "new");
    table.insert(old.clone());
    table.insert(new.clone());
    assert!(!table.remove(&old), "the older one is no longer current");
    assert_eq!(table.get("u").unwrap().mode, "new");
    assert!(table.remove(&new));
    assert!(table.get("u").is_none());
    assert!(table.all().is_empty());
}

#[test]
fn fenced_lookups_return_the_registration_only_when_the_fence_matches() {
    let table = Table::default();
    let fence = Fence {
        run_uid: "u",
        owner_pod_uid: "pod-a",
        attempt: 2,
    };
    assert!(matches!(
        table.fenced(fence, "u", "pod-a"),
        Err(FenceError::NotRegistered { .. })
    ));
    let reg = registration("u", 2, "d", "payload");
    table.insert(reg.clone());
    let found = table.fenced(fence, "u", "pod-a").unwrap();
    assert!(Arc::ptr_eq(&found, &reg));
    assert_eq!(
        **found, "payload",
        "the payload is reached through the registration"
    );
    assert!(matches!(
        table.fenced(
            Fence {
                attempt: 1,
                ..fence
            },
            "u",
            "pod-a"
        ),
        Err(FenceError::WrongAttempt { .. })
    ));
    assert!(matches!(
        table.fenced(fence, "u", "pod-b"),
        Err(FenceError::WrongPod { .. })
    ));
}
