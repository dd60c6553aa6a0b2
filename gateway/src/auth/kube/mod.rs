//! Kubernetes authentication and authorization, one backend per module:
//! [`token_review`] (`TokenReview`), [`access_review`]
//! (`SubjectAccessReview`) and [`sa_keys`] (optional local verification of
//! service-account JWTs against the cluster's OIDC discovery keys).
//!
//! These backends sit behind the [`DecisionCache`](super::cache::DecisionCache),
//! which bounds and coalesces the calls made here. Every API call runs on a
//! dedicated runtime ([`KubeCalls`], this module) so the proxy's per-thread
//! runtimes never own connections to the API server. Tokens are never logged
//! or echoed: a rejected token gets a fixed reason, and API errors are
//! reported without the request that caused them.

pub mod access_review;
pub mod sa_keys;
pub mod token_review;

pub use access_review::SubjectAccessReviewAuthorizer;
pub use sa_keys::ServiceAccountJwtAuthenticator;
pub use token_review::TokenReviewAuthenticator;

use std::fmt::Debug;
use std::time::{Duration, Instant};

use kube::api::{Api, PostParams};
use prometheus::{HistogramVec, IntCounterVec};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::AuthError;

/// The API group and resource of Runs, as SubjectAccessReviews name them.
pub use kruntimes_api::{GROUP, RUNS_RESOURCE};

/// Counters of API calls.
#[derive(Clone)]
pub struct ApiMetrics {
    /// Calls by `api` (`tokenreview`, `subjectaccessreview`, `jwks`) and
    /// `result` (`ok`, `error`).
    pub calls: IntCounterVec,
    /// Call latency by `api`.
    pub latency: HistogramVec,
}

/// Runs API calls on a runtime of their own and records their metrics.
#[derive(Clone)]
pub struct KubeCalls {
    client: kube::Client,
    runtime: tokio::runtime::Handle,
    metrics: Option<ApiMetrics>,
    timeout: Duration,
}

impl KubeCalls {
    /// `client` must have been created on `runtime`.
    pub fn new(
        client: kube::Client,
        runtime: tokio::runtime::Handle,
        metrics: Option<ApiMetrics>,
        timeout: Duration,
    ) -> Self {
        Self {
            client,
            runtime,
            metrics,
            timeout,
        }
    }

    /// The client.
    pub fn client(&self) -> &kube::Client {
        &self.client
    }

    /// Runs `f` on the API runtime within the timeout, counting it under
    /// `api`; every failure is [`AuthError::Unavailable`] with a safe reason.
    async fn call<T, F>(&self, api: &'static str, f: F) -> Result<T, AuthError>
    where
        T: Send + 'static,
        F: std::future::Future<Output = Result<T, kube::Error>> + Send + 'static,
    {
        let start = Instant::now();
        let timeout = self.timeout;
        let result = self
            .runtime
            .spawn(async move { tokio::time::timeout(timeout, f).await })
            .await;
        let result = match result {
            Ok(Ok(Ok(v))) => Ok(v),
            Ok(Ok(Err(e))) => Err(AuthError::Unavailable(describe(api, &e))),
            Ok(Err(_)) => Err(AuthError::Unavailable(format!(
                "{api} timed out after {timeout:?}"
            ))),
            Err(_) => Err(AuthError::Unavailable(format!("{api} call was cancelled"))),
        };
        if let Some(m) = &self.metrics {
            m.latency
                .with_label_values(&[api])
                .observe(start.elapsed().as_secs_f64());
            m.calls
                .with_label_values(&[api, if result.is_ok() { "ok" } else { "error" }])
                .inc();
        }
        if let Err(AuthError::Unavailable(why)) = &result {
            tracing::warn!(api, error = %why, "kubernetes auth call failed");
        }
        result
    }

    /// Creates the cluster-scoped `review` and returns the API server's
    /// answer to it (reviews are never stored), counted under `api`.
    async fn create<K>(&self, api: &'static str, review: K) -> Result<K, AuthError>
    where
        K: kube::Resource + Clone + Debug + DeserializeOwned + Serialize + Send + Sync + 'static,
        K::DynamicType: Default,
    {
        let reviews: Api<K> = Api::all(self.client.clone());
        self.call(api, async move {
            reviews.create(&PostParams::default(), &review).await
        })
        .await
    }
}

/// A safe description of an API error: status code and reason, never the
/// request (which holds the token).
fn describe(api: &str, e: &kube::Error) -> String {
    match e {
        kube::Error::Api(status) => format!(
            "{api} failed: {} {}{}",
            status.code,
            status.reason,
            if status.code == 403 && api != "jwks" {
                " (the gateway's RBAC must allow creating it)"
            } else {
                ""
            }
        ),
        _ => format!("{api} failed: the API server is unreachable"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api_error(code: u16, reason: &str) -> kube::Error {
        kube::Error::Api(
            kube::core::Status {
                code,
                reason: reason.into(),
                message: "token abc was rejected".into(),
                ..kube::core::Status::default()
            }
            .boxed(),
        )
    }

    #[test]
    fn api_errors_are_described_by_status_and_reason_only() {
        let why = describe("tokenreview", &api_error(500, "InternalError"));
        assert_eq!(why, "tokenreview failed: 500 InternalError");
        assert!(!why.contains("abc"));
    }

    #[test]
    fn forbidden_reviews_point_at_the_gateways_rbac_but_key_reads_do_not() {
        assert_eq!(
            describe("subjectaccessreview", &api_error(403, "Forbidden")),
            "subjectaccessreview failed: 403 Forbidden (the gateway's RBAC must allow creating it)"
        );
        assert_eq!(
            describe("jwks", &api_error(403, "Forbidden")),
            "jwks failed: 403 Forbidden"
        );
    }

    #[test]
    fn transport_errors_say_the_api_server_is_unreachable() {
        let e = kube::Error::LinesCodecMaxLineLengthExceeded;
        assert_eq!(
            describe("tokenreview", &e),
            "tokenreview failed: the API server is unreachable"
        );
    }
}
