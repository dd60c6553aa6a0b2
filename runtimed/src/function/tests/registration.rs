//! Registration: idempotent, conflicting, superseding, fenced and refused registrations.

use super::*;

#[tokio::test]
async fn registration_is_idempotent_conflicting_superseding_and_fenced() {
    let fx = fixture();
    let r1 = fx
        .engine
        .register(request("python", 1, "d1", "main.invoke", PY))
        .await
        .unwrap();
    let again = fx
        .engine
        .register(request("python", 1, "d1", "main.invoke", PY))
        .await
        .unwrap();
    assert_eq!(r1.registration_id, again.registration_id);
    let conflict = fx
        .engine
        .register(request("python", 1, "d2", "main.invoke", PY))
        .await;
    assert!(matches!(conflict, Err(RegisterError::Conflict(1))));

    let r2 = fx
        .engine
        .register(request("python", 2, "d2", "main.invoke", PY))
        .await
        .unwrap();
    assert_ne!(r1.registration_id, r2.registration_id);
    let stale = fx
        .engine
        .register(request("python", 1, "d1", "main.invoke", PY))
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
async fn bad_registrations_are_rejected() {
    let fx = fixture();
    let missing = fx
        .engine
        .register(request("python", 1, "d", "main.nope", PY))
        .await;
    assert!(matches!(missing, Err(RegisterError::Load(m)) if m.contains("AttributeError")));
    let syntax = fx
        .engine
        .register(request("python", 1, "d", "main.invoke", "def ("))
        .await;
    assert!(matches!(syntax, Err(RegisterError::Load(m)) if m.contains("SyntaxError")));
    let mut traversal = request("python", 1, "d", "main.invoke", PY);
    traversal.source.as_mut().unwrap().inline_path = "../main.py".into();
    assert!(matches!(
        fx.engine.register(traversal).await,
        Err(RegisterError::Invalid(_))
    ));
    let mut abs = request("python", 1, "d", "main.invoke", PY);
    abs.source.as_mut().unwrap().inline_path = "/tmp/main.py".into();
    assert!(matches!(
        fx.engine.register(abs).await,
        Err(RegisterError::Invalid(_))
    ));
    let unknown = fx
        .engine
        .register(request("node", 1, "d", "main.invoke", PY))
        .await;
    assert!(matches!(unknown, Err(RegisterError::Invalid(_))));
    assert!(fx.engine.publisher().entries().is_empty());
}

#[tokio::test]
async fn spare_interpreters_load_the_handler_with_the_runs_directory_and_environment() {
    let fx = fixture();
    const ENV_PY: &str = "import os\ndef invoke(request):\n    return {\"cwd\": os.getcwd(), \"greeting\": os.environ.get(\"GREETING\"), \"home\": os.environ.get(\"HOME\"), \"leak\": os.environ.get(\"CARGO\")}\n";
    for attempt in 1..=3u64 {
        let mut req = request(
            "python",
            attempt,
            &format!("d{attempt}"),
            "main.invoke",
            ENV_PY,
        );
        req.env.insert("GREETING".into(), format!("hi-{attempt}"));
        fx.engine.register(req).await.unwrap();
        let out = json(&fx.engine.invoke(call(b"{}")).await.unwrap());
        let workdir = fx._dir.path().join(UID);
        assert_eq!(out["cwd"], workdir.display().to_string());
        assert_eq!(out["home"], workdir.display().to_string());
        assert_eq!(out["greeting"], format!("hi-{attempt}"));
        assert!(
            out["leak"].is_null(),
            "the daemon's environment is not inherited"
        );
    }
}
