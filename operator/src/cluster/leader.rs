//! Leader election among the operator's replicas, on a
//! `coordination.k8s.io` Lease (`kruntimes-operator` in the system
//! namespace).
//!
//! `kube-lease-manager` acquires and renews the Lease (server-side apply,
//! so two replicas can never both take it). Every replica keeps its caches
//! and serves the ownership watch; only the leader decides and writes. A
//! renewal that fails leaves the library's last answer standing, so before
//! each pass's writes the leader also checks the Lease itself: it writes
//! only while the Lease names it and is more than 2 s from expiring (read
//! again once that margin is reached, so a burst of passes costs no GET each). Every write still carries
//! the `resourceVersion` its decision was made on.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use kube_lease_manager::{LeaseManagerBuilder, LeaseParams};
use tokio::sync::watch;

use crate::error::Doing as _;

/// Name of the Lease.
pub const LEASE_NAME: &str = "kruntimes-operator";

/// How this replica takes part in the election.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderElection {
    /// This replica's identity (unique among the replicas).
    pub identity: String,
    /// How long the Lease lasts after its last renewal.
    pub lease_duration: Duration,
    /// The operator's own Deployment (`--owner-deployment`): the Lease is
    /// created owned by it, so it goes with the installation.
    pub owner_deployment: Option<String>,
}

/// This replica's view of the election.
pub struct Leadership {
    api: Api<Lease>,
    identity: String,
    state: watch::Receiver<bool>,
    was_leader: bool,
    /// Until when the Lease, as last read, makes this replica the leader:
    /// passes before then (less a margin) need not read it again.
    valid_until: Option<Timestamp>,
}

/// How long before its recorded expiry the Lease is read again.
const MARGIN: k8s_openapi::jiff::SignedDuration = k8s_openapi::jiff::SignedDuration::from_secs(2);

impl Leadership {
    /// Joins the election in `namespace` (the Lease is created when absent).
    pub async fn join(
        client: kube::Client,
        namespace: &str,
        cfg: &LeaderElection,
    ) -> crate::Result<Self> {
        if let Some(owner) = &cfg.owner_deployment {
            create_owned(&client, namespace, owner).await?;
        }
        let duration = cfg.lease_duration.as_secs().max(3);
        let grace = (duration / 3).max(1);
        let manager = LeaseManagerBuilder::new(client.clone(), LEASE_NAME)
            .with_namespace(namespace)
            .with_parameters(
                LeaseParams::new(cfg.identity.clone(), duration, grace)
                    .with_field_manager(format!("kruntimes-operator/{}", cfg.identity)),
            )
            .build()
            .await
            .map_err(|e| crate::Error::LeaderElection(e.to_string()))?;
        let (state, task) = manager.watch().await;
        // The task lives as long as `state`; its end is only logged.
        tokio::spawn(async move {
            if let Ok(Err(e)) = task.await {
                tracing::warn!(error = %e, "leader election stopped");
            }
        });
        tracing::info!(identity = %cfg.identity, lease = LEASE_NAME, namespace, "joined the leader election");
        Ok(Self {
            api: Api::namespaced(client, namespace),
            identity: cfg.identity.clone(),
            state,
            was_leader: false,
            valid_until: None,
        })
    }

    /// Whether this replica may write now: the election says so and the
    /// Lease, read now, names it and has not expired.
    pub async fn confirmed(&mut self) -> bool {
        let elected = *self.state.borrow_and_update();
        let leading = elected && self.lease_is_mine().await;
        if leading != self.was_leader {
            tracing::info!(identity = %self.identity, leading, "leadership changed");
            self.was_leader = leading;
        }
        leading
    }

    /// Resolves when the election's answer changes.
    pub async fn changed(&mut self) {
        if self.state.changed().await.is_err() {
            // The election task ended: wait for the next tick instead.
            std::future::pending::<()>().await;
        }
    }

    async fn lease_is_mine(&mut self) -> bool {
        let now = Timestamp::now();
        if self.valid_until.is_some_and(|until| now + MARGIN < until) {
            return true;
        }
        self.valid_until = match self.api.get_opt(LEASE_NAME).await {
            Ok(Some(lease)) => held_until(&lease, &self.identity).filter(|until| now < *until),
            Ok(None) => None,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the leader Lease; not writing");
                None
            }
        };
        self.valid_until.is_some()
    }
}

/// Creates the Lease, owned by Deployment `owner`, unless it exists: the
/// garbage collector then removes it with the installation.
async fn create_owned(client: &kube::Client, namespace: &str, owner: &str) -> crate::Result<()> {
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use kube::api::PostParams;
    let deployment = Api::<Deployment>::namespaced(client.clone(), namespace)
        .get(owner)
        .await
        .doing(|| format!("read the operator's Deployment {namespace}/{owner}"))?;
    let mut lease = Lease::default();
    lease.metadata.name = Some(LEASE_NAME.into());
    lease.metadata.namespace = Some(namespace.into());
    lease.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "apps/v1".into(),
        kind: "Deployment".into(),
        name: owner.into(),
        uid: deployment.metadata.uid.unwrap_or_default(),
        ..Default::default()
    }]);
    match Api::<Lease>::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &lease)
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e).doing(|| format!("create the Lease {namespace}/{LEASE_NAME}")),
    }
}

/// Until when `lease` makes `identity` the leader (`None`: another holder,
/// or none).
pub fn held_until(lease: &Lease, identity: &str) -> Option<Timestamp> {
    let spec = lease.spec.as_ref()?;
    if spec.holder_identity.as_deref() != Some(identity) {
        return None;
    }
    let renewed = spec.renew_time.as_ref()?;
    let secs = spec.lease_duration_seconds?;
    Some(renewed.0 + k8s_openapi::jiff::SignedDuration::from_secs(i64::from(secs)))
}

/// Whether `lease` is held by `identity` and unexpired at `now`.
pub fn holds(lease: &Lease, identity: &str, now: Timestamp) -> bool {
    held_until(lease, identity).is_some_and(|until| now < until)
}

/// This replica's identity: `$POD_NAME` (the chart sets it), else the host
/// name.
pub fn default_identity() -> String {
    std::env::var("POD_NAME")
        .ok()
        .filter(|s| !s.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim().to_owned())
                .filter(|h| !h.is_empty())
        })
        .unwrap_or_else(|| "kruntimes-operator".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;

    fn lease(holder: Option<&str>, renewed: Option<Timestamp>, secs: Option<i32>) -> Lease {
        Lease {
            spec: Some(LeaseSpec {
                holder_identity: holder.map(str::to_owned),
                renew_time: renewed.map(MicroTime),
                lease_duration_seconds: secs,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn only_an_unexpired_lease_naming_this_replica_lets_it_write() {
        let t0: Timestamp = "2026-12-06T12:00:00Z".parse().unwrap();
        let at = |s: i64| t0 + k8s_openapi::jiff::SignedDuration::from_secs(s);
        let mine = lease(Some("a"), Some(t0), Some(15));
        assert!(holds(&mine, "a", at(14)));
        assert!(!holds(&mine, "a", at(15)), "expired");
        assert!(!holds(&mine, "b", at(1)), "another holder");
        assert!(!holds(&lease(None, Some(t0), Some(15)), "a", at(1)), "free");
        assert!(
            !holds(&lease(Some("a"), None, Some(15)), "a", at(1)),
            "never renewed"
        );
        assert!(
            !holds(&lease(Some("a"), Some(t0), None), "a", at(1)),
            "no duration"
        );
        assert!(!holds(&Lease::default(), "a", at(1)), "no spec");
    }
}
