//! The operator's Prometheus metrics, served on `--metrics-listen` (plain
//! HTTP, `GET /metrics`): decision passes and their duration, the phases it
//! decided, its writes by result (conflicts included), scheduling cycles
//! and Filter rejections by plugin and reason, and Runtime errors.
//! Labels are fixed sets — never a Run, a namespace or a subject.

use std::sync::LazyLock;

use prometheus::{Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, Opts, Registry};

/// The process's metrics.
pub struct Metrics {
    registry: Registry,
    /// Passes, by `result` (`ok`, `failed`).
    pub passes: IntCounterVec,
    /// Their duration.
    pub pass_duration: Histogram,
    /// Status decisions written, by the `phase` decided.
    pub decisions: IntCounterVec,
    /// Writes, by `kind` (`status`, `finalizer`) and `result` (`ok`,
    /// `conflict` — decided on a stale object, decided again next pass —,
    /// `error`).
    pub writes: IntCounterVec,
    /// Runtimes whose Deployment could not be reconciled.
    pub runtime_errors: IntCounter,
    /// Scheduling cycles, by `result` (`bound`, `unplaced`, and `skipped`:
    /// a waiting Run whose pool did not change since it was turned away).
    pub cycles: IntCounterVec,
    /// Pools whose waiting Runs got cycles, by `source` (`first`, `pods` —
    /// its Pods or the Runs they hold changed —, `runs` — a Run waits there
    /// anew).
    pub wakeups: IntCounterVec,
    /// Pods a Filter turned away, by `plugin` and `reason` (the
    /// scheduler's fixed rejection set).
    pub filter_rejections: IntCounterVec,
    /// 1 while this replica leads (decides and writes), else 0.
    pub leader: IntGauge,
}

fn build() -> prometheus::Result<Metrics> {
    let registry = Registry::new_custom(Some("kruntimes_operator".into()), None)?;
    let passes = IntCounterVec::new(
        Opts::new("passes_total", "Decision passes, by result."),
        &["result"],
    )?;
    let pass_duration = Histogram::with_opts(
        HistogramOpts::new("pass_duration_seconds", "Duration of one decision pass.").buckets(
            vec![
                0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
            ],
        ),
    )?;
    let decisions = IntCounterVec::new(
        Opts::new(
            "decisions_total",
            "Status decisions written, by the phase decided.",
        ),
        &["phase"],
    )?;
    let writes = IntCounterVec::new(
        Opts::new(
            "writes_total",
            "Writes to the API server, by kind and result.",
        ),
        &["kind", "result"],
    )?;
    let runtime_errors = IntCounter::new(
        "runtime_errors_total",
        "Runtimes whose Deployment could not be reconciled.",
    )?;
    let cycles = IntCounterVec::new(
        Opts::new("scheduling_cycles_total", "Scheduling cycles, by result."),
        &["result"],
    )?;
    let wakeups = IntCounterVec::new(
        Opts::new(
            "scheduling_wakeups_total",
            "Pools whose waiting Runs got scheduling cycles, by what woke them.",
        ),
        &["source"],
    )?;
    let filter_rejections = IntCounterVec::new(
        Opts::new(
            "filter_rejections_total",
            "Runtime Pods a scheduler Filter turned away, by plugin and reason.",
        ),
        &["plugin", "reason"],
    )?;
    let leader = IntGauge::new(
        "leader",
        "1 while this replica leads (decides and writes), else 0.",
    )?;
    registry.register(Box::new(leader.clone()))?;
    registry.register(Box::new(cycles.clone()))?;
    registry.register(Box::new(wakeups.clone()))?;
    registry.register(Box::new(filter_rejections.clone()))?;
    registry.register(Box::new(passes.clone()))?;
    registry.register(Box::new(pass_duration.clone()))?;
    registry.register(Box::new(decisions.clone()))?;
    registry.register(Box::new(writes.clone()))?;
    registry.register(Box::new(runtime_errors.clone()))?;
    Ok(Metrics {
        registry,
        passes,
        pass_duration,
        decisions,
        writes,
        runtime_errors,
        cycles,
        wakeups,
        filter_rejections,
        leader,
    })
}

static METRICS: LazyLock<Option<Metrics>> = LazyLock::new(|| build().ok());

/// The process's metrics.
pub fn get() -> Option<&'static Metrics> {
    METRICS.as_ref()
}

/// The Prometheus text of every metric.
pub fn render() -> Vec<u8> {
    get().map_or_else(Vec::new, |m| kruntimes_support::metrics::text(&m.registry))
}

/// Serves `GET /metrics` on `listener` until the process ends.
pub async fn serve(listener: tokio::net::TcpListener) {
    kruntimes_support::metrics::serve(listener, render).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_metric_renders_with_fixed_labels() {
        let m = get().unwrap();
        m.passes.with_label_values(&["ok"]).inc();
        m.pass_duration.observe(0.004);
        m.decisions.with_label_values(&["Scheduled"]).inc();
        m.writes.with_label_values(&["status", "conflict"]).inc();
        m.runtime_errors.inc();
        m.cycles.with_label_values(&["bound"]).inc();
        m.wakeups.with_label_values(&["pods"]).inc();
        m.leader.set(1);
        m.filter_rejections
            .with_label_values(&["RuntimePodAvailability", "NoFreeSlot"])
            .inc();
        let text = String::from_utf8(render()).unwrap();
        for needle in [
            "kruntimes_operator_passes_total{result=\"ok\"}",
            "kruntimes_operator_pass_duration_seconds_bucket",
            "kruntimes_operator_decisions_total{phase=\"Scheduled\"}",
            "kruntimes_operator_writes_total{kind=\"status\",result=\"conflict\"}",
            "kruntimes_operator_runtime_errors_total 1",
            "kruntimes_operator_scheduling_cycles_total{result=\"bound\"}",
            "kruntimes_operator_scheduling_wakeups_total{source=\"pods\"}",
            "kruntimes_operator_leader 1",
            "kruntimes_operator_filter_rejections_total{plugin=\"RuntimePodAvailability\",reason=\"NoFreeSlot\"}",
        ] {
            assert!(text.contains(needle), "{needle} missing:\n{text}");
        }
    }
}
