//! One task's timeline as its client saw it, and the parts it splits into.
//! Pure: the scenarios note wall-clock times (seconds on the Unix epoch,
//! the clock the task's own script reads as well) and this turns a burst
//! of them into latencies per part and a rate.
//!
//! The points, in order: the client began creating the task; its first
//! status with an owner was written; its script ran (the script prints
//! `time.time()`); its terminal status was written; the client saw that
//! status. Where a status store offers no write time (the API server's
//! timestamps are whole seconds), the time a watch delivered it stands in.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::load::Recorder;

/// The script every task runs: it prints its own clock, the one point of
/// the timeline that only the task can see.
pub const SCRIPT: &str = "import time; print(repr(time.time()))";

/// The parts of a timeline, by the name the report gives them.
pub const PARTS: [&str; 4] = ["schedule", "start", "exit", "observe"];

/// What the client knows of one task: Unix seconds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Seen {
    /// The client began creating it (wrote its manifest, sent its create).
    pub created: f64,
    /// Its first status with an owner (`Scheduled` or later) was written.
    pub scheduled: Option<f64>,
    /// Its script ran, by the script's own clock.
    pub user_code: Option<f64>,
    /// Its terminal status was written.
    pub ended_written: Option<f64>,
    /// The client had read its terminal status.
    pub ended_seen: Option<f64>,
    /// How it ended when that was not a success (exit 0): phase and reason.
    pub failure: Option<String>,
}

impl Seen {
    /// A task whose creation began at `created`.
    pub fn created_at(created: f64) -> Self {
        Self {
            created,
            ..Self::default()
        }
    }

    /// Created → terminal status seen, seconds.
    pub fn total(&self) -> Option<f64> {
        Some(self.ended_seen? - self.created)
    }

    /// The parts of [`PARTS`], seconds: schedule (created → owner
    /// written), start (→ the script ran: the assignment, the process and
    /// the interpreter starting), exit (→ terminal status written: the
    /// interpreter ending, the exit reported and written) and observe (→
    /// the client read it). `None` where a point is missing; negative
    /// where two points were seen out of order.
    pub fn parts(&self) -> [Option<f64>; 4] {
        let d = |a: Option<f64>, b: Option<f64>| Some(b? - a?);
        [
            d(Some(self.created), self.scheduled),
            d(self.scheduled, self.user_code),
            d(self.user_code, self.ended_written),
            d(self.ended_written, self.ended_seen),
        ]
    }
}

/// Now, in Unix seconds.
pub fn now() -> f64 {
    unix(SystemTime::now())
}

/// `t` in Unix seconds (0 before the epoch).
pub fn unix(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// The time the script printed: the last line of its output that reads
/// as a Unix time.
pub fn printed_time(stdout: &str) -> Option<f64> {
    stdout
        .lines()
        .rev()
        .find_map(|l| l.trim().parse::<f64>().ok())
        .filter(|t| *t > 1e9)
}

/// A burst's (or a series') figures: every task's total and each part.
pub struct Recorded {
    /// Created → terminal status seen, every task (failures as errors).
    pub total: Recorder,
    /// Each part of [`PARTS`], over the tasks that succeeded and showed
    /// both its points.
    pub parts: [Recorder; 4],
    /// Parts whose points were seen out of order (recorded as 0).
    pub out_of_order: u64,
    /// Tasks that did not succeed.
    pub failed: u64,
    /// First creation → last terminal status seen, seconds.
    pub span: f64,
}

impl Recorded {
    /// Tasks per second over [`Self::span`].
    pub fn per_sec(&self) -> f64 {
        if self.span > 0.0 {
            self.total.len() as f64 / self.span
        } else {
            0.0
        }
    }
}

fn duration(secs: f64) -> Duration {
    Duration::from_secs_f64(secs.max(0.0))
}

/// Records `seen`. A task that never ended counts as failed, with the
/// time until `gave_up` (Unix seconds) as its latency.
pub fn record(seen: &[Seen], gave_up: f64) -> Recorded {
    let mut r = Recorded {
        total: Recorder::new(),
        parts: std::array::from_fn(|_| Recorder::new()),
        out_of_order: 0,
        failed: 0,
        span: 0.0,
    };
    let first = seen.iter().map(|s| s.created).fold(f64::INFINITY, f64::min);
    let mut last = f64::NEG_INFINITY;
    for s in seen {
        let (total, failure) = match (s.total(), &s.failure) {
            (Some(t), None) => (t, None),
            (Some(t), Some(f)) => (t, Some(f.clone())),
            (None, f) => (
                gave_up - s.created,
                Some(f.clone().unwrap_or_else(|| "not ended".into())),
            ),
        };
        last = last.max(s.ended_seen.unwrap_or(gave_up));
        match failure {
            Some(f) => {
                r.failed += 1;
                r.total.record_failure(duration(total), &f);
            }
            None => {
                r.total.record(duration(total), &Ok(200));
                for (rec, part) in r.parts.iter_mut().zip(s.parts()) {
                    if let Some(p) = part {
                        if p < 0.0 {
                            r.out_of_order += 1;
                        }
                        rec.record(duration(p), &Ok(200));
                    }
                }
            }
        }
    }
    if !seen.is_empty() {
        r.span = (last - first).max(0.0);
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(created: f64, points: [f64; 4]) -> Seen {
        Seen {
            created,
            scheduled: Some(points[0]),
            user_code: Some(points[1]),
            ended_written: Some(points[2]),
            ended_seen: Some(points[3]),
            failure: None,
        }
    }

    #[test]
    fn the_parts_add_up_to_the_total() {
        let s = task(100.0, [100.02, 100.05, 100.06, 100.065]);
        let parts: Vec<f64> = s.parts().into_iter().map(Option::unwrap).collect();
        let sum: f64 = parts.iter().sum();
        assert!((sum - s.total().unwrap()).abs() < 1e-9, "{parts:?}");
        assert!((parts[0] - 0.02).abs() < 1e-9);
        assert!((parts[3] - 0.005).abs() < 1e-9);
    }

    #[test]
    fn a_missing_point_leaves_its_two_parts_out() {
        let mut s = task(100.0, [100.02, 100.05, 100.06, 100.065]);
        s.user_code = None;
        let parts = s.parts();
        assert!(parts[0].is_some() && parts[3].is_some());
        assert_eq!((parts[1], parts[2]), (None, None));
        let r = record(&[s], 200.0);
        assert_eq!(r.parts[1].len(), 0);
        assert_eq!(r.parts[0].len(), 1);
        assert_eq!(r.total.len(), 1);
    }

    #[test]
    fn failures_and_tasks_that_never_ended_count_as_failed() {
        let ok = task(100.0, [100.1, 100.2, 100.3, 100.4]);
        let mut failed = task(100.0, [100.1, 100.2, 100.3, 100.5]);
        failed.failure = Some("Failed/NonZeroExit".into());
        let lost = Seen::created_at(100.5);
        let r = record(&[ok, failed, lost], 110.0);
        assert_eq!(r.failed, 2);
        let s = r.total.summary(Duration::from_secs(1));
        assert_eq!(s.ok, 1);
        assert_eq!(s.errors["Failed/NonZeroExit"], 1);
        assert_eq!(s.errors["not ended"], 1);
        // The task that never ended waited until the burst gave up.
        assert!(s.max_us >= 9_400_000 && s.max_us <= 9_600_000, "{s:?}");
        // Only the success has parts.
        assert_eq!(r.parts[0].len(), 1);
        assert!((r.span - 10.0).abs() < 1e-9);
    }

    #[test]
    fn points_seen_out_of_order_count_and_record_as_zero() {
        // The owner was first seen after the script ran (a status file
        // read once for two writes).
        let s = task(100.0, [100.06, 100.05, 100.07, 100.08]);
        let r = record(&[s], 200.0);
        assert_eq!(r.out_of_order, 1);
        assert_eq!(r.parts[1].summary(Duration::from_secs(1)).max_us, 1);
    }

    #[test]
    fn the_rate_is_tasks_over_first_creation_to_last_seen() {
        let seen: Vec<Seen> = (0..10)
            .map(|i| {
                let c = 100.0 + f64::from(i) * 0.01;
                task(c, [c + 0.1, c + 0.2, c + 0.3, c + 0.4])
            })
            .collect();
        let r = record(&seen, 200.0);
        // 100.0 → 100.49 + 0.4 … the last one seen at 100.49.
        assert!((r.span - 0.49).abs() < 1e-9, "{}", r.span);
        assert!((r.per_sec() - 10.0 / 0.49).abs() < 1e-6);
    }

    #[test]
    fn the_printed_time_is_the_last_line_that_reads_as_one() {
        assert_eq!(printed_time("1765100000.25\n"), Some(1_765_100_000.25));
        assert_eq!(
            printed_time("hello\n1765100000.5\nbye\n"),
            Some(1_765_100_000.5)
        );
        assert_eq!(printed_time("1\n"), None, "not a Unix time");
        assert_eq!(printed_time(""), None);
    }
}
