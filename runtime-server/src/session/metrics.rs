//! What a session uses: the CPU and memory of its processes (every tree
//! under the shims of its running commands and background processes, read
//! from `/proc`), their count, and the size of its workspace, beside the
//! Pod's CPUs, memory limit (cgroup v2 or v1) and file system.

use std::path::Path;

use kruntimes_proto::runtime::v1 as pb;

use super::Session;
use crate::contain::tree;

/// Most workspace entries summed for the disk figure; past it the figure
/// is partial (and says so).
pub const MAX_ENTRIES: u64 = 100_000;

/// What the trees under `shims` use. Pure over the process table `procs`
/// and each process's usage.
pub fn trees(
    procs: &[tree::Proc],
    shims: &[u32],
    usage: impl Fn(i32) -> Option<tree::Usage>,
) -> (u64, u64, u32) {
    let (mut ticks, mut pages, mut count) = (0u64, 0u64, 0u32);
    for shim in shims {
        let root = *shim as i32;
        // The shim reaps what its tree leaves behind (orphans): their CPU
        // is its children's.
        if let Some(u) = usage(root) {
            ticks += u.cpu + u.children_cpu;
        }
        for p in tree::descendants(procs, root) {
            if p.dead {
                continue;
            }
            // Its own CPU and that of the children it reaped (a shell's
            // commands, a build's compilers): those left the table.
            if let Some(u) = usage(p.pid) {
                ticks += u.cpu + u.children_cpu;
                pages += u.rss_pages;
                count += 1;
            }
        }
    }
    (ticks, pages, count)
}

/// Bytes of the regular files beneath `root` (symlinks not followed), and
/// whether the walk stopped at [`MAX_ENTRIES`].
pub fn disk(root: &Path) -> (u64, bool) {
    let mut bytes = 0u64;
    let mut seen = 0u64;
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.filter_map(Result::ok) {
            seen += 1;
            if seen > MAX_ENTRIES {
                return (bytes, true);
            }
            let Ok(ft) = e.file_type() else { continue };
            if ft.is_dir() {
                stack.push(e.path());
            } else if ft.is_file() {
                bytes += e.metadata().map_or(0, |m| m.len());
            }
        }
    }
    (bytes, false)
}

/// The memory limit of this process's cgroup, if it has one.
fn memory_limit() -> Option<u64> {
    let v2 = std::fs::read_to_string("/sys/fs/cgroup/memory.max").ok();
    let v1 = || std::fs::read_to_string("/sys/fs/cgroup/memory/memory.limit_in_bytes").ok();
    let text = v2.or_else(v1)?;
    let n: u64 = text.trim().parse().ok()?;
    // "max" (v2) does not parse; v1 says "none" with a huge number.
    (n < 1 << 60).then_some(n)
}

/// The session's figures now.
pub fn measure(session: &Session) -> pb::SessionMetricsResponse {
    let procs = tree::snapshot();
    let (ticks, pages, processes) = trees(&procs, &session.shim_pids(), tree::usage);
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .filter(|v| *v > 0)
        .unwrap_or(100) as u64;
    let page = nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
        .ok()
        .flatten()
        .filter(|v| *v > 0)
        .unwrap_or(4096) as u64;
    let (disk_bytes, disk_partial) = disk(session.root());
    let fs = nix::sys::statvfs::statvfs(session.root()).ok();
    pb::SessionMetricsResponse {
        cpu_millis: ticks * 1000 / hz,
        cpu_count: std::thread::available_parallelism().map_or(1, |n| n.get() as u32),
        memory_bytes: pages * page,
        memory_limit_bytes: memory_limit(),
        processes,
        disk_bytes,
        disk_partial,
        disk_total_bytes: fs.as_ref().map_or(0, |f| f.blocks() * f.fragment_size()),
        disk_free_bytes: fs
            .as_ref()
            .map_or(0, |f| f.blocks_available() * f.fragment_size()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(pid: i32, ppid: i32) -> tree::Proc {
        tree::Proc {
            pid,
            ppid,
            dead: false,
            start: 0,
        }
    }

    #[test]
    fn a_tree_counts_its_live_processes_and_the_cpu_its_shim_reaped() {
        let procs = [
            p(10, 1),
            p(11, 10),
            p(12, 11),
            p(20, 1),
            p(21, 20),
            p(99, 1),
        ];
        let usage = |pid: i32| {
            Some(tree::Usage {
                cpu: pid as u64,
                children_cpu: match pid {
                    10 => 1000,
                    11 => 500,
                    _ => 0,
                },
                rss_pages: 1,
            })
        };
        // Shim 10 (10 + its reaped 1000) with 11 (and what 11 reaped) and
        // 12; shim 20 with 21.
        let (ticks, pages, count) = trees(&procs, &[10, 20], usage);
        assert_eq!(ticks, 10 + 1000 + 11 + 500 + 12 + 20 + 21);
        assert_eq!((pages, count), (3, 3));
        assert_eq!(trees(&procs, &[], usage), (0, 0, 0));
        // A process gone between the table and its stat counts nothing.
        let (_, _, count) = trees(&procs, &[10], |pid| {
            (pid != 12).then(|| usage(pid)).flatten()
        });
        assert_eq!(count, 1);
    }

    #[test]
    fn the_workspace_size_sums_regular_files_without_following_links() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("sub")).unwrap();
        std::fs::write(d.path().join("a"), vec![0u8; 100]).unwrap();
        std::fs::write(d.path().join("sub/b"), vec![0u8; 23]).unwrap();
        std::os::unix::fs::symlink("/usr", d.path().join("link")).unwrap();
        assert_eq!(disk(d.path()), (123, false));
    }
}
