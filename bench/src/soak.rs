//! The soak's bookkeeping, pure: answers bucketed by time (per minute by
//! default), fault windows, and which errors a fault explains.
//!
//! Every answer is recorded at its *intended* send time (the open loop's
//! schedule), so a stall is charged to the minute it started in.

use std::collections::BTreeMap;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::load::Outcome;

/// The class of an answer: `ok`, an HTTP status, or `transport`.
pub fn class(outcome: &Outcome) -> String {
    match outcome {
        Ok(200) => "ok".to_owned(),
        Ok(code) => code.to_string(),
        Err(_) => "transport".to_owned(),
    }
}

/// A fault injected during the soak, and the span it may explain errors in.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Fault {
    /// What was done (`runtimed-killed`, `control-plane-stream-dropped`, …).
    pub name: String,
    /// When, since the soak started.
    pub at_s: f64,
    /// Whether errors are expected from it, and which classes: only an owner
    /// restart may answer 503 (`NotReady`/`OwnerUnavailable`) until the Run
    /// is Ready again.
    pub expected: Vec<String>,
    /// End of the span where those classes are expected (the first success
    /// after the fault on the affected stream, plus a settle margin).
    pub until_s: f64,
    /// Whether the fault could be injected (and, if not, why).
    pub note: String,
}

/// Whether `class` at `at` is explained by one of `faults`.
pub fn expected(faults: &[Fault], at: Duration, class: &str) -> bool {
    let t = at.as_secs_f64();
    faults
        .iter()
        .any(|f| t >= f.at_s && t <= f.until_s && f.expected.iter().any(|c| c == class))
}

/// One answer.
#[derive(Debug, Clone)]
pub struct Answer {
    /// Its intended send time since the start.
    pub at: Duration,
    /// Its latency from that time.
    pub latency: Duration,
    /// Its class ([`class`]).
    pub class: String,
    /// Which of the stream's targets (Runs) it went to.
    pub target: usize,
}

/// One row of the timeline.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Row {
    /// The bucket's start, seconds since the start.
    pub start_s: u64,
    /// Answers in it.
    pub requests: u64,
    /// `ok` answers.
    pub ok: u64,
    /// The others, by class.
    pub errors: BTreeMap<String, u64>,
    /// Errors no fault explains.
    pub unexpected: u64,
    /// Median latency, µs.
    pub p50_us: u64,
    /// 99th percentile latency, µs.
    pub p99_us: u64,
    /// Maximum latency, µs.
    pub max_us: u64,
}

/// Answers bucketed by `bucket` of time.
pub fn timeline(answers: &[Answer], faults: &[Fault], bucket: Duration) -> Vec<Row> {
    let width = bucket.as_secs().max(1);
    let mut rows: BTreeMap<u64, (Row, Histogram<u64>)> = BTreeMap::new();
    for a in answers {
        let start = a.at.as_secs() / width * width;
        let (row, hist) = rows.entry(start).or_insert_with(|| {
            (
                Row {
                    start_s: start,
                    requests: 0,
                    ok: 0,
                    errors: BTreeMap::new(),
                    unexpected: 0,
                    p50_us: 0,
                    p99_us: 0,
                    max_us: 0,
                },
                new_histogram(),
            )
        });
        row.requests += 1;
        let _ = hist.record((a.latency.as_micros() as u64).clamp(1, 120_000_000));
        if a.class == "ok" {
            row.ok += 1;
        } else {
            *row.errors.entry(a.class.clone()).or_default() += 1;
            if !expected(faults, a.at, &a.class) {
                row.unexpected += 1;
            }
        }
    }
    rows.into_values()
        .map(|(mut row, hist)| {
            row.p50_us = hist.value_at_quantile(0.5);
            row.p99_us = hist.value_at_quantile(0.99);
            row.max_us = hist.max();
            row
        })
        .collect()
}

/// When every target answered `ok` again after `after`: the latest of
/// their first `ok` answers intended at or after it (`None` if one never
/// did).
pub fn recovered_at(answers: &[Answer], after: Duration) -> Option<Duration> {
    let mut first: BTreeMap<usize, Option<Duration>> = BTreeMap::new();
    for a in answers.iter().filter(|a| a.at >= after) {
        let slot = first.entry(a.target).or_insert(None);
        if a.class == "ok" {
            let done = a.at + a.latency;
            *slot = Some(slot.map_or(done, |t: Duration| t.min(done)));
        }
    }
    first
        .into_values()
        .try_fold(Duration::ZERO, |latest, t| t.map(|t| latest.max(t)))
}

/// The seconds with errors: `(second, class, count)`, in time order.
pub fn error_seconds(answers: &[Answer]) -> Vec<(u64, String, u64)> {
    let mut by: BTreeMap<(u64, String), u64> = BTreeMap::new();
    for a in answers.iter().filter(|a| a.class != "ok") {
        *by.entry((a.at.as_secs(), a.class.clone())).or_default() += 1;
    }
    by.into_iter().map(|((s, c), n)| (s, c, n)).collect()
}

// Constant bounds hdrhistogram always accepts: the expect is unreachable.
#[allow(clippy::expect_used)]
fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 120_000_000, 3).expect("valid histogram bounds")
}

/// The resources of one component at a moment.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Usage {
    /// Its process.
    pub pid: u32,
    /// Resident memory, KiB.
    pub rss_kib: u64,
    /// Open file descriptors.
    pub fds: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(at_ms: u64, latency_ms: u64, class: &str) -> Answer {
        to(0, at_ms, latency_ms, class)
    }

    fn to(target: usize, at_ms: u64, latency_ms: u64, class: &str) -> Answer {
        Answer {
            at: Duration::from_millis(at_ms),
            latency: Duration::from_millis(latency_ms),
            class: class.into(),
            target,
        }
    }

    fn restart(at_s: f64, until_s: f64) -> Fault {
        Fault {
            name: "runtimed-killed".into(),
            at_s,
            expected: vec!["503".into()],
            until_s,
            note: String::new(),
        }
    }

    #[test]
    fn classes_name_statuses_and_transport_errors() {
        assert_eq!(class(&Ok(200)), "ok");
        assert_eq!(class(&Ok(503)), "503");
        assert_eq!(class(&Err("reset".into())), "transport");
    }

    #[test]
    fn only_the_faults_classes_inside_its_span_are_expected() {
        let faults = [restart(10.0, 12.0)];
        assert!(expected(&faults, Duration::from_secs(11), "503"));
        assert!(expected(&faults, Duration::from_secs(10), "503"));
        assert!(!expected(&faults, Duration::from_secs(9), "503"));
        assert!(!expected(&faults, Duration::from_secs(13), "503"));
        assert!(!expected(&faults, Duration::from_secs(11), "500"));
        assert!(!expected(&faults, Duration::from_secs(11), "transport"));
        assert!(!expected(&[], Duration::from_secs(11), "503"));
    }

    #[test]
    fn answers_are_bucketed_by_their_intended_time() {
        let answers = [
            answer(100, 1, "ok"),
            answer(59_999, 3, "ok"),
            answer(60_000, 2, "503"),
            answer(61_000, 2, "500"),
            answer(130_000, 1, "ok"),
        ];
        let faults = [restart(59.0, 60.5)];
        let rows = timeline(&answers, &faults, Duration::from_secs(60));
        assert_eq!(rows.len(), 3, "the empty minutes are not rows");
        assert_eq!(rows[0].start_s, 0);
        assert_eq!((rows[0].requests, rows[0].ok), (2, 2));
        assert!(rows[0].p99_us >= 2_990 && rows[0].p99_us <= 3_010);
        assert_eq!(rows[1].start_s, 60);
        assert_eq!(rows[1].errors["503"], 1);
        assert_eq!(rows[1].errors["500"], 1);
        assert_eq!(rows[1].unexpected, 1, "the 500 is not the restart's");
        assert_eq!(rows[2].start_s, 120);
        assert_eq!(rows[2].unexpected, 0);
    }

    #[test]
    fn recovery_waits_for_every_target() {
        let answers = [
            to(0, 1_000, 1, "ok"),
            to(0, 5_000, 1, "503"),
            to(1, 5_100, 1, "503"),
            to(0, 6_000, 20, "ok"),
            to(1, 6_500, 1, "503"),
            to(1, 7_000, 5, "ok"),
            to(0, 7_100, 1, "ok"),
        ];
        assert_eq!(
            recovered_at(&answers, Duration::from_millis(4_000)),
            Some(Duration::from_millis(7_005))
        );
        assert_eq!(
            recovered_at(&answers[..5], Duration::from_millis(4_000)),
            None,
            "target 1 never answered again"
        );
        assert_eq!(
            recovered_at(&answers, Duration::from_secs(8)),
            Some(Duration::ZERO)
        );
    }

    #[test]
    fn error_seconds_group_errors_by_second_and_class() {
        let answers = [
            answer(1_000, 1, "ok"),
            answer(5_000, 1, "503"),
            answer(5_900, 1, "503"),
            answer(5_950, 1, "429"),
            answer(9_000, 1, "transport"),
        ];
        assert_eq!(
            error_seconds(&answers),
            vec![
                (5, "429".to_owned(), 1),
                (5, "503".to_owned(), 2),
                (9, "transport".to_owned(), 1)
            ]
        );
    }
}
