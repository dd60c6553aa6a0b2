//! The public CA bundle published as `status.endpoint.caBundle`: read from
//! a ConfigMap's `ca.crt` (never a Secret), cached for [`CA_REFRESH`], and
//! kept at its last value when a read fails.

use std::time::{Duration, Instant};

use base64::Engine as _;
use k8s_openapi::api::core::v1::ConfigMap;
use kruntimes_api::MAX_CA_BUNDLE_BYTES;
use kube::api::Api;

use crate::error::Doing as _;

/// How long the CA bundle read from the ConfigMap is reused.
pub const CA_REFRESH: Duration = Duration::from_secs(10);

/// The CA bundle source and its cache.
pub(super) struct CaBundle {
    /// ConfigMap `namespace`, `name`.
    source: Option<(String, String)>,
    cached: Option<(Instant, Option<String>)>,
}

impl CaBundle {
    /// A bundle read from `source`, or none at all.
    pub(super) fn new(source: Option<(String, String)>) -> Self {
        Self {
            source,
            cached: None,
        }
    }

    /// The base64 bundle, re-read at most every [`CA_REFRESH`].
    pub(super) async fn get(&mut self, client: &kube::Client) -> Option<String> {
        if let Some((at, bundle)) = &self.cached
            && at.elapsed() < CA_REFRESH
        {
            return bundle.clone();
        }
        let bundle = match self.read(client).await {
            Ok(b) => b,
            // A failed read is not a removed CA: keep publishing the last one.
            Err(e) => {
                tracing::warn!(error = %e, "CA ConfigMap not readable; keeping the last bundle");
                self.cached.as_ref().and_then(|(_, b)| b.clone())
            }
        };
        self.cached = Some((Instant::now(), bundle.clone()));
        bundle
    }

    /// `Ok(None)` when the ConfigMap or its key is absent.
    async fn read(&self, client: &kube::Client) -> crate::Result<Option<String>> {
        let Some((ns, name)) = self.source.as_ref() else {
            return Ok(None);
        };
        let Some(cm) = Api::<ConfigMap>::namespaced(client.clone(), ns)
            .get_opt(name)
            .await
            .doing(|| format!("read ConfigMap {ns}/{name}"))?
        else {
            return Ok(None);
        };
        let Some(pem) = cm.data.as_ref().and_then(|d| d.get("ca.crt")) else {
            return Ok(None);
        };
        Ok(encode_bundle(pem, &format!("{ns}/{name}")))
    }
}

/// `pem` as base64, or `None` (with a warning) when it exceeds the status
/// field's bound.
fn encode_bundle(pem: &str, source: &str) -> Option<String> {
    let bundle = base64::engine::general_purpose::STANDARD.encode(pem.as_bytes());
    if bundle.len() > MAX_CA_BUNDLE_BYTES {
        tracing::warn!(
            configmap = %source,
            bytes = bundle.len(),
            "ca.crt is too large for status.endpoint.caBundle; omitted"
        );
        return None;
    }
    Some(bundle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bundles_are_base64_and_bounded() {
        assert_eq!(encode_bundle("CA", "ns/ca").as_deref(), Some("Q0E="));
        let huge = "x".repeat(MAX_CA_BUNDLE_BYTES);
        assert_eq!(encode_bundle(&huge, "ns/ca"), None);
    }
}
