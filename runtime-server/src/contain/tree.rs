//! A process tree read from `/proc`: each process's parent, whether it is a
//! zombie, and the descendants of one process. The parsing and the walk are
//! pure; [`snapshot`] reads the live table and [`kill_descendants`] kills a
//! tree until nothing of it is left.
//!
//! The shim that calls these is a child subreaper, so every process its
//! child starts — double-forked or `setsid` ones included — stays its
//! descendant: an orphan is re-parented to the shim, not to init.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{Signal, kill};
use nix::sys::wait::{Id, WaitPidFlag, waitid, waitpid};
use nix::unistd::Pid;

/// One line of `/proc/PID/stat`, as far as the tree needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Proc {
    /// Process id.
    pub pid: i32,
    /// Parent process id.
    pub ppid: i32,
    /// Exited, not yet reaped (`Z`) or dead (`X`): nothing to kill.
    pub dead: bool,
    /// When it started, in clock ticks since boot: with the pid, it names
    /// one process even across pid reuse.
    pub start: u64,
}

/// Parses `/proc/PID/stat`. The command name may hold spaces and
/// parentheses, so the fields are read after its *last* `)`.
pub fn parse_stat(text: &str) -> Option<Proc> {
    let (head, rest) = text.rsplit_once(')')?;
    let pid = head.split_once(" (")?.0.trim().parse().ok()?;
    let mut fields = rest.split_whitespace();
    let state = fields.next()?;
    let ppid = fields.next()?.parse().ok()?;
    // Field 22 of the line, the 20th after the name.
    let start = fields.nth(17).and_then(|f| f.parse().ok()).unwrap_or(0);
    Some(Proc {
        pid,
        ppid,
        dead: state == "Z" || state == "X",
        start,
    })
}

/// What a process has used, from `/proc/PID/stat`: CPU in clock ticks
/// (its own, and that of the children it reaped) and resident pages.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// User and system CPU of the process itself, ticks.
    pub cpu: u64,
    /// User and system CPU of its reaped children, ticks.
    pub children_cpu: u64,
    /// Resident set, pages.
    pub rss_pages: u64,
}

/// Parses the usage fields of `/proc/PID/stat` (utime, stime, cutime,
/// cstime, rss), read after the name's last `)` like [`parse_stat`].
pub fn parse_usage(text: &str) -> Option<Usage> {
    let (_, rest) = text.rsplit_once(')')?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let n = |i: usize| f.get(i).and_then(|v| v.parse::<i64>().ok());
    let ticks = |i: usize| n(i).map(|v| v.max(0) as u64);
    Some(Usage {
        cpu: ticks(11)? + ticks(12)?,
        children_cpu: ticks(13)? + ticks(14)?,
        rss_pages: ticks(21)?,
    })
}

/// One process's usage, if it exists.
pub fn usage(pid: i32) -> Option<Usage> {
    parse_usage(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// Every descendant of `root` in `procs` (not `root` itself), parents
/// before their children.
pub fn descendants(procs: &[Proc], root: i32) -> Vec<Proc> {
    let mut children: BTreeMap<i32, Vec<Proc>> = BTreeMap::new();
    for p in procs {
        if p.pid != p.ppid {
            children.entry(p.ppid).or_default().push(*p);
        }
    }
    let mut out = Vec::new();
    let mut seen = BTreeSet::from([root]);
    let mut frontier = vec![root];
    while let Some(parent) = frontier.pop() {
        for c in children.get(&parent).into_iter().flatten() {
            // A pid seen twice would mean a torn snapshot; never loop.
            if seen.insert(c.pid) {
                out.push(*c);
                frontier.push(c.pid);
            }
        }
    }
    out
}

/// The live process table (processes that vanish while it is read are
/// skipped).
pub fn snapshot() -> Vec<Proc> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .filter_map(stat)
        .collect()
}

/// One process, if it exists.
pub fn stat(pid: i32) -> Option<Proc> {
    parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// The pids the kernel handed out between two readings of the last pid it
/// gave ([`last_pid`]): every process created in between has one of them.
/// Pids wrap around after `pid_max - 1`, so the window may wrap too; a
/// window read across a full wrap cannot be told from an empty one, which
/// is why callers only trust a window that spans a short time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PidWindow {
    /// The last pid handed out before.
    pub after: i32,
    /// The last pid handed out after.
    pub through: i32,
    /// Pids are below this (`/proc/sys/kernel/pid_max`).
    pub pid_max: i32,
}

impl PidWindow {
    /// How many pids the window holds.
    pub fn len(&self) -> usize {
        let n = if self.through >= self.after {
            self.through - self.after
        } else {
            self.pid_max - 1 - self.after + self.through
        };
        usize::try_from(n).unwrap_or(0)
    }

    /// Whether no pid was handed out.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The window's pids, in the order they were handed out.
    pub fn pids(&self) -> impl Iterator<Item = i32> + use<> {
        let (after, through, max) = (self.after, self.through, self.pid_max);
        let (first, second) = if through >= after {
            (after + 1..through + 1, 0..0)
        } else {
            (after + 1..max, 1..through + 1)
        };
        first.chain(second)
    }
}

/// The last pid the kernel handed out in this pid namespace, and the
/// namespace's bound on pids. `ns_last_pid` stays open (a call reads it
/// twice); `pid_max` is read once.
pub fn last_pid() -> Option<(i32, i32)> {
    use std::os::unix::fs::FileExt as _;
    static SOURCES: OnceLock<Option<(std::fs::File, i32)>> = OnceLock::new();
    let (file, pid_max) = SOURCES
        .get_or_init(|| {
            let max = std::fs::read_to_string("/proc/sys/kernel/pid_max").ok()?;
            let file = std::fs::File::open("/proc/sys/kernel/ns_last_pid").ok()?;
            Some((file, max.trim().parse().ok()?))
        })
        .as_ref()?;
    let mut buf = [0u8; 16];
    let n = file.read_at(&mut buf, 0).ok()?;
    let last = std::str::from_utf8(&buf[..n]).ok()?.trim().parse().ok()?;
    Some((last, *pid_max))
}

/// The live descendants of `root` that can still run.
pub fn live_descendants(root: i32) -> Vec<i32> {
    descendants(&snapshot(), root)
        .into_iter()
        .filter(|p| !p.dead)
        .map(|p| p.pid)
        .collect()
}

/// Reaps every exited child of this process but `keep` (whose status
/// belongs to another wait), without blocking: `waitid` with `WNOWAIT`
/// names an exited child and leaves it waitable, and a child so named is
/// reaped unless it is `keep`. When `keep` is the one named, the rest wait
/// for the next call (`keep` has ended: its wait comes next).
/// With no `keep`, every exited child is reaped.
pub fn reap_children_except(keep: Option<Pid>) {
    let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
    loop {
        match waitid(Id::All, flags) {
            Err(Errno::EINTR) => {}
            Ok(status) => match status.pid() {
                Some(pid) if Some(pid) != keep => {
                    let _ = waitpid(pid, Some(WaitPidFlag::WNOHANG));
                }
                // None has exited, or only `keep`.
                _ => return,
            },
            // ECHILD: no children at all.
            Err(_) => return,
        }
    }
}

/// Sends `signal` to every live descendant of `root`.
pub fn signal_descendants(root: i32, signal: Signal) {
    for pid in live_descendants(root) {
        // ESRCH (it exited meanwhile) is the only expected failure.
        let _ = kill(Pid::from_raw(pid), signal);
    }
}

/// SIGKILLs every descendant of `root` (this process: only its own tree can
/// be reaped here) and reaps them, again and again until none is left — a
/// process forking while the tree is killed only adds one more round. The
/// table is not read atomically, so "none is left" takes two empty readings
/// in a row.
/// Returns whether the tree is gone (a process stuck in the kernel past
/// `within` is given up on).
pub fn kill_descendants(root: i32, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    let mut empty = 0;
    loop {
        reap_children_except(None);
        let live = live_descendants(root);
        if live.is_empty() {
            empty += 1;
            if empty == 2 {
                reap_children_except(None);
                return true;
            }
            continue;
        }
        empty = 0;
        if Instant::now() > deadline {
            return false;
        }
        for pid in live {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(pid: i32, ppid: i32) -> Proc {
        Proc {
            pid,
            ppid,
            dead: false,
            start: 0,
        }
    }

    #[test]
    fn usage_is_read_after_the_name_and_counts_reaped_children() {
        let line = "4242 (my (odd) prog) S 1 4242 4242 0 -1 4194560 100 0 0 0 \
                    150 50 30 20 20 0 1 0 12345 10000000 2560 18446744073709551615";
        let u = parse_usage(line).unwrap();
        assert_eq!(
            u,
            Usage {
                cpu: 200,
                children_cpu: 50,
                rss_pages: 2560
            }
        );
        assert_eq!(parse_usage("4242 (x) S 1 2"), None);
        assert_eq!(parse_usage("no parenthesis"), None);
        assert!(usage(std::process::id() as i32).unwrap().rss_pages > 0);
    }

    #[test]
    fn stat_lines_parse_even_with_parentheses_in_the_name() {
        let line = "4242 (we(ird) name)) S 17 4242 4242 0 -1 4194560 100 0 0 0";
        assert_eq!(parse_stat(line), Some(p(4242, 17)));
        let full = "99 (bash) S 1 99 99 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 123456 8192";
        assert_eq!(parse_stat(full).unwrap().start, 123456);
        let zombie = "7 (sleep) Z 1 7 7 0 -1";
        assert!(parse_stat(zombie).unwrap().dead);
        assert_eq!(parse_stat("garbage"), None);
        assert_eq!(parse_stat("12 (x) S notanumber"), None);
    }

    #[test]
    fn descendants_include_grandchildren_and_exclude_other_trees() {
        let procs = [
            p(1, 0),
            p(10, 1),  // root
            p(11, 10), // child
            p(12, 11), // grandchild
            p(13, 12), // great-grandchild
            p(20, 1),  // another tree
            p(21, 20),
            p(14, 10), // re-parented orphan (the root is a subreaper)
        ];
        let mut pids: Vec<i32> = descendants(&procs, 10).iter().map(|p| p.pid).collect();
        pids.sort();
        assert_eq!(pids, [11, 12, 13, 14]);
        assert!(descendants(&procs, 13).is_empty());
        assert!(descendants(&procs, 99).is_empty());
    }

    #[test]
    fn a_torn_snapshot_with_a_cycle_still_ends() {
        let procs = [p(2, 3), p(3, 2), p(4, 3)];
        let mut pids: Vec<i32> = descendants(&procs, 2).iter().map(|p| p.pid).collect();
        pids.sort();
        assert_eq!(pids, [3, 4]);
    }

    #[test]
    fn pid_windows_count_and_list_their_pids_across_a_wrap() {
        let w = |after, through| PidWindow {
            after,
            through,
            pid_max: 100,
        };
        assert_eq!(w(10, 13).pids().collect::<Vec<_>>(), [11, 12, 13]);
        assert_eq!(w(10, 13).len(), 3);
        assert!(w(42, 42).is_empty());
        assert_eq!(w(42, 42).pids().count(), 0);
        // 99 is the last pid below pid_max; the kernel starts over above 0.
        assert_eq!(w(97, 2).pids().collect::<Vec<_>>(), [98, 99, 1, 2]);
        assert_eq!(w(97, 2).len(), 4);
        assert_eq!(w(99, 1).pids().collect::<Vec<_>>(), [1]);
        assert_eq!(w(99, 1).len(), 1);
    }

    #[test]
    fn a_child_started_between_two_readings_is_in_the_window() {
        let (after, pid_max) = last_pid().unwrap();
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let (through, _) = last_pid().unwrap();
        let w = PidWindow {
            after,
            through,
            pid_max,
        };
        assert!(w.pids().any(|p| p == child.id() as i32), "{w:?}");
        assert_eq!(w.pids().count(), w.len());
        child.wait().unwrap();
    }

    #[test]
    fn the_live_table_holds_this_process_and_its_children() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let me = std::process::id() as i32;
        let live = live_descendants(me);
        assert!(live.contains(&(child.id() as i32)), "{live:?}");
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(!live_descendants(me).contains(&(child.id() as i32)));
    }
}
