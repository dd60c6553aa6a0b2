//! Engine tests with real Python and Bash processes.

use super::*;
use crate::local::LocalPod;

struct Fixture {
    _dir: tempfile::TempDir,
    engine: Arc<Engine>,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let pod = LocalPod::new("runtimed-0", "pod-uid-0", "127.0.0.1:1", dir.path());
    let engine = Engine::new(
        pod,
        EngineConfig {
            backend: None,
            python: "python3".into(),
            default_timeout: Duration::from_secs(10),
            max_timeout: Duration::from_secs(30),
            start_timeout: Duration::from_secs(20),
            python_spares: 1,
        },
    );
    Fixture { _dir: dir, engine }
}

const UID: &str = "0f0e0d0c-0000-4000-8000-000000000001";

fn request(
    runtime: &str,
    attempt: u64,
    digest: &str,
    handler: &str,
    source: &str,
) -> pb::RegisterRequest {
    pb::RegisterRequest {
        run: Some(pb::RunRef {
            namespace: "default".into(),
            name: "hello".into(),
            uid: UID.into(),
            runtime: runtime.into(),
        }),
        attempt,
        digest: digest.into(),
        handler: handler.into(),
        source: Some(pb::Source {
            inline: source.into(),
            inline_path: String::new(),
        }),
        ..Default::default()
    }
}

const PY: &str = r#"
import os, time
def invoke(request):
    if request.get("raise"):
        raise ValueError("bad " + request["raise"])
    if request.get("crash"):
        os._exit(3)
    if request.get("sleep"):
        with open("pid", "w") as f:
            f.write(str(os.getpid()))
        time.sleep(request["sleep"])
    if request.get("big"):
        return "x" * request["big"]
    print("to stderr, not the protocol")
    return {"message": "hello " + request.get("name", "world"), "pid": os.getpid()}
"#;

fn call<'a>(input: &'a [u8]) -> Invocation<'a> {
    Invocation {
        run_uid: UID,
        fence: None,
        registration_id: None,
        namespace_runtime: None,
        invocation_id: "inv",
        input,
        timeout: None,
    }
}

/// Waits up to a second for a process to disappear.
async fn exits_soon(pid: i32) -> bool {
    for _ in 0..50 {
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

fn json(bytes: &[u8]) -> serde_json::Value {
    serde_json::from_slice(bytes).unwrap()
}

#[tokio::test]
async fn python_worker_imports_once_and_serves_many_invocations() {
    let fx = fixture();
    fx.engine
        .register(request("python", 1, "d", "main.invoke", PY))
        .await
        .unwrap();
    let a = json(&fx.engine.invoke(call(br#"{"name":"X"}"#)).await.unwrap());
    let b = json(&fx.engine.invoke(call(br#"{"name":"Y"}"#)).await.unwrap());
    assert_eq!(a["message"], "hello X");
    assert_eq!(b["message"], "hello Y");
    assert_eq!(a["pid"], b["pid"], "the same warm worker serves both calls");
}

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
        Err(EngineError::Fenced(FenceError::WrongAttempt))
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
        Err(EngineError::Fenced(FenceError::WrongPod))
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
async fn handler_exception_is_a_bounded_function_error() {
    let fx = fixture();
    fx.engine
        .register(request("python", 1, "d", "main.invoke", PY))
        .await
        .unwrap();
    let err = fx
        .engine
        .invoke(call(br#"{"raise":"input"}"#))
        .await
        .unwrap_err();
    match err {
        EngineError::Invoke(InvokeError::Function { kind, message }) => {
            assert_eq!(kind, "ValueError");
            assert_eq!(message, "bad input");
        }
        other => panic!("unexpected {other:?}"),
    }
    // The worker survives handler errors.
    assert!(fx.engine.invoke(call(b"{}")).await.is_ok());
}

#[tokio::test]
async fn worker_crash_is_reported_then_respawned() {
    let fx = fixture();
    fx.engine
        .register(request("python", 1, "d", "main.invoke", PY))
        .await
        .unwrap();
    let first = json(&fx.engine.invoke(call(b"{}")).await.unwrap());
    let err = fx
        .engine
        .invoke(call(br#"{"crash":true}"#))
        .await
        .unwrap_err();
    assert!(
        matches!(err, EngineError::Invoke(InvokeError::Crashed(_))),
        "{err:?}"
    );
    let after = json(&fx.engine.invoke(call(b"{}")).await.unwrap());
    assert_ne!(
        first["pid"], after["pid"],
        "a fresh worker serves the next call"
    );
}

#[tokio::test]
async fn timeout_kills_the_worker_process_group() {
    let fx = fixture();
    fx.engine
        .register(request("python", 1, "d", "main.invoke", PY))
        .await
        .unwrap();
    let slow = Invocation {
        timeout: Some(Duration::from_millis(300)),
        ..call(br#"{"sleep":30}"#)
    };
    let err = fx.engine.invoke(slow).await.unwrap_err();
    assert!(
        matches!(err, EngineError::Invoke(InvokeError::Timeout(_))),
        "{err:?}"
    );
    let pid: i32 = std::fs::read_to_string(fx._dir.path().join(UID).join("pid"))
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        exits_soon(pid).await,
        "the timed-out worker {pid} must be killed"
    );
    assert!(fx.engine.invoke(call(b"{}")).await.is_ok());
}

#[tokio::test]
async fn second_concurrent_invocation_is_busy() {
    let fx = fixture();
    fx.engine
        .register(request("python", 1, "d", "main.invoke", PY))
        .await
        .unwrap();
    let engine = fx.engine.clone();
    let slow =
        tokio::spawn(async move { engine.invoke(call(br#"{"sleep":1}"#)).await.map(|_| ()) });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let err = fx.engine.invoke(call(b"{}")).await.unwrap_err();
    assert!(matches!(err, EngineError::Busy), "{err:?}");
    slow.await.unwrap().unwrap();
}

#[tokio::test]
async fn input_and_output_bounds_are_enforced() {
    let fx = fixture();
    fx.engine
        .register(request("python", 1, "d", "main.invoke", PY))
        .await
        .unwrap();
    let big = vec![b' '; (MAX_IO_BYTES + 1) as usize];
    assert!(matches!(
        fx.engine.invoke(call(&big)).await,
        Err(EngineError::TooLarge(_))
    ));
    assert!(matches!(
        fx.engine.invoke(call(b"{nope")).await,
        Err(EngineError::InvalidJson(_))
    ));
    let err = fx
        .engine
        .invoke(call(br#"{"big":2000000}"#))
        .await
        .unwrap_err();
    assert!(
        matches!(err, EngineError::Invoke(InvokeError::InvalidOutput(_))),
        "{err:?}"
    );
    assert!(fx.engine.invoke(call(b"{}")).await.is_ok());
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

const SH: &str = r#"
greet() {
  local name
  name=$(printf '%s' "$1" | python3 -c 'import json,sys; print(json.load(sys.stdin).get("name","world"))')
  echo "sourcing output goes to logs" >&2
  printf '{"message": "hello %s"}\n' "$name"
}
fail() { echo "boom" >&2; return 4; }
echo "top-level output of the file goes to logs"
"#;

#[tokio::test]
async fn bash_function_gets_payload_as_one_argument_never_as_source() {
    let fx = fixture();
    fx.engine
        .register(request("bash", 1, "d", "hello.greet", SH))
        .await
        .unwrap();
    let out = json(&fx.engine.invoke(call(br#"{"name":"X"}"#)).await.unwrap());
    assert_eq!(out["message"], "hello X");
    let marker = fx._dir.path().join("pwned");
    let evil = format!(
        r#"{{"name":"$(touch {m}); `touch {m}`"}}"#,
        m = marker.display()
    );
    let out = json(&fx.engine.invoke(call(evil.as_bytes())).await.unwrap());
    assert!(out["message"].as_str().unwrap().contains("$(touch"));
    assert!(!marker.exists(), "payload must never be evaluated");
}

#[tokio::test]
async fn bash_nonzero_exit_is_a_function_error_and_missing_function_fails_registration() {
    let fx = fixture();
    let missing = fx
        .engine
        .register(request("bash", 1, "d", "hello.absent", SH))
        .await;
    assert!(matches!(missing, Err(RegisterError::Load(m)) if m.contains("does not define")));
    fx.engine
        .register(request("bash", 1, "d", "hello.fail", SH))
        .await
        .unwrap();
    let err = fx.engine.invoke(call(b"{}")).await.unwrap_err();
    match err {
        EngineError::Invoke(InvokeError::Function { kind, message }) => {
            assert_eq!(kind, "ExitStatus");
            assert!(
                message.contains("exit status 4") && message.contains("boom"),
                "{message}"
            );
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test]
async fn idle_registrations_expire_and_report_idle_timeout() {
    let fx = fixture();
    let mut req = request("python", 1, "d", "main.invoke", PY);
    req.idle_timeout_seconds = 1;
    fx.engine.register(req).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    fx.engine.expire_idle().await;
    let entry = fx.engine.publisher().entries().pop().unwrap();
    assert_eq!(entry.phase, own::Phase::Failed as i32);
    assert_eq!(entry.reason, "IdleTimeout");
    assert!(matches!(
        fx.engine.invoke(call(b"{}")).await,
        Err(EngineError::NotReady(_))
    ));
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

#[tokio::test]
async fn drain_unregister_lets_the_in_flight_invocation_finish() {
    let fx = fixture();
    let reg = fx
        .engine
        .register(request("python", 1, "d", "main.invoke", PY))
        .await
        .unwrap();
    let engine = fx.engine.clone();
    let slow = tokio::spawn(async move {
        engine
            .invoke(call(br#"{"sleep": 1, "name": "drained"}"#))
            .await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let existed = fx
        .engine
        .unregister(UID, &reg.registration_id, pb::UnregisterMode::Drain)
        .await
        .unwrap();
    assert!(existed);
    let out = json(&slow.await.unwrap().unwrap());
    assert_eq!(out["message"], "hello drained", "drained work completes");
    assert!(fx.engine.status(UID).is_none());
    assert!(matches!(
        fx.engine.invoke(call(b"{}")).await,
        Err(EngineError::NotRegistered)
    ));
}

#[tokio::test]
async fn cancel_unregister_stops_the_in_flight_invocation_and_its_worker() {
    let fx = fixture();
    let reg = fx
        .engine
        .register(request("python", 1, "d", "main.invoke", PY))
        .await
        .unwrap();
    let engine = fx.engine.clone();
    let slow = tokio::spawn(async move { engine.invoke(call(br#"{"sleep": 30}"#)).await });
    tokio::time::sleep(Duration::from_millis(400)).await;
    let pid: i32 = std::fs::read_to_string(fx._dir.path().join(UID).join("pid"))
        .unwrap()
        .parse()
        .unwrap();
    let started = std::time::Instant::now();
    fx.engine
        .unregister(UID, &reg.registration_id, pb::UnregisterMode::Cancel)
        .await
        .unwrap();
    let err = slow.await.unwrap().unwrap_err();
    assert!(matches!(err, EngineError::NotReady("cancelled")), "{err:?}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "cancel does not wait for the handler"
    );
    assert!(
        exits_soon(pid).await,
        "the cancelled worker {pid} is killed"
    );
}
