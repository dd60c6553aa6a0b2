//! Registration: idempotent, conflicting, superseding, fenced and refused registrations.

use super::*;

#[tokio::test]
async fn registration_is_idempotent_conflicting_superseding_and_fenced() {
    let fx = fixture().await;
    let r1 = register(&fx, request("python", 1, "d1", "main.invoke"))
        .await
        .unwrap();
    let again = register(&fx, request("python", 1, "d1", "main.invoke"))
        .await
        .unwrap();
    assert_eq!(r1, again);
    let conflict = register(&fx, request("python", 1, "d2", "main.invoke")).await;
    assert!(matches!(conflict, Err(RegisterError::Conflict(1))));

    let r2 = register(&fx, request("python", 2, "d2", "main.invoke"))
        .await
        .unwrap();
    assert_ne!(r1, r2);
    let stale = register(&fx, request("python", 1, "d1", "main.invoke")).await;
    assert!(matches!(
        stale,
        Err(RegisterError::Stale {
            requested: 1,
            current: 2
        })
    ));

    // The fenced id cannot unregister the newer registration.
    let err = fx.engine.unregister(UID, &r1, Release::Drain).await;
    assert_eq!(err, Err(crate::registration::StaleRegistration));
    assert_eq!(fx.engine.current_record(UID).unwrap().attempt, 2);

    // Gateway fencing: a stale attempt is refused.
    assert!(matches!(
        fx.engine.invoke(call_at(1, b"{}")).await,
        Err(EngineError::Fenced(FenceError::WrongAttempt {
            registered: 2,
            requested: 1,
            ..
        }))
    ));
    let other_pod = Invocation {
        fence: Fence {
            run_uid: UID,
            owner_pod_uid: "pod-uid-9",
            attempt: 2,
        },
        ..call_at(2, b"{}")
    };
    assert!(matches!(
        fx.engine.invoke(other_pod).await,
        Err(EngineError::Fenced(FenceError::WrongPod { ref routed_to, .. })) if routed_to == "pod-uid-9"
    ));

    assert!(
        fx.engine
            .unregister(UID, &r2, Release::Drain)
            .await
            .unwrap()
    );
    assert!(!fx.engine.unregister(UID, "", Release::Drain).await.unwrap());
    assert!(fx.engine.publisher().entries().is_empty());
}

#[tokio::test]
async fn refusals_of_the_server_fail_the_registration() {
    let fx = fixture().await;
    let load = register(&fx, request("python", 1, "d", "main.nope")).await;
    assert!(
        matches!(load, Err(RegisterError::Load(ref m)) if m.contains("AttributeError")),
        "{load:?}"
    );
    let invalid = register(&fx, request("python", 1, "d", "main.bad!")).await;
    assert!(
        matches!(invalid, Err(RegisterError::Invalid(_))),
        "{invalid:?}"
    );
    let unknown = register(&fx, request("node", 1, "d", "main.invoke")).await;
    // runtimed names no backend for it; the server refuses it.
    assert!(
        matches!(unknown, Err(RegisterError::Invalid(_))),
        "{unknown:?}"
    );
    assert!(fx.engine.publisher().entries().is_empty());
}

#[tokio::test]
async fn superseding_unregisters_the_old_attempt_on_the_server_first() {
    let fx = fixture().await;
    register(&fx, request("python", 1, "d1", "main.invoke"))
        .await
        .unwrap();
    register(&fx, request("python", 2, "d2", "main.invoke"))
        .await
        .unwrap();
    let calls = fx.server.fake.calls();
    assert_eq!(
        calls,
        [
            "reset".to_owned(),
            format!("register {UID} 1 python"),
            format!("unregister {UID} fn-1"),
            format!("register {UID} 2 python"),
        ]
    );
}
