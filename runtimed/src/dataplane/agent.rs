//! The `Agent` service (`kruntimes.agent.v1`): the control plane assigns
//! Runs to this runtimed and releases them. Only the control-plane client
//! identity may call it. This is the service's gRPC edge: refusals become
//! the status codes `agent.proto` documents here and nowhere else.

use kruntimes_proto::agent::v1 as pb;
use kruntimes_proto::agent::v1::agent_server::{Agent, AgentServer};
use std::sync::Arc;
use tonic::{Request, Response, Status};

use crate::dataplane::PeerPolicy;
use crate::host::Host;
use crate::registration::{RegisterError, Release};

/// The service.
#[derive(Clone)]
pub struct AgentService {
    host: Host,
    policy: Arc<PeerPolicy>,
}

impl AgentService {
    /// Serves `host` to the callers `policy` admits.
    pub fn new(host: Host, policy: Arc<PeerPolicy>) -> AgentServer<Self> {
        AgentServer::new(Self { host, policy })
    }
}

/// The status of a refused assignment, as `agent.proto` documents it.
pub fn refused(e: RegisterError) -> Status {
    match &e {
        RegisterError::Invalid(_) => Status::invalid_argument(e.to_string()),
        RegisterError::Conflict(_) => Status::already_exists(e.to_string()),
        RegisterError::Stale { .. } | RegisterError::Load(_) => {
            Status::failed_precondition(e.to_string())
        }
        RegisterError::Unavailable(_) => Status::unavailable(e.to_string()),
    }
}

#[tonic::async_trait]
impl Agent for AgentService {
    async fn assign(
        &self,
        req: Request<pb::AssignRequest>,
    ) -> Result<Response<pb::AssignResponse>, Status> {
        self.policy.require_control(&req, "Agent")?;
        let registration_id = self.host.assign(req.into_inner()).await.map_err(refused)?;
        Ok(Response::new(pb::AssignResponse { registration_id }))
    }

    async fn release(
        &self,
        req: Request<pb::ReleaseRequest>,
    ) -> Result<Response<pb::ReleaseResponse>, Status> {
        self.policy.require_control(&req, "Agent")?;
        let r = req.into_inner();
        if r.keep {
            let existed = self.host.kill(&r.run_uid).await;
            return Ok(Response::new(pb::ReleaseResponse { existed }));
        }
        let how = if r.cancel {
            Release::Cancel
        } else {
            Release::Drain
        };
        let existed = self
            .host
            .release(&r.run_uid, &r.registration_id, how)
            .await
            .map_err(|e| Status::failed_precondition(e.to_string()))?;
        Ok(Response::new(pb::ReleaseResponse { existed }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_carry_the_documented_codes() {
        let cases = [
            (
                RegisterError::Invalid("x".into()),
                tonic::Code::InvalidArgument,
            ),
            (RegisterError::Conflict(1), tonic::Code::AlreadyExists),
            (
                RegisterError::Stale {
                    requested: 1,
                    current: 2,
                },
                tonic::Code::FailedPrecondition,
            ),
            (
                RegisterError::Load("x".into()),
                tonic::Code::FailedPrecondition,
            ),
            (
                RegisterError::Unavailable("x".into()),
                tonic::Code::Unavailable,
            ),
        ];
        for (e, code) in cases {
            assert_eq!(refused(e).code(), code);
        }
    }
}
