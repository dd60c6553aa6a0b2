//! The embedded control plane's gRPC side: mTLS channels to the runtimed
//! instances and the [`Action`]s performed over them, each outcome sent
//! back to the control loop as a [`Msg`].

use std::collections::HashMap;
use std::time::Duration;

use kruntimes_certs::TlsFiles;
use kruntimes_proto::agent::v1 as pb;
use kruntimes_proto::agent::v1::agent_client::AgentClient;
use tokio::sync::mpsc;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use super::controller::{Action, RegisterOutcome};
use super::{Error, Msg, Result, read};

/// The `Agent` client of one runtimed.
#[derive(Clone)]
pub(super) struct PodClients {
    agent: AgentClient<Channel>,
}

impl PodClients {
    /// A client over a lazily connected channel.
    pub(super) fn new(channel: Channel) -> Self {
        Self {
            agent: AgentClient::new(channel),
        }
    }
}

/// A tonic endpoint to a runtimed (or any internal service) over mTLS.
pub fn internal_endpoint(address: &str, server_name: &str, tls: &TlsFiles) -> Result<Endpoint> {
    let cfg = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(read(&tls.ca)?))
        .identity(Identity::from_pem(read(&tls.cert)?, read(&tls.key)?))
        .domain_name(server_name);
    Ok(Endpoint::from_shared(format!("https://{address}"))
        .map_err(|_| Error::Endpoint(address.to_owned()))?
        .tls_config(cfg)?
        .connect_timeout(Duration::from_secs(2))
        .tcp_nodelay(true))
}

/// How a failed Assign counts: a refused registration is
/// final, anything else means the owner could not be reached.
fn classify(s: &tonic::Status) -> RegisterOutcome {
    match s.code() {
        tonic::Code::InvalidArgument
        | tonic::Code::FailedPrecondition
        | tonic::Code::AlreadyExists => RegisterOutcome::Permanent(s.message().to_owned()),
        _ => RegisterOutcome::Retryable(s.message().to_owned()),
    }
}

fn registered(
    run: Option<&kruntimes_proto::runtime::v1::RunRef>,
    attempt: u64,
    pod: &str,
    what: &str,
    result: std::result::Result<(), tonic::Status>,
) -> Msg {
    let uid = run.map(|r| r.uid.clone()).unwrap_or_default();
    let outcome = match result {
        Ok(()) => RegisterOutcome::Ok,
        Err(s) => {
            tracing::warn!(uid = %uid, pod = %pod, code = ?s.code(), message = %s.message(), "{what} failed");
            classify(&s)
        }
    };
    Msg::Registered {
        uid,
        attempt,
        outcome,
    }
}

/// Performs an RPC `action` in a task of its own; its outcome comes back on
/// `tx`. (The pool's actions are the launcher's, not an RPC.)
pub(super) fn perform(
    action: Action,
    clients: &HashMap<String, PodClients>,
    tx: &mpsc::UnboundedSender<Msg>,
) {
    let pod = match &action {
        Action::Assign { pod, .. } | Action::Release { pod, .. } => pod.clone(),
        Action::StartInstances { .. } | Action::StopInstance { .. } | Action::Delete { .. } => {
            return;
        }
    };
    let Some(c) = clients.get(&pod).cloned() else {
        return;
    };
    let tx = tx.clone();
    tokio::spawn(async move {
        let msg = match action {
            Action::Assign { request, .. } => {
                let (run, attempt) = (request.run.clone(), request.attempt);
                let result = c.agent.clone().assign(*request).await.map(drop);
                registered(run.as_ref(), attempt, &pod, "assign", result)
            }
            Action::Release {
                run_uid,
                cancel,
                keep,
                ..
            } => {
                let req = pb::ReleaseRequest {
                    run_uid: run_uid.clone(),
                    cancel,
                    registration_id: String::new(),
                    keep,
                };
                let result = c.agent.clone().release(req).await;
                if let Err(s) = &result {
                    tracing::warn!(uid = %run_uid, pod = %pod, code = ?s.code(), "release failed");
                }
                Msg::Released {
                    pod,
                    uid: run_uid,
                    ok: result.is_ok(),
                }
            }
            Action::StartInstances { .. } | Action::StopInstance { .. } | Action::Delete { .. } => {
                return;
            }
        };
        let _ = tx.send(msg);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refused_registrations_are_final_and_transport_errors_are_owner_loss() {
        for code in [
            tonic::Code::InvalidArgument,
            tonic::Code::FailedPrecondition,
            tonic::Code::AlreadyExists,
        ] {
            assert!(matches!(
                classify(&tonic::Status::new(code, "no")),
                RegisterOutcome::Permanent(_)
            ));
        }
        for code in [tonic::Code::Unavailable, tonic::Code::DeadlineExceeded] {
            assert!(matches!(
                classify(&tonic::Status::new(code, "down")),
                RegisterOutcome::Retryable(_)
            ));
        }
    }
}
