//! Where a burst's CPU goes on `krt up`: each component's CPU time before
//! and after, from `/proc` — the control plane (`krt up` itself), the
//! gateway, the runtimed instances, the Runtime Servers, the tasks'
//! processes (the shims and interpreters the Runtime Servers waited for:
//! their `cutime + cstime`, in clock ticks), the bench's own process (its
//! `runs.json` reader) and the children it waited for (the `python3 -c`
//! baseline), and the whole machine (`/proc/stat`, which counts whatever
//! else runs on it too).

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};

use super::super::procfs::proc_usage;

/// CPU time by component.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Usage(pub BTreeMap<&'static str, Duration>);

/// The component a `processes.json` name belongs to.
pub fn component(name: &str) -> &'static str {
    if name.starts_with("runtime-server") {
        "runtime_server"
    } else if name.starts_with("runtimed") {
        "runtimed"
    } else if name == "gateway" {
        "gateway"
    } else {
        "other_children"
    }
}

/// The waited-for children's CPU (`cutime + cstime`) of `/proc/PID/stat`.
pub fn children_ticks(stat: &str) -> Option<u64> {
    let after = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = after.split_whitespace().collect();
    Some(f.get(13)?.parse::<u64>().ok()? + f.get(14)?.parse::<u64>().ok()?)
}

/// Busy clock ticks of the whole machine (`/proc/stat`'s first line less
/// idle and iowait).
pub fn machine_ticks(stat: &str) -> Option<u64> {
    let f: Vec<u64> = stat
        .lines()
        .next()?
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    let total: u64 = f.iter().take(8).sum();
    Some(total - f.get(3)? - f.get(4)?)
}

fn ticks(n: u64) -> Duration {
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .unwrap_or(100)
        .max(1) as u64;
    Duration::from_millis(n * 1000 / hz)
}

/// The CPU used so far by `up` (the control plane), its `children`
/// (`processes.json`: name → pid), this process and the children it
/// waited for, and the machine.
pub fn sample(up: Option<u32>, children: &BTreeMap<String, u32>) -> Usage {
    let mut u = Usage::default();
    let mut add = |k: &'static str, d: Duration| *u.0.entry(k).or_default() += d;
    if let Some((cpu, _, _)) = up.and_then(proc_usage) {
        add("control_plane", cpu);
    }
    for (name, pid) in children {
        let c = component(name);
        if let Some((cpu, _, _)) = proc_usage(*pid) {
            add(c, cpu);
        }
        if c == "runtime_server"
            && let Some(t) = std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .as_deref()
                .and_then(children_ticks)
        {
            add("task_processes", ticks(t));
        }
    }
    if let Some((cpu, _, _)) = proc_usage(std::process::id()) {
        add("bench_client", cpu);
    }
    if let Some(t) = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .as_deref()
        .and_then(children_ticks)
    {
        add("bench_children", ticks(t));
    }
    if let Some(t) = std::fs::read_to_string("/proc/stat")
        .ok()
        .as_deref()
        .and_then(machine_ticks)
    {
        add("machine", ticks(t));
    }
    u
}

impl Usage {
    /// Milliseconds per task of each component from `before` to `self`, `n`
    /// tasks (a component that started meanwhile counts from 0).
    pub fn per_task_ms(&self, before: &Self, n: usize) -> Value {
        let per: BTreeMap<&str, f64> = self
            .0
            .iter()
            .map(|(k, v)| {
                let was = before.0.get(k).copied().unwrap_or_default();
                (
                    *k,
                    v.saturating_sub(was).as_secs_f64() * 1e3 / n.max(1) as f64,
                )
            })
            .collect();
        json!(per)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_map_to_components() {
        assert_eq!(component("runtime-server-3"), "runtime_server");
        assert_eq!(component("runtimed-12"), "runtimed");
        assert_eq!(component("gateway"), "gateway");
        assert_eq!(component("something"), "other_children");
    }

    #[test]
    fn waited_children_and_machine_ticks_are_read() {
        let stat = "42 (runtime server) S 1 42 42 0 -1 4194560 100 0 0 0 7 3 120 30 20 0 4 0";
        assert_eq!(children_ticks(stat), Some(150));
        let machine = "cpu  100 5 50 1000 20 1 2 3 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n";
        assert_eq!(machine_ticks(machine), Some(161));
    }

    #[test]
    fn usage_per_task_counts_new_components_from_zero() {
        let before = Usage([("runtimed", Duration::from_millis(100))].into());
        let after = Usage(
            [
                ("runtimed", Duration::from_millis(300)),
                ("gateway", Duration::from_millis(50)),
            ]
            .into(),
        );
        let v = after.per_task_ms(&before, 10);
        assert_eq!(v["runtimed"], 20.0);
        assert_eq!(v["gateway"], 5.0);
    }
}
