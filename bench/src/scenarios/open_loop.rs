//! The open-loop comparison at a fixed rate (coordinated-omission
//! corrected) over the direct path, the gateway and each baseline, with the
//! CPU and memory each proxy spent on it.
//!
//! The paths take turns: each path's requests are split into rounds of
//! about one second at the rate ([`rounds`]), and every round runs every
//! path once, in an order rotated from round to round ([`load::rotation`]).
//! A path's figures are its rounds merged, so a quiet or a busy stretch on
//! the machine falls on every path instead of on whichever ran then. The
//! turns are short because this machine's busy stretches are: seconds to
//! tens of seconds, in which ~1 % of every path's requests take over a
//! millisecond, which is where a p99 falls. That p99 is the N/100-th
//! slowest of a path's N requests (10,000 in a full run, `--open-requests`),
//! so the report gives each its 95 % interval too.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;

use super::MAX_OUTSTANDING;
use super::context::Ctx;
use super::local::Local;
use super::procfs::{proc_usage, tree_cpu};
use super::proxies::Proxy;
use crate::Sizes;
use crate::load::{self, Recorder};
use crate::paths::HttpTarget;

/// How long one path's turn lasts, at most.
const TURN: Duration = Duration::from_secs(1);

/// Rounds `requests` at `rate` per second are split into: turns of at most
/// [`TURN`], at least one round, at most one request per round. Pure.
fn rounds(requests: u64, rate: f64) -> u64 {
    let per_turn = (rate * TURN.as_secs_f64()).floor();
    if per_turn.is_nan() || per_turn < 1.0 {
        // Under one request per turn (or no usable rate): one per round.
        return requests.max(1);
    }
    requests.div_ceil(per_turn as u64).max(1)
}

/// One path of the comparison and what its rounds added up to.
struct Path {
    name: String,
    target: HttpTarget,
    /// Whose CPU the path is charged: the gateway process alone, or a
    /// baseline's process tree (nginx's workers); none for the direct path.
    cpu: Cpu,
    rec: Recorder,
    elapsed: Duration,
    /// CPU spent during the path's rounds; `None` once a reading failed.
    spent: Option<Duration>,
}

#[derive(Clone, Copy)]
enum Cpu {
    None,
    Process(u32),
    Tree(u32),
}

impl Cpu {
    fn read(self) -> Option<Duration> {
        match self {
            Cpu::None => None,
            Cpu::Process(pid) => proc_usage(pid).map(|u| u.0),
            Cpu::Tree(pid) => tree_cpu(pid),
        }
    }
}

/// Records `open-direct`, `open-gateway` and `open-<proxy>`, and the figures
/// `gateway_cpu_ms_per_10k`, `gateway_peak_rss_mb` and
/// `<proxy>_cpu_ms_per_10k`.
pub(super) async fn run(ctx: &mut Ctx, local: &Local, proxies: &[Proxy], sizes: &Sizes) {
    let path = |name: String, target: &HttpTarget, cpu| Path {
        name,
        target: target.clone(),
        cpu,
        rec: Recorder::new(),
        elapsed: Duration::ZERO,
        spent: Some(Duration::ZERO),
    };
    let mut paths = vec![
        path("open-direct".into(), &local.direct, Cpu::None),
        // The gateway alone: the stack's other processes are its children.
        path(
            "open-gateway".into(),
            &local.gateway,
            Cpu::Process(local.gateway_pid),
        ),
    ];
    for p in proxies {
        paths.push(path(
            format!("open-{}", p.name),
            &p.target,
            Cpu::Tree(p.baseline.pid()),
        ));
    }
    for (round, n) in load::split(sizes.open_requests, rounds(sizes.open_requests, sizes.rate))
        .into_iter()
        .enumerate()
    {
        for i in load::rotation(paths.len(), round) {
            let p = &mut paths[i];
            ctx.bar
                .set_message(format!("{} (round {})", p.name, round + 1));
            let before = p.cpu.read();
            let (rec, el, sent) = open_loop(ctx, p.target.clone(), sizes.rate, n).await;
            if let Err(e) = trace(ctx, &p.name, &sent) {
                ctx.skip("trace", format!("writing --trace: {e}"));
                ctx.trace = None;
            }
            p.spent = p
                .spent
                .zip(before.zip(p.cpu.read()))
                .map(|(sum, (b, a))| sum + a.saturating_sub(b));
            p.rec.merge(&rec);
            p.elapsed += el;
        }
    }
    let per_10k =
        |cpu: Duration| cpu.as_secs_f64() * 1000.0 * 10_000.0 / sizes.open_requests as f64;
    for p in &paths {
        if let Some(spent) = p.spent.filter(|_| !matches!(p.cpu, Cpu::None)) {
            let key = format!("{}_cpu_ms_per_10k", p.name.trim_start_matches("open-"));
            ctx.figure(&key, round1(per_10k(spent)));
        }
        ctx.put(&p.name, &p.rec, p.elapsed);
    }
    if let Some(u) = proc_usage(local.gateway_pid) {
        ctx.figure("gateway_peak_rss_mb", round1(u.2 as f64 / 1024.0));
    }
}

/// One request as `--trace` writes it: intended send time, latency,
/// status (none: no answer).
type Sent = (Instant, Duration, Option<u16>);

/// `n` requests to `target` at `rate` per second, and each request's
/// [`Sent`] when `--trace` asks for them.
async fn open_loop(
    ctx: &Ctx,
    target: HttpTarget,
    rate: f64,
    n: u64,
) -> (load::Recorder, Duration, Vec<Sent>) {
    let target = Arc::new(target);
    let tick = ctx.tick();
    let sent = Arc::new(Mutex::new(Vec::new()));
    let keep = ctx.trace.is_some().then(|| sent.clone());
    let (rec, elapsed) = load::open_loop(
        rate,
        n,
        MAX_OUTSTANDING,
        move || {
            let t = target.clone();
            async move { t.call().await }
        },
        move |at, latency, out| {
            tick();
            if let Some(keep) = &keep {
                let status = out.as_ref().ok().copied();
                keep.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push((at, latency, status));
            }
        },
    )
    .await;
    let sent = std::mem::take(&mut *sent.lock().unwrap_or_else(|p| p.into_inner()));
    (rec, elapsed, sent)
}

/// Appends one round of `path`'s requests to `--trace`'s file, if any.
fn trace(ctx: &mut Ctx, path: &str, sent: &[Sent]) -> std::io::Result<()> {
    let Some(out) = ctx.trace.as_mut() else {
        return Ok(());
    };
    // `Instant` reads CLOCK_MONOTONIC on Linux but does not show it: the
    // two are read together once, and every send time placed from there.
    let now = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)?;
    let (now_at, now_secs) = (Instant::now(), Duration::from(now).as_secs_f64());
    for (at, latency, status) in sent {
        let secs = now_secs - now_at.saturating_duration_since(*at).as_secs_f64();
        let micros = latency.as_micros();
        match status {
            Some(s) => writeln!(out, "{path}\t{secs:.6}\t{micros}\t{s}")?,
            None => writeln!(out, "{path}\t{secs:.6}\t{micros}\terror")?,
        }
    }
    out.flush()
}

/// A figure rounded to one decimal.
fn round1(v: f64) -> serde_json::Value {
    json!((v * 10.0).round() / 10.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_turn_is_at_most_a_second_of_the_rate() {
        // The full run: 10,000 at 200/s, 50 turns of 200.
        assert_eq!(rounds(10_000, 200.0), 50);
        assert_eq!(rounds(4000, 200.0), 20);
        // --quick: 600 at 200/s.
        assert_eq!(rounds(600, 200.0), 3);
        // A remainder is a round of its own, never a longer turn.
        assert_eq!(rounds(4001, 200.0), 21);
        assert_eq!(rounds(10, 200.0), 1);
        assert_eq!(rounds(0, 200.0), 1);
        // A fractional rate rounds the turn down.
        assert_eq!(rounds(10, 2.5), 5);
    }

    #[test]
    fn a_rate_under_one_per_second_sends_one_request_per_round() {
        assert_eq!(rounds(7, 0.5), 7);
        assert_eq!(rounds(7, 0.0), 7);
        assert_eq!(rounds(7, f64::NAN), 7);
        assert_eq!(rounds(0, 0.0), 1);
    }
}
