//! The contract's five services on one gRPC server, routed by the service
//! name that opens each request's path
//! (`/kruntimes.runtime.v1.FunctionRuntime/InvokeFunction`). tonic's own
//! router would link axum, an HTTP stack the untrusted side has no use for:
//! this one is a match on the name.

use std::convert::Infallible;
use std::task::{Context, Poll};

use kruntimes_proto::runtime::v1::artifact_runtime_server::ArtifactRuntimeServer;
use kruntimes_proto::runtime::v1::function_runtime_server::FunctionRuntimeServer;
use kruntimes_proto::runtime::v1::runtime_server_server::RuntimeServerServer;
use kruntimes_proto::runtime::v1::session_runtime_server::SessionRuntimeServer;
use kruntimes_proto::runtime::v1::task_runtime_server::TaskRuntimeServer;
use kruntimes_proto::runtime::{ARTIFACT_RUNTIME, FUNCTION_RUNTIME, SESSION_RUNTIME, TASK_RUNTIME};
use tonic::body::Body;
use tonic::codegen::{BoxFuture, Service};

use crate::service::Handle;

/// `RuntimeServer`'s full name, as paths carry it.
const RUNTIME_SERVER: &str = "kruntimes.runtime.v1.RuntimeServer";

/// Which service a request path names (`None`: not one of ours).
fn service_of(path: &str) -> Option<&str> {
    let (service, method) = path.strip_prefix('/')?.split_once('/')?;
    (!method.is_empty() && !method.contains('/')).then_some(service)
}

/// The five services, one `tower` service.
#[derive(Clone)]
pub struct Routes {
    server: RuntimeServerServer<Handle>,
    functions: FunctionRuntimeServer<Handle>,
    sessions: SessionRuntimeServer<Handle>,
    tasks: TaskRuntimeServer<Handle>,
    artifacts: ArtifactRuntimeServer<Handle>,
}

impl Routes {
    /// Routes to the five services.
    pub fn new(
        server: RuntimeServerServer<Handle>,
        functions: FunctionRuntimeServer<Handle>,
        sessions: SessionRuntimeServer<Handle>,
        tasks: TaskRuntimeServer<Handle>,
        artifacts: ArtifactRuntimeServer<Handle>,
    ) -> Self {
        Self {
            server,
            functions,
            sessions,
            tasks,
            artifacts,
        }
    }
}

impl Service<http::Request<Body>> for Routes {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // The generated services are always ready.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        match service_of(req.uri().path()) {
            Some(RUNTIME_SERVER) => self.server.call(req),
            Some(FUNCTION_RUNTIME) => self.functions.call(req),
            Some(SESSION_RUNTIME) => self.sessions.call(req),
            Some(TASK_RUNTIME) => self.tasks.call(req),
            Some(ARTIFACT_RUNTIME) => self.artifacts.call(req),
            _ => {
                let path = req.uri().path().to_owned();
                Box::pin(async move {
                    Ok(tonic::Status::unimplemented(format!("no such call: {path}")).into_http())
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_names_its_service_and_nothing_else_does() {
        assert_eq!(
            service_of("/kruntimes.runtime.v1.FunctionRuntime/InvokeFunction"),
            Some(FUNCTION_RUNTIME)
        );
        assert_eq!(
            service_of("/kruntimes.runtime.v1.RuntimeServer/Info"),
            Some(RUNTIME_SERVER)
        );
        for bad in [
            "",
            "/",
            "/kruntimes.runtime.v1.RuntimeServer",
            "/kruntimes.runtime.v1.RuntimeServer/",
            "/kruntimes.runtime.v1.RuntimeServer/Info/x",
            "kruntimes.runtime.v1.RuntimeServer/Info",
        ] {
            assert_eq!(service_of(bad), None, "{bad:?}");
        }
    }
}
