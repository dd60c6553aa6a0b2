//! Bash functions: the payload is one argument, never shell source.

use super::*;

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
