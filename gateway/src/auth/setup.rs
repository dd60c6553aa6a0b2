//! The decision cache, built from the gateway's [`AuthConfig`]: the
//! embedded mode's JWTs and policy, or the cluster's TokenReview and
//! SubjectAccessReview (optionally local service-account JWT checks).

use std::sync::Arc;
use std::time::Duration;

use super::cache::{CacheConfig, CacheMetrics, DecisionCache};
use super::jwt::JwtAuthenticator;
use super::kube::{
    ApiMetrics, KubeCalls, ServiceAccountJwtAuthenticator, SubjectAccessReviewAuthorizer,
    TokenReviewAuthenticator,
};
use super::policy::{Policy, PolicyAuthorizer};
use super::{Authenticator, Authorizer};
use crate::config::AuthConfig;
use crate::error::{Error, Result, read};
use crate::metrics::Metrics;

/// How often the cluster's service-account keys are fetched again.
const SA_KEYS_REFRESH: Duration = Duration::from_secs(300);

/// A runtime of its own for API-server calls, alive for the whole process:
/// Pingora's per-thread runtimes never own those connections.
fn kube_runtime() -> Result<tokio::runtime::Handle> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("kube-auth")
        .enable_all()
        .build()?;
    let handle = rt.handle().clone();
    std::thread::Builder::new()
        .name("kube-auth-runtime".into())
        .spawn(move || rt.block_on(std::future::pending::<()>()))?;
    Ok(handle)
}

/// TokenReview (or local service-account JWTs) and SubjectAccessReview.
fn kube_backends(
    kubeconfig: Option<&std::path::Path>,
    token_audiences: &[String],
    sa_jwt_local: bool,
    api_timeout: Duration,
    metrics: &Metrics,
) -> Result<(Arc<dyn Authenticator>, Arc<dyn Authorizer>)> {
    let runtime = kube_runtime()?;
    let kubeconfig = kubeconfig.map(ToOwned::to_owned);
    let client = runtime
        .block_on(async move { kruntimes_support::kube::client(kubeconfig.as_deref()).await })
        .map_err(|e| Error::setup("kubernetes client", format!("{e:#}")))?;
    let calls = KubeCalls::new(
        client,
        runtime.clone(),
        Some(ApiMetrics {
            calls: metrics.auth_api_calls.clone(),
            latency: metrics.auth_api_latency.clone(),
        }),
        api_timeout,
    );
    let token_review: Arc<dyn Authenticator> = Arc::new(TokenReviewAuthenticator::new(
        calls.clone(),
        token_audiences.to_vec(),
    ));
    let authn = if sa_jwt_local {
        let audiences = token_audiences.to_vec();
        let fallback = token_review.clone();
        let local = {
            let calls = calls.clone();
            runtime.block_on(async move {
                ServiceAccountJwtAuthenticator::discover(&calls, audiences, fallback).await
            })
        }
        .map_err(|e| Error::setup("service-account key discovery", e))?;
        local.refresh_every(calls.clone(), SA_KEYS_REFRESH);
        tracing::warn!(
            "service-account tokens are verified locally: revocations are not seen before exp"
        );
        Arc::new(local) as Arc<dyn Authenticator>
    } else {
        token_review
    };
    Ok((authn, Arc::new(SubjectAccessReviewAuthorizer::new(calls))))
}

/// The decision cache of `auth` (`None` when authentication is off).
pub fn decision_cache(
    auth: &AuthConfig,
    cache: &CacheConfig,
    metrics: &Metrics,
) -> Result<Option<Arc<DecisionCache>>> {
    let (authn, authz): (Arc<dyn Authenticator>, Arc<dyn Authorizer>) = match auth {
        AuthConfig::None => {
            tracing::warn!("authentication is DISABLED; every caller may invoke every run");
            return Ok(None);
        }
        AuthConfig::Jwt {
            public_key,
            issuer,
            audience,
            policy,
        } => {
            let authn = JwtAuthenticator::new(&read(public_key)?, issuer, audience)
                .map_err(|e| Error::setup("JWT public key", e))?;
            let policy: Policy =
                serde_yaml::from_slice(&read(policy)?).map_err(|e| Error::setup("policy", e))?;
            (Arc::new(authn), Arc::new(PolicyAuthorizer(policy)))
        }
        AuthConfig::Kubernetes {
            kubeconfig,
            token_audiences,
            sa_jwt_local,
            api_timeout,
        } => kube_backends(
            kubeconfig.as_deref(),
            token_audiences,
            *sa_jwt_local,
            *api_timeout,
            metrics,
        )?,
    };
    Ok(Some(Arc::new(DecisionCache::new(
        authn,
        authz,
        cache.clone(),
        Some(CacheMetrics {
            lookups: metrics.auth_cache.clone(),
            decisions: metrics.auth_decisions.clone(),
        }),
    ))))
}
