//! runtimed's Prometheus metrics, served on `--metrics-listen` (plain
//! HTTP, `GET /metrics`): invocations by outcome and their durations,
//! registrations by result, worker crashes, session operations waiting,
//! and what the TLS port refused. Labels are fixed sets — never a Run, a
//! subject, a token or a payload.

use std::sync::atomic::Ordering;
use std::sync::{Arc, LazyLock};

use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, IntGauge, Opts, Registry};

/// The process's metrics.
pub struct Metrics {
    registry: Registry,
    /// Registrations, by `result` (`ok`, `refused`).
    pub registrations: IntCounterVec,
    /// Session operations queued or running, over every session.
    pub session_operations: IntGauge,
    /// What the TLS port did, by `event` (`refused_at_bound`,
    /// `accept_error`, `handshake_timeout`).
    pub connections: IntCounterVec,
    /// Exports of artifacts directories, by `result` (`ok`, `invalid`,
    /// `failed`).
    pub artifact_exports: IntCounterVec,
    /// Runs whose artifacts were deleted, by `reason` (`deleted`,
    /// `expired`, `orphaned`, `gave_up`: the store kept failing and the
    /// Run's deletion went on without it).
    pub artifact_cleanups: IntCounterVec,
    /// The children of `invocations_total` and
    /// `invocation_duration_seconds` (by `outcome`) for each of
    /// [`OUTCOMES`], resolved once: the invocation path does no label
    /// lookup.
    by_outcome: Vec<(prometheus::IntCounter, prometheus::Histogram)>,
}

/// The invocation outcomes, as labelled.
/// `abandoned`: its caller went away before it ended. `error`, the last,
/// also counts any outcome not listed.
pub const OUTCOMES: [&str; 6] = [
    "ok",
    "function_error",
    "timeout",
    "worker_crashed",
    "abandoned",
    "error",
];

fn build() -> prometheus::Result<Metrics> {
    let registry = Registry::new_custom(Some("kruntimes_runtimed".into()), None)?;
    let invocations = IntCounterVec::new(
        Opts::new("invocations_total", "Invocations finished, by outcome."),
        &["outcome"],
    )?;
    let invocation_duration = HistogramVec::new(
        HistogramOpts::new(
            "invocation_duration_seconds",
            "Time from admission to the answer, by outcome.",
        )
        .buckets(vec![
            0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
            30.0, 60.0, 300.0,
        ]),
        &["outcome"],
    )?;
    let registrations = IntCounterVec::new(
        Opts::new("registrations_total", "Function registrations, by result."),
        &["result"],
    )?;
    let session_operations = IntGauge::new(
        "session_operations",
        "Session operations queued or running, over every session.",
    )?;
    let connections = IntCounterVec::new(
        Opts::new(
            "connections_total",
            "Connections the TLS port refused or lost before serving, by event.",
        ),
        &["event"],
    )?;
    registry.register(Box::new(invocations.clone()))?;
    registry.register(Box::new(invocation_duration.clone()))?;
    registry.register(Box::new(registrations.clone()))?;
    registry.register(Box::new(session_operations.clone()))?;
    registry.register(Box::new(connections.clone()))?;
    let artifact_exports = IntCounterVec::new(
        Opts::new(
            "artifact_exports_total",
            "Exports of a Run's artifacts directory, by result.",
        ),
        &["result"],
    )?;
    let artifact_cleanups = IntCounterVec::new(
        Opts::new(
            "artifact_cleanups_total",
            "Runs whose artifacts this runtimed deleted (or gave up on), by reason.",
        ),
        &["reason"],
    )?;
    registry.register(Box::new(artifact_exports.clone()))?;
    registry.register(Box::new(artifact_cleanups.clone()))?;
    let by_outcome = OUTCOMES
        .iter()
        .map(|o| {
            (
                invocations.with_label_values(&[o]),
                invocation_duration.with_label_values(&[o]),
            )
        })
        .collect();
    Ok(Metrics {
        by_outcome,
        registry,
        registrations,
        session_operations,
        connections,
        artifact_exports,
        artifact_cleanups,
    })
}

static METRICS: LazyLock<Option<Metrics>> = LazyLock::new(|| build().ok());

/// The process's metrics (`None` only if the fixed definitions were
/// refused, which the tests rule out).
pub fn get() -> Option<&'static Metrics> {
    METRICS.as_ref()
}

/// Counts one finished invocation; `outcome` is one of [`OUTCOMES`] (any
/// other counts as `error`).
pub fn invocation(outcome: &str, seconds: f64) {
    if let Some(m) = get() {
        let i = OUTCOMES
            .iter()
            .position(|o| *o == outcome)
            .unwrap_or(OUTCOMES.len() - 1);
        let (count, duration) = &m.by_outcome[i];
        count.inc();
        duration.observe(seconds);
    }
}

/// Counts one export of an artifacts directory (`ok`, `invalid`,
/// `failed`).
pub fn artifact_export(result: &str) {
    if let Some(m) = get() {
        m.artifact_exports.with_label_values(&[result]).inc();
    }
}

/// Counts one Run's artifacts deleted (`deleted`, `expired`, `orphaned`)
/// or given up on (`gave_up`).
pub fn artifact_cleanup(reason: &str) {
    if let Some(m) = get() {
        m.artifact_cleanups.with_label_values(&[reason]).inc();
    }
}

/// Counts one registration.
pub fn registration(ok: bool) {
    if let Some(m) = get() {
        m.registrations
            .with_label_values(&[if ok { "ok" } else { "refused" }])
            .inc();
    }
}

/// Brings the connection counters up to `stats`.
fn sync_connections(m: &Metrics, stats: &kruntimes_process::listen::Stats) {
    for (event, now) in [
        (
            "refused_at_bound",
            stats.refused_at_bound.load(Ordering::Relaxed),
        ),
        ("accept_error", stats.accept_errors.load(Ordering::Relaxed)),
        (
            "handshake_timeout",
            stats.handshake_timeouts.load(Ordering::Relaxed),
        ),
    ] {
        let c = m.connections.with_label_values(&[event]);
        c.inc_by(now.saturating_sub(c.get()));
    }
}

/// The Prometheus text of every metric; `pending` is the number of session
/// operations queued or running now.
pub fn render(stats: Option<&kruntimes_process::listen::Stats>, pending: i64) -> Vec<u8> {
    let Some(m) = get() else {
        return Vec::new();
    };
    if let Some(s) = stats {
        sync_connections(m, s);
    }
    m.session_operations.set(pending);
    kruntimes_support::metrics::text(&m.registry)
}

/// Serves `GET /metrics` on `listener` until the process ends.
pub async fn serve(
    listener: tokio::net::TcpListener,
    stats: Arc<kruntimes_process::listen::Stats>,
    sessions: Arc<crate::session::Sessions>,
) {
    kruntimes_support::metrics::serve(listener, move || {
        render(Some(&stats), sessions.pending_operations() as i64)
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_metric_renders_with_fixed_labels() {
        invocation("ok", 0.002);
        invocation("function_error", 0.01);
        registration(true);
        registration(false);
        let stats = kruntimes_process::listen::Stats::default();
        stats.refused_at_bound.fetch_add(3, Ordering::Relaxed);
        let text = String::from_utf8(render(Some(&stats), 2)).unwrap();
        for needle in [
            "kruntimes_runtimed_invocations_total{outcome=\"ok\"}",
            "kruntimes_runtimed_invocation_duration_seconds_bucket{outcome=\"function_error\"",
            "kruntimes_runtimed_registrations_total{result=\"refused\"}",
            "kruntimes_runtimed_session_operations 2",
            "kruntimes_runtimed_connections_total{event=\"refused_at_bound\"} 3",
        ] {
            assert!(text.contains(needle), "{needle} missing:\n{text}");
        }
        // Counters follow the listener's totals without counting twice.
        let again = String::from_utf8(render(Some(&stats), 0)).unwrap();
        assert!(
            again.contains("kruntimes_runtimed_connections_total{event=\"refused_at_bound\"} 3")
        );
    }
}
