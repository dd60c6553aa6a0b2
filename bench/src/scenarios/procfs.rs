//! CPU time and memory of processes from `/proc`, for the cost and table
//! figures.

use std::time::Duration;

use nix::time::{ClockId, clock_getcpuclockid};
use nix::unistd::Pid;

/// CPU time (user + system), current RSS and peak RSS (KiB) of a process.
///
/// The CPU time is the process's CPU-time clock (`clock_getcpuclockid`): the
/// scheduler's runtime of all its threads, exited ones included, in
/// nanoseconds. `/proc/PID/stat`'s `utime + stime` is the same sum cut to
/// clock ticks (10 ms), a few percent of what a proxy spends on 1,000
/// requests; it is the fallback where the clock cannot be read.
pub(super) fn proc_usage(pid: u32) -> Option<(Duration, u64, u64)> {
    let cpu = cpu_time(pid)?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb = |key: &str| {
        status
            .lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    Some((cpu, kb("VmRSS:"), kb("VmHWM:")))
}

/// The CPU time (user + system) of a process: its CPU-time clock, or
/// `/proc/PID/stat`'s ticks where the clock cannot be read.
fn cpu_time(pid: u32) -> Option<Duration> {
    cpu_clock(pid).or_else(|| stat_cpu(pid))
}

/// The CPU time of a process from its CPU-time clock.
fn cpu_clock(pid: u32) -> Option<Duration> {
    let clock: ClockId = clock_getcpuclockid(Pid::from_raw(i32::try_from(pid).ok()?)).ok()?;
    Some(Duration::from(clock.now().ok()?))
}

/// The CPU time of a process from `/proc/PID/stat`, in clock ticks.
fn stat_cpu(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .unwrap_or(100) as u64;
    Some(Duration::from_millis(ticks * 1000 / hz.max(1)))
}

/// CPU time of a process and its direct children (nginx's workers).
pub(super) fn tree_cpu(pid: u32) -> Option<Duration> {
    let mut total = cpu_time(pid)?;
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(child) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{child}/stat")) else {
            continue;
        };
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(pid)
            && let Some(cpu) = cpu_time(child)
        {
            total += cpu;
        }
    }
    Some(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_process_has_memory_and_cpu() {
        let (_, rss, peak) = proc_usage(std::process::id()).expect("own /proc entry");
        assert!(rss > 0 && peak >= rss, "rss {rss} KiB, peak {peak} KiB");
        assert!(tree_cpu(std::process::id()).is_some());
    }

    #[test]
    fn the_cpu_clock_counts_finer_than_ticks_and_agrees_with_them() {
        let pid = std::process::id();
        // Burn a little CPU so both readings have something to count.
        let start = std::time::Instant::now();
        let mut x = 0u64;
        while start.elapsed() < Duration::from_millis(60) {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
        }
        let ticks = stat_cpu(pid).expect("own /proc/PID/stat");
        let clock = cpu_clock(pid).expect("own CPU-time clock");
        // Read after the ticks: the clock is at least as far, and the tick
        // count is the same sum cut to 10 ms (the test harness's other
        // threads may add a little between the two reads).
        assert!(
            clock + Duration::from_millis(20) >= ticks,
            "clock {clock:?}, ticks {ticks:?}"
        );
        assert!(
            clock <= ticks + Duration::from_millis(100),
            "clock {clock:?}, ticks {ticks:?}"
        );
        assert!(
            !clock.subsec_nanos().is_multiple_of(10_000_000),
            "{clock:?}"
        );
    }
}
