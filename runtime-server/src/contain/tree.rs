//! A process tree read from `/proc`: each process's parent, whether it is a
//! zombie, and the descendants of one process. The parsing and the walk are
//! pure; [`snapshot`] reads the live table and [`kill_descendants`] kills a
//! tree until nothing of it is left.
//!
//! The shim that calls these is a child subreaper, so every process its
//! child starts — double-forked or `setsid` ones included — stays its
//! descendant: an orphan is re-parented to the shim, not to init.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
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
}

/// Parses `/proc/PID/stat`. The command name may hold spaces and
/// parentheses, so the fields are read after its *last* `)`.
pub fn parse_stat(text: &str) -> Option<Proc> {
    let (head, rest) = text.rsplit_once(')')?;
    let pid = head.split_once(" (")?.0.trim().parse().ok()?;
    let mut fields = rest.split_whitespace();
    let state = fields.next()?;
    let ppid = fields.next()?.parse().ok()?;
    Some(Proc {
        pid,
        ppid,
        dead: state == "Z" || state == "X",
    })
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
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
        })
        .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
        .filter_map(|s| parse_stat(&s))
        .collect()
}

/// The live descendants of `root` that can still run.
pub fn live_descendants(root: i32) -> Vec<i32> {
    descendants(&snapshot(), root)
        .into_iter()
        .filter(|p| !p.dead)
        .map(|p| p.pid)
        .collect()
}

/// Reaps every exited child of this process without blocking.
pub fn reap_children() {
    loop {
        match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) | Err(_) => return,
            Ok(_) => {}
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
/// process forking while the tree is killed only adds one more round.
/// Returns whether the tree is gone (a process stuck in the kernel past
/// `within` is given up on).
pub fn kill_descendants(root: i32, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    loop {
        reap_children();
        let live = live_descendants(root);
        if live.is_empty() {
            reap_children();
            return true;
        }
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
        }
    }

    #[test]
    fn stat_lines_parse_even_with_parentheses_in_the_name() {
        let line = "4242 (we(ird) name)) S 17 4242 4242 0 -1 4194560 100 0 0 0";
        assert_eq!(parse_stat(line), Some(p(4242, 17)));
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
