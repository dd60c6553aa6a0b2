//! Who may call what: the peer's identity is the common name of its client
//! certificate (verified against the internal CA by TLS); gateways may use
//! the dataplane, the control plane the `Agent` service.

/// The authenticated peer of a connection (subject CN of its client cert).
#[derive(Debug, Clone, Default)]
pub struct PeerIdentity {
    /// Subject common name, when a certificate was presented.
    pub common_name: Option<String>,
}

/// Which client identities may use which interface.
#[derive(Debug, Clone)]
pub struct PeerPolicy {
    /// CNs allowed on the dataplane (gateways).
    pub dataplane_clients: Vec<String>,
    /// CNs allowed to call `Agent` (control plane).
    pub control_clients: Vec<String>,
}

impl PeerPolicy {
    /// Whether `peer` may send dataplane traffic.
    pub fn may_use_dataplane(&self, peer: &PeerIdentity) -> bool {
        peer.common_name
            .as_ref()
            .is_some_and(|cn| self.dataplane_clients.iter().any(|c| c == cn))
    }

    /// Admits a gRPC request from the control-plane identity only.
    pub fn require_control<T>(
        &self,
        req: &tonic::Request<T>,
        service: &str,
    ) -> Result<(), tonic::Status> {
        let peer = req
            .extensions()
            .get::<PeerIdentity>()
            .cloned()
            .unwrap_or_default();
        if self.may_control(&peer) {
            Ok(())
        } else {
            Err(tonic::Status::permission_denied(format!(
                "{service} accepts the control-plane identity only"
            )))
        }
    }

    /// Whether `peer` may register and unregister.
    pub fn may_control(&self, peer: &PeerIdentity) -> bool {
        peer.common_name
            .as_ref()
            .is_some_and(|cn| self.control_clients.iter().any(|c| c == cn))
    }
}
