//! `SessionRuntime` over gRPC: the control plane opens, inspects and closes
//! the sessions this runtimed hosts.

use std::sync::Arc;

use kruntimes_proto::session::v1 as pb;
use kruntimes_proto::session::v1::session_runtime_server::{SessionRuntime, SessionRuntimeServer};
use tonic::{Request, Response, Status};

use super::register_status;
use crate::dataplane::PeerPolicy;
use crate::session::{CloseMode, Sessions};

/// The gRPC service.
#[derive(Clone)]
pub struct SessionService {
    sessions: Arc<Sessions>,
    policy: Arc<PeerPolicy>,
}

impl SessionService {
    /// Wraps the sessions.
    pub fn new(sessions: Arc<Sessions>, policy: Arc<PeerPolicy>) -> SessionRuntimeServer<Self> {
        SessionRuntimeServer::new(Self { sessions, policy })
    }

    fn authorize<T>(&self, req: &Request<T>) -> Result<(), Status> {
        self.policy.require_control(req, "SessionRuntime")
    }
}

#[tonic::async_trait]
impl SessionRuntime for SessionService {
    async fn open(
        &self,
        req: Request<pb::OpenSessionRequest>,
    ) -> Result<Response<pb::SessionInfo>, Status> {
        self.authorize(&req)?;
        let info = self
            .sessions
            .open(req.into_inner())
            .await
            .map_err(register_status)?;
        Ok(Response::new(info))
    }

    async fn status(
        &self,
        req: Request<pb::SessionStatusRequest>,
    ) -> Result<Response<pb::SessionInfo>, Status> {
        self.authorize(&req)?;
        let uid = req.into_inner().run_uid;
        let h = self
            .sessions
            .get(&uid)
            .ok_or_else(|| Status::not_found(format!("no session for run {uid}")))?;
        Ok(Response::new(h.info()))
    }

    async fn close(
        &self,
        req: Request<pb::CloseSessionRequest>,
    ) -> Result<Response<pb::CloseSessionResponse>, Status> {
        self.authorize(&req)?;
        let r = req.into_inner();
        let mode = if r.cancel {
            CloseMode::Cancel
        } else {
            CloseMode::Drain
        };
        let existed = self.sessions.close(&r.run_uid, mode).await;
        Ok(Response::new(pb::CloseSessionResponse { existed }))
    }
}
