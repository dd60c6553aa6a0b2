//! CPU time and memory of processes from `/proc`, for the cost and table
//! figures.

use std::time::Duration;

/// CPU time (user + system), current RSS and peak RSS (KiB) of a process.
pub(super) fn proc_usage(pid: u32) -> Option<(Duration, u64, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .unwrap_or(100) as u64;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb = |key: &str| {
        status
            .lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    Some((
        Duration::from_millis(ticks * 1000 / hz.max(1)),
        kb("VmRSS:"),
        kb("VmHWM:"),
    ))
}

/// CPU time of a process and its direct children (nginx's workers).
pub(super) fn tree_cpu(pid: u32) -> Option<Duration> {
    let mut total = proc_usage(pid)?.0;
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
            && let Some(u) = proc_usage(child)
        {
            total += u.0;
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
}
