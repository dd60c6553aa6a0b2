//! Prometheus metrics of the gateway, on a private registry.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use kruntimes_process::listen::Stats;
use prometheus::{
    Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry,
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
    /// What the public listeners did, by `listener` and `event`
    /// (`accepted`, `refused_at_bound`, `accept_error`, `handshake_timeout`,
    /// `header_timeout`).
    pub connections: IntCounterVec,
    /// Connections open now, by `listener`.
    pub open_connections: IntGaugeVec,
    /// Log lines dropped because the log writer was behind.
    pub log_lines_dropped: IntCounter,
    /// Client faults by kind ([`crate::client_faults`]), synced from
    /// `faults` at render.
    client_faults_total: IntCounterVec,
    /// The counts the log layer and the proxy add client faults to.
    pub faults: crate::client_faults::ClientFaults,
    /// The hot series, resolved once: an invoke's latency and its 200s.
    pub invoke: HotSeries,
    listeners: std::sync::Mutex<Vec<(&'static str, Arc<Stats>)>>,
    log_drops: std::sync::OnceLock<kruntimes_process::logbuf::Dropped>,
}

/// Series of the `invoke` route resolved at start, so the request path does
/// not hash label values for them on every request.
#[derive(Clone)]
pub struct HotSeries {
    /// `request_duration_seconds{route="invoke"}`.
    pub latency: Histogram,
    /// `requests_total{route="invoke",code="200"}`.
    pub ok: IntCounter,
}

impl Metrics {
    /// Counts one finished request of `route` with status `code` taking
    /// `elapsed`.
    pub fn observe(&self, route: &'static str, code: u16, elapsed: std::time::Duration) {
        let secs = elapsed.as_secs_f64();
        if route == "invoke" {
            self.invoke.latency.observe(secs);
            if code == 200 {
                self.invoke.ok.inc();
                return;
            }
        } else {
            self.latency.with_label_values(&[route]).observe(secs);
        }
        self.requests
            .with_label_values(&[route, code.to_string().as_str()])
            .inc();
    }

    /// Reports `counter` (the log writer's dropped lines) as
    /// `log_lines_dropped_total`.
    pub fn watch_log_drops(&self, counter: kruntimes_process::logbuf::Dropped) {
        let _ = self.log_drops.set(counter);
    }
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
        let connections = IntCounterVec::new(
            Opts::new(
                "connections_total",
                "What the public listeners did with connections, by listener and event.",
            ),
            &["listener", "event"],
        )?;
        let open_connections = IntGaugeVec::new(
            Opts::new("open_connections", "Connections open now, by listener."),
            &["listener"],
        )?;
        let log_lines_dropped = IntCounter::new(
            "log_lines_dropped_total",
            "Log lines dropped: the log writer was behind, or its output refused them.",
        )?;
        let client_faults_total = IntCounterVec::new(
            Opts::new(
                "client_faults_total",
                "Faults clients caused (malformed HTTP/2 or HTTP/1, failed TLS handshakes, requests they broke off), by kind; counted, not logged above DEBUG.",
            ),
            &["kind"],
        )?;
        for kind in crate::client_faults::Kind::ALL {
            client_faults_total.with_label_values(&[kind.label()]);
        }
        registry.register(Box::new(client_faults_total.clone()))?;
        let invoke = HotSeries {
            latency: latency.with_label_values(&["invoke"]),
            ok: requests.with_label_values(&["invoke", "200"]),
        };
        registry.register(Box::new(log_lines_dropped.clone()))?;
        registry.register(Box::new(connections.clone()))?;
        registry.register(Box::new(open_connections.clone()))?;
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
            connections,
            open_connections,
            log_lines_dropped,
            client_faults_total,
            faults: crate::client_faults::ClientFaults::default(),
            invoke,
            listeners: std::sync::Mutex::default(),
            log_drops: std::sync::OnceLock::new(),
        })
    }

    /// Reports `stats` (the accept loop's counters) as listener `name`.
    pub fn watch_listener(&self, name: &'static str, stats: Arc<Stats>) {
        self.listeners
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((name, stats));
    }

    /// Brings the connection counters up to the listeners' [`Stats`].
    fn sync_listeners(&self) {
        let listeners = self.listeners.lock().unwrap_or_else(|p| p.into_inner());
        for (name, stats) in listeners.iter() {
            for (event, now) in [
                ("accepted", &stats.accepted),
                ("refused_at_bound", &stats.refused_at_bound),
                ("accept_error", &stats.accept_errors),
                ("handshake_timeout", &stats.handshake_timeouts),
            ] {
                let c = self.connections.with_label_values(&[name, event]);
                c.inc_by(now.load(Ordering::Relaxed).saturating_sub(c.get()));
            }
        }
    }

    /// Text exposition format.
    pub fn render(&self) -> Vec<u8> {
        self.sync_listeners();
        if let Some(drops) = self.log_drops.get() {
            let c = &self.log_lines_dropped;
            c.inc_by(drops.get().saturating_sub(c.get()));
        }
        for kind in crate::client_faults::Kind::ALL {
            let c = self.client_faults_total.with_label_values(&[kind.label()]);
            c.inc_by(self.faults.get(kind).saturating_sub(c.get()));
        }
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
        m.observe("invoke", 200, std::time::Duration::from_millis(1));
        m.observe("invoke", 503, std::time::Duration::from_millis(1));
        m.observe("healthz", 200, std::time::Duration::from_millis(1));
        let text = String::from_utf8(m.render()).unwrap();
        assert!(text.contains("kruntimes_gateway_requests_total{code=\"200\",route=\"invoke\"} 2"));
        assert!(text.contains("kruntimes_gateway_requests_total{code=\"503\",route=\"invoke\"} 1"));
        assert!(
            text.contains("kruntimes_gateway_requests_total{code=\"200\",route=\"healthz\"} 1")
        );
        assert!(
            text.contains("kruntimes_gateway_request_duration_seconds_count{route=\"invoke\"} 2")
        );
        assert!(
            text.contains("kruntimes_gateway_request_duration_seconds_count{route=\"healthz\"} 1")
        );
        assert!(text.contains("kruntimes_gateway_log_lines_dropped_total 0"));
        assert!(text.contains("kruntimes_gateway_auth_cache_total"));
    }
}
