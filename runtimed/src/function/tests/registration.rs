//! Registration: idempotent, conflicting, superseding, fenced and refused registrations.

use super::*;

#[tokio::test]
async fn registration_is_idempotent_conflicting_superseding_and_fenced() {
    let fx = fixture().await;
    let r1 = fx
        .engine
        .register(request("python", 1, "d1", "main.invoke"))
        .await
        .unwrap();
    let again = fx
        .engine
        .register(request("python", 1, "d1", "main.invoke"))
        .await
        .unwrap();
    assert_eq!(r1.registration_id, again.registration_id);
    let conflict = fx
        .engine
        .register(request("python", 1, "d2", "main.invoke"))
        .await;
    assert!(matches!(conflict, Err(RegisterError::Conflict(1))));

    let r2 = fx
        .engine
        .register(request("python", 2, "d2", "main.invoke"))
        .await
        .unwrap();
    assert_ne!(r1.registration_id, r2.registration_id);
    let stale = fx
        .engine
        .register(request("python", 1, "d1", "main.invoke"))
        .await;
    assert!(matches!(
        stale,
        Err(RegisterError::Stale {
            requested: 1,
            current: 2
        })
    ));

    // The fenced id can neither invoke nor unregister the newer registration.
    let old = Invocation {
        registration_id: Some(&r1.registration_id),
        ..call(b"{}")
    };
    assert!(matches!(
        fx.engine.invoke(old).await,
        Err(EngineError::StaleRegistration)
    ));
    let err = fx
        .engine
        .unregister(UID, &r1.registration_id, pb::UnregisterMode::Drain)
        .await;
    assert!(matches!(err, Err(EngineError::StaleRegistration)));
    assert_eq!(fx.engine.current_record(UID).unwrap().attempt, 2);

    // Gateway fencing: a stale attempt is refused.
    let fenced = Invocation {
        fence: Some(Fence {
            run_uid: UID,
            owner_pod_uid: "pod-uid-0",
            attempt: 1,
        }),
        ..call(b"{}")
    };
    assert!(matches!(
        fx.engine.invoke(fenced).await,
        Err(EngineError::Fenced(FenceError::WrongAttempt {
            registered: 2,
            requested: 1,
            ..
        }))
    ));
    let other_pod = Invocation {
        fence: Some(Fence {
            run_uid: UID,
            owner_pod_uid: "pod-uid-9",
            attempt: 2,
        }),
        ..call(b"{}")
    };
    assert!(matches!(
        fx.engine.invoke(other_pod).await,
        Err(EngineError::Fenced(FenceError::WrongPod { ref routed_to, .. })) if routed_to == "pod-uid-9"
    ));

    assert!(
        fx.engine
            .unregister(UID, &r2.registration_id, pb::UnregisterMode::Drain)
            .await
            .unwrap()
    );
    assert!(
        !fx.engine
            .unregister(UID, "", pb::UnregisterMode::Drain)
            .await
            .unwrap()
    );
    assert!(fx.engine.publisher().entries().is_empty());
}

#[tokio::test]
async fn refusals_of_the_server_fail_the_registration() {
    let fx = fixture().await;
    let load = fx
        .engine
        .register(request("python", 1, "d", "main.nope"))
        .await;
    assert!(
        matches!(load, Err(RegisterError::Load(ref m)) if m.contains("AttributeError")),
        "{load:?}"
    );
    let invalid = fx
        .engine
        .register(request("python", 1, "d", "main.bad!"))
        .await;
    assert!(
        matches!(invalid, Err(RegisterError::Invalid(_))),
        "{invalid:?}"
    );
    let unknown = fx
        .engine
        .register(request("node", 1, "d", "main.invoke"))
        .await;
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
    fx.engine
        .register(request("python", 1, "d1", "main.invoke"))
        .await
        .unwrap();
    fx.engine
        .register(request("python", 2, "d2", "main.invoke"))
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
