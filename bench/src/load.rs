//! Load models and latency summaries.
//!
//! - **Sequential**: one request at a time (the "warm invoke" model).
//! - **Open loop**: requests are *scheduled* at a constant rate and each
//!   latency counts from its intended send time, so a stall is charged to
//!   every request it delayed (coordinated-omission correction).
//! - **Closed loop**: K workers send back to back, for maximum throughput.
//!
//! Latencies go into HDR histograms (microseconds, 3 significant digits).
//! Each summary carries a 95 % confidence interval of its p99
//! ([`quantile_ci95_ranks`]): a p99 of a few thousand requests is a few
//! dozen of the slowest, so its run-to-run spread is wide, and two paths'
//! p99s whose intervals overlap are not told apart by the run.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde::Serialize;

/// What one request produced: an HTTP status, or a transport error.
pub type Outcome = Result<u16, String>;

/// Latencies and errors of one measured run.
pub struct Recorder {
    hist: Histogram<u64>,
    errors: BTreeMap<String, u64>,
    ok: u64,
}

impl Default for Recorder {
    fn default() -> Self {
        Self::new()
    }
}

impl Recorder {
    /// An empty recorder (1 µs .. 120 s).
    // Constant bounds that hdrhistogram always accepts: the expect is
    // unreachable.
    #[allow(clippy::expect_used)]
    pub fn new() -> Self {
        Self {
            // low ≥ 1, high ≥ 2 × low, 3 significant figures.
            hist: Histogram::new_with_bounds(1, 120_000_000, 3).expect("valid histogram bounds"),
            errors: BTreeMap::new(),
            ok: 0,
        }
    }

    /// Records one request.
    pub fn record(&mut self, latency: Duration, outcome: &Outcome) {
        let us = (latency.as_micros() as u64).clamp(1, 120_000_000);
        let _ = self.hist.record(us);
        match outcome {
            Ok(200) => self.ok += 1,
            Ok(code) => *self.errors.entry(code.to_string()).or_default() += 1,
            Err(e) => *self.errors.entry(format!("transport: {e}")).or_default() += 1,
        }
    }

    /// Records one failure that is no HTTP answer (a task that ended
    /// `Failed`, say), under `what` as it is.
    pub fn record_failure(&mut self, latency: Duration, what: &str) {
        let us = (latency.as_micros() as u64).clamp(1, 120_000_000);
        let _ = self.hist.record(us);
        *self.errors.entry(what.to_owned()).or_default() += 1;
    }

    /// Requests recorded.
    pub fn len(&self) -> u64 {
        self.hist.len()
    }

    /// Whether none was recorded.
    pub fn is_empty(&self) -> bool {
        self.hist.is_empty()
    }

    /// Merges another recorder (repetitions).
    pub fn merge(&mut self, other: &Recorder) {
        let _ = self.hist.add(&other.hist);
        self.ok += other.ok;
        for (k, v) in &other.errors {
            *self.errors.entry(k.clone()).or_default() += v;
        }
    }

    /// Summary over `elapsed` wall time.
    pub fn summary(&self, elapsed: Duration) -> Summary {
        let h = &self.hist;
        let n = h.len();
        Summary {
            count: n,
            ok: self.ok,
            errors: self.errors.clone(),
            p50_us: h.value_at_quantile(0.50),
            p90_us: h.value_at_quantile(0.90),
            p99_us: h.value_at_quantile(0.99),
            p999_us: h.value_at_quantile(0.999),
            p99_ci95_us: quantile_ci95_ranks(n, 0.99).map_or([0, 0], |(lo, hi)| {
                // The value at rank r is the one `r / n` of the samples
                // are at or below.
                let at = |rank: u64| h.value_at_quantile(rank as f64 / n as f64);
                [at(lo), at(hi)]
            }),
            max_us: h.max(),
            mean_us: h.mean(),
            achieved_rps: if elapsed.is_zero() {
                0.0
            } else {
                n as f64 / elapsed.as_secs_f64()
            },
        }
    }
}

/// Figures of one scenario.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// Requests measured.
    pub count: u64,
    /// 200 answers.
    pub ok: u64,
    /// Non-200 answers by status, and transport errors.
    pub errors: BTreeMap<String, u64>,
    /// Median, µs.
    pub p50_us: u64,
    /// 90th percentile, µs.
    pub p90_us: u64,
    /// 99th percentile, µs.
    pub p99_us: u64,
    /// 99.9th percentile, µs.
    pub p999_us: u64,
    /// The range the p99 lies in with 95 % confidence, µs: the latencies at
    /// the ranks [`quantile_ci95_ranks`] gives (`[0, 0]` with no requests).
    pub p99_ci95_us: [u64; 2],
    /// Maximum, µs.
    pub max_us: u64,
    /// Mean, µs.
    pub mean_us: f64,
    /// Requests per second achieved.
    pub achieved_rps: f64,
}

/// The ranks (1-based, in ascending order) between which the `q` quantile
/// of `n` independent samples lies with 95 % confidence, whatever their
/// distribution: the rank of the sample at the quantile is binomial
/// (`n`, `q`), here by its normal approximation, `n·q ± 1.96·√(n·q·(1−q))`,
/// widened to whole ranks and clamped to `1..=n`. `None` without samples.
/// For the p99 of 4,000 requests: the 54th to the 28th slowest. Requests
/// of one open loop are not quite independent (a busy stretch of the
/// machine slows its neighbours together), so this is the narrowest the
/// interval can be, not a bound on the run-to-run spread. Pure.
pub fn quantile_ci95_ranks(n: u64, q: f64) -> Option<(u64, u64)> {
    if n == 0 || !(0.0..=1.0).contains(&q) {
        return None;
    }
    let nf = n as f64;
    let half = 1.96 * (nf * q * (1.0 - q)).sqrt();
    let lo = (nf * q - half).floor().clamp(1.0, nf) as u64;
    let hi = (nf * q + half).ceil().clamp(1.0, nf) as u64;
    Some((lo, hi))
}

/// Intended send time of request `i` at `rate` per second. Pure.
pub fn intended_offset(i: u64, rate: f64) -> Duration {
    Duration::from_secs_f64(i as f64 / rate.max(f64::MIN_POSITIVE))
}

/// How `total` requests split over `rounds` rounds: as even as can be, the
/// first rounds taking the remainder, none empty (fewer rounds when
/// `total < rounds`). Pure.
pub fn split(total: u64, rounds: u64) -> Vec<u64> {
    let rounds = rounds.clamp(1, total.max(1));
    let (each, extra) = (total / rounds, total % rounds);
    (0..rounds).map(|r| each + u64::from(r < extra)).collect()
}

/// The order `paths` paths take in round `round`: rotated by one each
/// round, so over as many rounds as paths every path runs once in every
/// position and after every neighbour's load, and drift on the machine
/// during a scenario is shared between the paths. Pure.
pub fn rotation(paths: usize, round: usize) -> impl Iterator<Item = usize> {
    (0..paths).map(move |i| (i + round) % paths)
}

/// Sequential: `warmup` unrecorded requests, then `n` recorded ones.
pub async fn sequential<F, Fut>(
    warmup: u64,
    n: u64,
    mut call: F,
    tick: impl Fn(),
) -> (Recorder, Duration)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Outcome>,
{
    for _ in 0..warmup {
        let _ = call().await;
    }
    let mut rec = Recorder::new();
    let start = Instant::now();
    for _ in 0..n {
        let t0 = Instant::now();
        let out = call().await;
        rec.record(t0.elapsed(), &out);
        tick();
    }
    (rec, start.elapsed())
}

/// The error of a request the open loop did not send: too many were
/// outstanding.
pub const DROPPED: &str = "dropped (too many outstanding)";

/// Open loop at `rate` for `n` requests, at most `max_outstanding` in flight
/// (requests beyond that are recorded as `dropped`). A dedicated thread keeps
/// the schedule with `std::thread::sleep` (tens of microseconds of jitter on
/// Linux, where tokio's timer wheel has millisecond granularity), so the
/// latency charged from the intended send time is not the client's timer.
/// `done` sees every request scheduled: its intended send time, its latency
/// and its outcome (for one dropped, the time until it was dropped and the
/// `dropped` error it is recorded with).
pub async fn open_loop<F, Fut>(
    rate: f64,
    n: u64,
    max_outstanding: usize,
    call: F,
    done: impl Fn(Instant, Duration, &Outcome) + Send + Sync + 'static,
) -> (Recorder, Duration)
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Outcome> + Send + 'static,
{
    let rec = Arc::new(Mutex::new(Recorder::new()));
    let limit = Arc::new(tokio::sync::Semaphore::new(max_outstanding.max(1)));
    let call = Arc::new(call);
    let done = Arc::new(done);
    let start = Instant::now();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Instant>();
    let pacer = std::thread::spawn(move || {
        for i in 0..n {
            let intended = start + intended_offset(i, rate);
            let now = Instant::now();
            if intended > now {
                std::thread::sleep(intended - now);
            }
            if tx.send(intended).is_err() {
                return;
            }
        }
    });
    let mut tasks = Vec::with_capacity(n as usize);
    while let Some(intended) = rx.recv().await {
        let Ok(permit) = limit.clone().try_acquire_owned() else {
            let (latency, out) = (intended.elapsed(), Err(DROPPED.into()));
            rec.lock()
                .unwrap_or_else(|p| p.into_inner())
                .record(latency, &out);
            done(intended, latency, &out);
            continue;
        };
        let (rec, call, done) = (rec.clone(), call.clone(), done.clone());
        tasks.push(tokio::spawn(async move {
            let out = call().await;
            let latency = intended.elapsed();
            rec.lock()
                .unwrap_or_else(|p| p.into_inner())
                .record(latency, &out);
            done(intended, latency, &out);
            drop(permit);
        }));
    }
    let _ = pacer.join();
    for t in tasks {
        let _ = t.await;
    }
    let elapsed = start.elapsed();
    let rec = Arc::try_unwrap(rec)
        .map(|m| m.into_inner().unwrap_or_else(|p| p.into_inner()))
        .unwrap_or_default();
    (rec, elapsed)
}

/// Closed loop: `workers` send back to back for `duration`; worker `i`
/// calls `call(i)` (its own connection, say).
pub async fn closed_loop<F, Fut>(
    workers: usize,
    duration: Duration,
    call: F,
) -> (Recorder, Duration)
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Outcome> + Send + 'static,
{
    let call = Arc::new(call);
    let start = Instant::now();
    let deadline = start + duration;
    let mut tasks = Vec::new();
    for i in 0..workers.max(1) {
        let call = call.clone();
        tasks.push(tokio::spawn(async move {
            let mut rec = Recorder::new();
            while Instant::now() < deadline {
                let t0 = Instant::now();
                let out = call(i).await;
                rec.record(t0.elapsed(), &out);
            }
            rec
        }));
    }
    let mut all = Recorder::new();
    for t in tasks {
        if let Ok(r) = t.await {
            all.merge(&r);
        }
    }
    (all, start.elapsed())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_split_evenly_over_rounds_and_none_is_lost() {
        assert_eq!(split(4000, 4), vec![1000; 4]);
        assert_eq!(split(10, 4), vec![3, 3, 2, 2]);
        assert_eq!(split(600, 1), vec![600]);
        // Fewer requests than rounds: one per round, no empty round.
        assert_eq!(split(2, 4), vec![1, 1]);
        // Zero rounds is one round; zero requests one empty round.
        assert_eq!(split(7, 0), vec![7]);
        assert_eq!(split(0, 3), vec![0]);
        for (total, rounds) in [(1, 1), (999, 7), (4001, 4), (5, 5)] {
            let parts = split(total, rounds);
            assert_eq!(parts.iter().sum::<u64>(), total);
            let (lo, hi) = (parts.iter().min(), parts.iter().max());
            assert!(hi.zip(lo).is_some_and(|(h, l)| h - l <= 1), "{parts:?}");
        }
    }

    #[test]
    fn rotation_puts_every_path_in_every_position_once() {
        assert_eq!(rotation(3, 0).collect::<Vec<_>>(), [0, 1, 2]);
        assert_eq!(rotation(3, 1).collect::<Vec<_>>(), [1, 2, 0]);
        assert_eq!(rotation(3, 5).collect::<Vec<_>>(), [2, 0, 1]);
        assert_eq!(rotation(0, 2).count(), 0);
        let n = 5;
        for position in 0..n {
            let mut seen: Vec<usize> = (0..n)
                .map(|round| rotation(n, round).nth(position).unwrap_or(usize::MAX))
                .collect();
            seen.sort_unstable();
            assert_eq!(seen, (0..n).collect::<Vec<_>>(), "position {position}");
        }
    }

    #[test]
    fn quantile_interval_ranks_follow_the_binomial() {
        // 3960 ± 1.96·√39.6 = 3960 ± 12.3.
        assert_eq!(quantile_ci95_ranks(4000, 0.99), Some((3947, 3973)));
        // 9900 ± 1.96·√99 = 9900 ± 19.5.
        assert_eq!(quantile_ci95_ranks(10_000, 0.99), Some((9880, 9920)));
        // 50 ± 1.96·√25 = 50 ± 9.8.
        assert_eq!(quantile_ci95_ranks(100, 0.5), Some((40, 60)));
        // Too few samples to bound a p99 from above: up to the slowest.
        assert_eq!(quantile_ci95_ranks(100, 0.99), Some((97, 100)));
        assert_eq!(quantile_ci95_ranks(1, 0.99), Some((1, 1)));
        assert_eq!(quantile_ci95_ranks(0, 0.99), None);
        assert_eq!(quantile_ci95_ranks(10, 1.5), None);
        assert_eq!(quantile_ci95_ranks(10, f64::NAN), None);
        // More samples, a narrower interval relative to n.
        let width = |n: u64| {
            let (lo, hi) = quantile_ci95_ranks(n, 0.99).unwrap_or((0, n));
            (hi - lo) as f64 / n as f64
        };
        assert!(width(40_000) < width(10_000) && width(10_000) < width(4_000));
    }

    /// Draws from a heavy-tailed distribution with a known p99 land inside
    /// the interval in about 95 % of runs.
    #[test]
    fn the_p99_interval_covers_the_true_p99() {
        // Pareto (scale 100 µs, shape 2): p99 = 100 / √0.01 = 1,000 µs.
        let true_p99 = 1000.0;
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let mut uniform = move || {
            // xorshift64*: deterministic, so the count below is too.
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            ((state.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 + 0.5) / (1u64 << 53) as f64
        };
        let trials = 200;
        let mut covered = 0;
        for _ in 0..trials {
            let mut r = Recorder::new();
            for _ in 0..4000 {
                let us = 100.0 / uniform().sqrt();
                r.record(Duration::from_secs_f64(us / 1e6), &Ok(200));
            }
            let [lo, hi] = r.summary(Duration::from_secs(1)).p99_ci95_us;
            // The histogram keeps 3 significant digits.
            if lo as f64 <= true_p99 * 1.001 && true_p99 * 0.999 <= hi as f64 {
                covered += 1;
            }
        }
        assert!(
            (180..=199).contains(&covered),
            "covered {covered} of {trials}"
        );
    }

    #[test]
    fn intended_times_are_evenly_spaced() {
        assert_eq!(intended_offset(0, 100.0), Duration::ZERO);
        assert_eq!(intended_offset(100, 100.0), Duration::from_secs(1));
        assert_eq!(intended_offset(5, 1000.0), Duration::from_millis(5));
    }

    #[test]
    fn summary_reports_percentiles_and_errors() {
        let mut r = Recorder::new();
        for ms in 1..=100u64 {
            r.record(Duration::from_millis(ms), &Ok(200));
        }
        r.record(Duration::from_millis(1), &Ok(503));
        r.record(Duration::from_millis(1), &Err("refused".into()));
        let s = r.summary(Duration::from_secs(1));
        assert_eq!(s.count, 102);
        assert_eq!(s.ok, 100);
        assert_eq!(s.errors.get("503"), Some(&1));
        assert!((49_000..=51_100).contains(&s.p50_us), "{}", s.p50_us);
        assert!(s.p99_us >= 98_000);
        // 102 samples (the two errors are 1-ms latencies too): ranks 99 to
        // 102 of 102 → 97 to 100 ms.
        let [lo, hi] = s.p99_ci95_us;
        assert!(lo <= s.p99_us && s.p99_us <= hi, "{lo} {hi}");
        assert!((97_000..=98_100).contains(&lo) && (99_900..=100_100).contains(&hi));
        assert_eq!(s.achieved_rps, 102.0);
    }

    #[tokio::test]
    async fn open_loop_charges_stalls_to_every_delayed_request() {
        // The "server" stalls 300 ms once; with a 10 ms schedule every later
        // request queues behind the stall and must show the wait, not just
        // its own service time (coordinated omission).
        let first = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let gate = Arc::new(tokio::sync::Mutex::new(()));
        let (rec, _) = open_loop(
            100.0,
            20,
            100,
            move || {
                let first = first.clone();
                let gate = gate.clone();
                async move {
                    let _g = gate.lock().await;
                    if first.swap(false, std::sync::atomic::Ordering::SeqCst) {
                        tokio::time::sleep(Duration::from_millis(300)).await;
                    }
                    Ok(200)
                }
            },
            |_, _, _| {},
        )
        .await;
        let s = rec.summary(Duration::from_secs(1));
        assert_eq!(s.count, 20);
        assert!(
            s.p50_us >= 100_000,
            "queued requests carry the stall: p50 {}",
            s.p50_us
        );
    }

    #[tokio::test]
    async fn every_scheduled_request_reaches_the_hook_dropped_ones_too() {
        // One outstanding at most, and the first call holds it for 200 ms:
        // the requests scheduled meanwhile (every 10 ms) are dropped.
        let seen = Arc::new(Mutex::new(Vec::new()));
        let hook = seen.clone();
        let (rec, _) = open_loop(
            100.0,
            10,
            1,
            || async {
                tokio::time::sleep(Duration::from_millis(200)).await;
                Ok(200)
            },
            move |_, _, out| hook.lock().unwrap().push(out.clone()),
        )
        .await;
        let seen = seen.lock().unwrap();
        let s = rec.summary(Duration::from_secs(1));
        assert_eq!(
            seen.len() as u64,
            s.count,
            "one hook call per recorded request"
        );
        let dropped = seen.iter().filter(|o| **o == Err(DROPPED.into())).count();
        assert!(dropped >= 1, "{seen:?}");
        assert_eq!(
            s.errors.get(&format!("transport: {DROPPED}")).copied(),
            Some(dropped as u64)
        );
    }
}
