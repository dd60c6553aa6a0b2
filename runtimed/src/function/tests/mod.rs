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

use kruntimes_proto::agent::v1 as agent;
use kruntimes_proto::ownership::v1 as own;
use kruntimes_proto::runtime::InvokeError;
use kruntimes_proto::runtime::v1 as rt;

use super::{Engine, EngineConfig, EngineError, Invocation, MAX_IO_BYTES};
use crate::local::LocalPod;
use crate::registration::{Fence, FenceError, Mode, RegisterError, Release, assignment};
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
        None,
    );
    Fixture { server, engine }
}

/// A fresh engine with a Python function registered at attempt 1; its
/// registration id.
async fn python() -> (Fixture, String) {
    let fx = fixture().await;
    let id = register(&fx, request("python", 1, "d", "main.invoke"))
        .await
        .unwrap();
    (fx, id)
}

/// Registers the function `req` assigns; the registration id.
async fn register(fx: &Fixture, req: agent::AssignRequest) -> Result<String, RegisterError> {
    match assignment(req)? {
        (a, Mode::Function(f)) => fx.engine.register(a, f).await,
        (_, Mode::Session(_) | Mode::Task(_)) => panic!("not a function"),
    }
}

const UID: &str = "0f0e0d0c-0000-4000-8000-000000000001";

fn request(runtime: &str, attempt: u64, digest: &str, handler: &str) -> agent::AssignRequest {
    agent::AssignRequest {
        run: Some(rt::RunRef {
            namespace: "default".into(),
            name: "hello".into(),
            uid: UID.into(),
            runtime: runtime.into(),
        }),
        attempt,
        digest: digest.into(),
        source: Some(rt::Source {
            inline: "def invoke(r): return r".into(),
            path: String::new(),
        }),
        inputs: Vec::new(),
        env: Default::default(),
        mode: Some(agent::assign_request::Mode::Function(
            agent::FunctionAssignment {
                handler: handler.into(),
                ..Default::default()
            },
        )),
    }
}

/// The function assignment of `req`, to change its bounds.
fn function(req: &mut agent::AssignRequest) -> &mut agent::FunctionAssignment {
    match req.mode.as_mut() {
        Some(agent::assign_request::Mode::Function(f)) => f,
        other => panic!("{other:?}"),
    }
}

/// An invocation of attempt 1, as the gateway forwards it.
fn call(input: &[u8]) -> Invocation<'_> {
    call_at(1, input)
}

/// An invocation of `attempt`, as the gateway forwards it.
fn call_at(attempt: u64, input: &[u8]) -> Invocation<'_> {
    Invocation {
        run_uid: UID,
        fence: Fence {
            run_uid: UID,
            owner_pod_uid: "pod-uid-0",
            attempt,
        },
        namespace: "default",
        runtime: "python",
        invocation_id: "inv",
        input,
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
