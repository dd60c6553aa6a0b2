//! Where a transfer's CPU goes: the CPU-time clocks of the processes on
//! its path — the gateway, runtimed, the Runtime Server, the store
//! (versitygw) and this client — read before and after each transfer and
//! summed by series.

use std::collections::BTreeMap;
use std::time::Duration;

use super::super::procfs::proc_usage;

/// The processes whose CPU is counted, by role.
pub(super) struct Watched(Vec<(&'static str, u32)>);

/// CPU time by role.
pub(super) type Usage = BTreeMap<&'static str, Duration>;

impl Watched {
    /// `roles`: a role and its pid.
    pub fn new(roles: Vec<(&'static str, u32)>) -> Self {
        Self(roles)
    }

    /// The CPU each role has used so far (a process gone counts 0).
    pub fn now(&self) -> Usage {
        let mut u = Usage::new();
        for (role, pid) in &self.0 {
            *u.entry(role).or_default() += proc_usage(*pid).map_or(Duration::ZERO, |(c, _, _)| c);
        }
        u
    }
}

/// Adds what each role used between `before` and `after` to `total`.
pub(super) fn add(total: &mut Usage, before: &Usage, after: &Usage) {
    for (role, a) in after {
        let b = before.get(role).copied().unwrap_or_default();
        *total.entry(role).or_default() += a.saturating_sub(b);
    }
}

/// The pid of the versitygw serving `127.0.0.1:port` (its command line
/// names the address), found in `/proc`.
pub(super) fn versitygw_pid(port: &str) -> Option<u32> {
    let address = format!("127.0.0.1:{port}");
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        let mut args = cmdline.split(|b| *b == 0);
        let exe = args.next()?;
        (exe.ends_with(b"versitygw") && args.any(|a| a == address.as_bytes())).then_some(pid)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_role_used_is_summed_between_readings() {
        let mut total = Usage::new();
        let before = Usage::from([("gateway", Duration::from_millis(10))]);
        let after = Usage::from([
            ("gateway", Duration::from_millis(25)),
            ("client", Duration::from_millis(5)),
        ]);
        add(&mut total, &before, &after);
        add(&mut total, &before, &after);
        assert_eq!(total["gateway"], Duration::from_millis(30));
        assert_eq!(total["client"], Duration::from_millis(10));
    }

    #[test]
    fn this_process_is_watched() {
        let w = Watched::new(vec![("client", std::process::id())]);
        assert!(w.now()["client"] > Duration::ZERO);
        assert_eq!(versitygw_pid("1"), None);
    }
}
