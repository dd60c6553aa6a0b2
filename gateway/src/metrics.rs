//! Prometheus metrics of the gateway, on a private registry.

use prometheus::{
    HistogramOpts, HistogramVec, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
};

/// The gateway's metrics.
pub struct Metrics {
    registry: Registry,
    /// Requests by route and status code.
    pub requests: IntCounterVec,
    /// Request latency by route.
    pub latency: HistogramVec,
    /// Requests in flight.
    pub in_flight: IntGauge,
    /// Ownership table sizes by source kind.
    pub table_entries: IntGaugeVec,
    /// Auth cache hits and misses by layer.
    pub auth_cache: IntCounterVec,
    /// Auth decisions by outcome.
    pub auth_decisions: IntCounterVec,
    /// Authentication/authorization API calls by api and result.
    pub auth_api_calls: IntCounterVec,
    /// Authentication/authorization API call latency by api.
    pub auth_api_latency: HistogramVec,
}

impl Metrics {
    /// Registers every metric.
    pub fn new() -> prometheus::Result<Self> {
        let registry = Registry::new_custom(Some("kruntimes_gateway".into()), None)?;
        let requests = IntCounterVec::new(
            Opts::new("requests_total", "Requests by route and status code."),
            &["route", "code"],
        )?;
        let latency = HistogramVec::new(
            HistogramOpts::new("request_duration_seconds", "Request latency by route.").buckets(
                vec![
                    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                    10.0, 30.0,
                ],
            ),
            &["route"],
        )?;
        let in_flight = IntGauge::new("in_flight_requests", "Requests in flight.")?;
        let table_entries = IntGaugeVec::new(
            Opts::new(
                "ownership_table_entries",
                "Entries in the ownership table by source.",
            ),
            &["source"],
        )?;
        let auth_cache = IntCounterVec::new(
            Opts::new(
                "auth_cache_total",
                "Decision cache lookups by layer and result.",
            ),
            &["layer", "result"],
        )?;
        let auth_decisions = IntCounterVec::new(
            Opts::new("auth_decisions_total", "Auth decisions by outcome."),
            &["outcome"],
        )?;
        let auth_api_calls = IntCounterVec::new(
            Opts::new(
                "auth_api_calls_total",
                "Kubernetes auth API calls by api and result.",
            ),
            &["api", "result"],
        )?;
        let auth_api_latency = HistogramVec::new(
            HistogramOpts::new(
                "auth_api_call_duration_seconds",
                "Kubernetes auth API call latency by api.",
            )
            .buckets(vec![
                0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
            ]),
            &["api"],
        )?;
        registry.register(Box::new(auth_decisions.clone()))?;
        registry.register(Box::new(auth_api_calls.clone()))?;
        registry.register(Box::new(auth_api_latency.clone()))?;
        registry.register(Box::new(requests.clone()))?;
        registry.register(Box::new(latency.clone()))?;
        registry.register(Box::new(in_flight.clone()))?;
        registry.register(Box::new(table_entries.clone()))?;
        registry.register(Box::new(auth_cache.clone()))?;
        Ok(Self {
            registry,
            requests,
            latency,
            in_flight,
            table_entries,
            auth_cache,
            auth_decisions,
            auth_api_calls,
            auth_api_latency,
        })
    }

    /// Text exposition format.
    pub fn render(&self) -> Vec<u8> {
        kruntimes_support::metrics::text(&self.registry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_registered_metrics() {
        let m = Metrics::new().unwrap();
        m.requests.with_label_values(&["invoke", "200"]).inc();
        m.auth_cache.with_label_values(&["authn", "hit"]).inc();
        let text = String::from_utf8(m.render()).unwrap();
        assert!(text.contains("kruntimes_gateway_requests_total{code=\"200\",route=\"invoke\"} 1"));
        assert!(text.contains("kruntimes_gateway_auth_cache_total"));
    }
}
