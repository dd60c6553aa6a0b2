//! Engine tests against a scripted Runtime Server ([`crate::runtime::fake`])
//! on a real socket: runtimed's own rules — registration, fencing, bounds,
//! the one-in-flight rule, draining, idle expiry, the server's failures and
//! restarts. Real processes are the real server's tests.

mod invoke;
mod lifecycle;
mod registration;
mod server;

use std::sync::Arc;
use std::time::Duration;

use kruntimes_proto::function::v1 as pb;
use kruntimes_proto::ownership::v1 as own;

use super::error::InvokeError;
use super::{Engine, EngineConfig, EngineError, Invocation, MAX_IO_BYTES};
use crate::local::LocalPod;
use crate::registration::{Fence, FenceError, RegisterError};
use crate::runtime::fake::{self, Served};

struct Fixture {
    server: Served,
    engine: Arc<Engine>,
}

async fn fixture() -> Fixture {
    let server = fake::start().await;
    let pod = LocalPod::new("runtimed-0", "pod-uid-0", "127.0.0.1:1");
    let engine = Engine::new(
        pod,
        EngineConfig {
            backend: None,
            default_timeout: Duration::from_secs(10),
            max_timeout: Duration::from_secs(30),
            start_timeout: Duration::from_secs(20),
        },
        server.link.clone(),
    );
    Fixture { server, engine }
}

/// A fresh engine with a Python function registered at attempt 1.
async fn python() -> (Fixture, pb::Registration) {
    let fx = fixture().await;
    let reg = fx
        .engine
        .register(request("python", 1, "d", "main.invoke"))
        .await
        .unwrap();
    (fx, reg)
}

const UID: &str = "0f0e0d0c-0000-4000-8000-000000000001";

fn request(runtime: &str, attempt: u64, digest: &str, handler: &str) -> pb::RegisterRequest {
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
            inline: "def invoke(r): return r".into(),
            inline_path: String::new(),
        }),
        ..Default::default()
    }
}

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

fn json(bytes: &[u8]) -> serde_json::Value {
    serde_json::from_slice(bytes).unwrap()
}

/// The phase and reason of the Run's published entry.
fn published(fx: &Fixture) -> (i32, String) {
    let e = fx.engine.publisher().entries().pop().unwrap();
    (e.phase, e.reason)
}
