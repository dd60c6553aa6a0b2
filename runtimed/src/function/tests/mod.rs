//! Engine tests with real Python and Bash processes.

mod bash;
mod invoke;
mod lifecycle;
mod registration;

use std::sync::Arc;
use std::time::Duration;

use kruntimes_proto::function::v1 as pb;
use kruntimes_proto::ownership::v1 as own;

use super::backend::InvokeError;
use super::{Engine, EngineConfig, EngineError, Invocation, MAX_IO_BYTES};
use crate::local::LocalPod;
use crate::registration::{Fence, FenceError, RegisterError};

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

impl Fixture {
    /// The pid the `PY` handler wrote before sleeping.
    fn handler_pid(&self) -> i32 {
        std::fs::read_to_string(self._dir.path().join(UID).join("pid"))
            .unwrap()
            .parse()
            .unwrap()
    }
}

/// A fresh engine with the `PY` handler registered at attempt 1.
async fn python() -> (Fixture, pb::Registration) {
    let fx = fixture();
    let reg = fx
        .engine
        .register(request("python", 1, "d", "main.invoke", PY))
        .await
        .unwrap();
    (fx, reg)
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
