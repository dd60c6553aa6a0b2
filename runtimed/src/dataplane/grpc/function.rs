//! `FunctionRuntime` over gRPC: the control plane's registration interface
//! (and Invoke for custom callers). Only the control-plane client identity
//! may register, unregister or invoke.

use std::sync::Arc;
use std::time::Duration;

use kruntimes_proto::function::v1 as pb;
use kruntimes_proto::function::v1::function_runtime_server::{
    FunctionRuntime, FunctionRuntimeServer,
};
use tonic::{Request, Response, Status};

use super::register_status;
use crate::api_error::ApiError;
use crate::dataplane::PeerPolicy;
use crate::function::{Engine, EngineError, Invocation};

/// The service.
#[derive(Clone)]
pub struct FunctionService {
    engine: Arc<Engine>,
    policy: Arc<PeerPolicy>,
}

impl FunctionService {
    /// Wraps an engine.
    pub fn new(engine: Arc<Engine>, policy: Arc<PeerPolicy>) -> FunctionRuntimeServer<Self> {
        FunctionRuntimeServer::new(Self { engine, policy })
    }

    fn authorize<T>(&self, req: &Request<T>) -> Result<(), Status> {
        self.policy.require_control(req, "FunctionRuntime")
    }
}

/// An engine refusal, classified as on the dataplane.
fn engine_status(e: EngineError) -> Status {
    ApiError::from(e).into()
}

#[tonic::async_trait]
impl FunctionRuntime for FunctionService {
    async fn register(
        &self,
        req: Request<pb::RegisterRequest>,
    ) -> Result<Response<pb::RegisterResponse>, Status> {
        self.authorize(&req)?;
        let registration = self
            .engine
            .register(req.into_inner())
            .await
            .map_err(register_status)?;
        Ok(Response::new(pb::RegisterResponse {
            registration: Some(registration),
        }))
    }

    async fn status(
        &self,
        req: Request<pb::StatusRequest>,
    ) -> Result<Response<pb::StatusResponse>, Status> {
        self.authorize(&req)?;
        let uid = req.into_inner().run_uid;
        let registration = self
            .engine
            .status(&uid)
            .ok_or_else(|| Status::not_found(format!("run {uid} is not registered")))?;
        Ok(Response::new(pb::StatusResponse {
            registration: Some(registration),
        }))
    }

    async fn invoke(
        &self,
        req: Request<pb::InvokeRequest>,
    ) -> Result<Response<pb::InvokeResponse>, Status> {
        self.authorize(&req)?;
        let r = req.into_inner();
        if !kruntimes_proto::api::valid_invocation_id(&r.invocation_id) {
            return Err(Status::invalid_argument("invalid invocation id"));
        }
        let call = Invocation {
            run_uid: &r.run_uid,
            fence: None,
            registration_id: Some(&r.registration_id),
            namespace_runtime: None,
            invocation_id: &r.invocation_id,
            input: &r.input,
            timeout: (r.timeout_ms > 0).then(|| Duration::from_millis(r.timeout_ms.into())),
        };
        let output = self.engine.invoke(call).await.map_err(engine_status)?;
        Ok(Response::new(pb::InvokeResponse { output }))
    }

    async fn unregister(
        &self,
        req: Request<pb::UnregisterRequest>,
    ) -> Result<Response<pb::UnregisterResponse>, Status> {
        self.authorize(&req)?;
        let r = req.into_inner();
        let mode = pb::UnregisterMode::try_from(r.mode).unwrap_or(pb::UnregisterMode::Drain);
        let existed = self
            .engine
            .unregister(&r.run_uid, &r.registration_id, mode)
            .await
            .map_err(engine_status)?;
        Ok(Response::new(pb::UnregisterResponse { existed }))
    }
}
