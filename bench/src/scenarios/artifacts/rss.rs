//! The resident memory of a few processes, sampled every
//! [`PERIOD`] on a thread of its own (so a busy runtime does not delay a
//! sample) while a transfer streams: the reading before, the largest seen,
//! and how many samples were taken.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use super::super::procfs::proc_usage;

/// Time between two samples.
pub(super) const PERIOD: Duration = Duration::from_millis(50);

/// One process's memory over a sampled stretch, KiB.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Peak {
    /// `VmRSS` when sampling began.
    pub base_kib: u64,
    /// The largest `VmRSS` sampled (the first and last reading included).
    pub max_kib: u64,
    /// Samples taken.
    pub samples: u64,
    /// `VmHWM` (the largest RSS the process ever had) when sampling
    /// began, and when it ended: a peak between two samples that passed
    /// the earlier one shows here.
    pub hwm_kib: [u64; 2],
}

impl Peak {
    /// How far it grew over its first reading, MiB (never below 0).
    pub fn growth_mib(&self) -> f64 {
        self.max_kib.saturating_sub(self.base_kib) as f64 / 1024.0
    }

    /// How far its all-time peak rose while sampled, MiB.
    pub fn hwm_growth_mib(&self) -> f64 {
        self.hwm_kib[1].saturating_sub(self.hwm_kib[0]) as f64 / 1024.0
    }
}

/// Samples `VmRSS` of some processes until [`Sampler::finish`].
pub(super) struct Sampler {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Vec<Peak>>>,
}

/// `VmRSS` of `pid`, KiB (0 once it is gone).
fn rss_kib(pid: u32) -> u64 {
    proc_usage(pid).map_or(0, |(_, rss, _)| rss)
}

/// `VmHWM` of `pid`, KiB (0 once it is gone).
fn hwm_kib(pid: u32) -> u64 {
    proc_usage(pid).map_or(0, |(_, _, hwm)| hwm)
}

impl Sampler {
    /// Reads each of `pids` now, then every [`PERIOD`].
    pub fn start(pids: &[u32]) -> anyhow::Result<Self> {
        let pids = pids.to_vec();
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::Builder::new()
            .name("rss-sampler".into())
            .spawn(move || {
                let mut peaks: Vec<Peak> = pids
                    .iter()
                    .map(|&p| {
                        let kib = rss_kib(p);
                        let hwm = hwm_kib(p);
                        Peak {
                            base_kib: kib,
                            max_kib: kib,
                            samples: 1,
                            hwm_kib: [hwm, hwm],
                        }
                    })
                    .collect();
                loop {
                    // Read once more after the stop: the last stretch counts.
                    let last = stopped.load(Ordering::Acquire);
                    for (peak, &pid) in peaks.iter_mut().zip(&pids) {
                        peak.max_kib = peak.max_kib.max(rss_kib(pid));
                        peak.samples += 1;
                    }
                    if last {
                        for (peak, &pid) in peaks.iter_mut().zip(&pids) {
                            peak.hwm_kib[1] = hwm_kib(pid);
                        }
                        return peaks;
                    }
                    std::thread::sleep(PERIOD);
                }
            })?;
        Ok(Self {
            stop,
            thread: Some(thread),
        })
    }

    /// Stops sampling: each process's [`Peak`], in the order given.
    pub fn finish(mut self) -> Vec<Peak> {
        self.stop.store(true, Ordering::Release);
        self.thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default()
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_growing_process_is_seen_growing() {
        let sampler = Sampler::start(&[std::process::id()]).expect("sampler");
        // 64 MiB touched page by page: resident until dropped.
        let big = vec![1u8; 64 << 20];
        std::thread::sleep(PERIOD * 3);
        let peaks = sampler.finish();
        assert_eq!(std::hint::black_box(&big).len(), 64 << 20);
        let [peak] = peaks.as_slice() else {
            panic!("one process sampled: {peaks:?}");
        };
        assert!(peak.samples >= 3, "{peak:?}");
        // Other tests' threads allocate and free meanwhile: most of it.
        assert!(peak.growth_mib() >= 48.0, "{peak:?}");
        // The kernel raises VmHWM lazily (it is the larger of a mark kept at
        // some events and the RSS when read), so it may trail a sampled RSS
        // by what was freed since: it holds the growth, not every sample.
        assert!(peak.hwm_kib[1] >= peak.base_kib + (48 << 10), "{peak:?}");
    }
}
