//! What the Runtime Server — and so every user process it starts — may
//! reach of the file system, decided once at start-up and applied with
//! [`kruntimes_process::confine`] before any thread or process exists.
//!
//! The allowlist is a pure function of what the server is told and what it
//! finds ([`plan`]): the system trees, the directories on its `PATH` (and
//! the root of a version manager whose `shims` directory is on it, such as
//! pyenv's), the Python interpreter's own trees, `/proc` read-only (the
//! shims walk it to find a tree's processes; other processes' memory and
//! environments stay behind the kernel's ptrace checks, which a confined
//! process without capabilities fails), `/sys/fs/cgroup` read-only (the
//! Pod's memory limit, for a session's metrics), `--allow-read` trees, and its
//! read-write work root, socket directory and temporary directory. A tree
//! that contains — or, unless it is one of those three, lies beneath — a
//! `--protect`ed path is left out, with a warning: `krt up` protects its state directory, so a `PATH` entry or a
//! temporary directory above it can never open the keys and tokens in it.

use std::path::{Path, PathBuf};

/// What the allowlist is made from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Inputs {
    /// The directories of the server's `PATH`, in order.
    pub path_dirs: Vec<PathBuf>,
    /// The Python interpreter's trees (prefixes, `sys.path`, the
    /// executable's directory), if there is one.
    pub python_trees: Vec<PathBuf>,
    /// This executable (the shims run it again).
    pub exe: Option<PathBuf>,
    /// `--allow-read` trees.
    pub allow_read: Vec<PathBuf>,
    /// The work root (read-write).
    pub work_root: PathBuf,
    /// The sockets' directory (read-write).
    pub socket_dir: PathBuf,
    /// The temporary directory handed to user processes (read-write).
    pub tmp_dir: PathBuf,
    /// Paths no rule may reach.
    pub protect: Vec<PathBuf>,
}

/// The decided allowlist.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Extra read-only trees, on top of the system ones.
    pub read_only: Vec<PathBuf>,
    /// Read-write trees.
    pub read_write: Vec<PathBuf>,
    /// Trees left out, with the protected path each would have reached.
    pub refused: Vec<(PathBuf, PathBuf)>,
}

/// Whether a rule on `tree` would reach `protected`: `tree` contains it or
/// lies beneath it.
fn reaches(tree: &Path, protected: &Path) -> bool {
    protected.starts_with(tree) || tree.starts_with(protected)
}

/// Decides the allowlist. The work root, socket directory and temporary
/// directory are the server's own and may lie beneath a protected path
/// (`krt up` keeps them in its state directory), but never contain one.
pub fn plan(i: &Inputs) -> Plan {
    let mut p = Plan::default();
    let refuse = |tree: &Path, own: bool| {
        i.protect
            .iter()
            .find(|prot| {
                if own {
                    prot.starts_with(tree)
                } else {
                    reaches(tree, prot)
                }
            })
            .cloned()
    };
    let version_roots = i.path_dirs.iter().filter_map(|d| {
        (d.file_name().is_some_and(|n| n == "shims"))
            .then(|| d.parent().map(Path::to_path_buf))
            .flatten()
    });
    // The cgroup files say the Pod's memory limit (a session's metrics).
    let read_only: Vec<PathBuf> = [PathBuf::from("/proc"), PathBuf::from("/sys/fs/cgroup")]
        .into_iter()
        .chain(i.path_dirs.iter().cloned())
        .chain(version_roots)
        .chain(i.python_trees.iter().cloned())
        .chain(i.exe.iter().cloned())
        .chain(i.allow_read.iter().cloned())
        .collect();
    for tree in read_only {
        if !tree.is_absolute() || p.read_only.contains(&tree) {
            continue;
        }
        match refuse(&tree, false) {
            Some(prot) => p.refused.push((tree, prot)),
            None => p.read_only.push(tree),
        }
    }
    for (tree, own) in [
        (&i.work_root, true),
        (&i.socket_dir, true),
        (&i.tmp_dir, true),
    ] {
        match refuse(tree, own) {
            Some(prot) => p.refused.push((tree.clone(), prot)),
            None => p.read_write.push(tree.clone()),
        }
    }
    p
}

/// The directories of a `PATH` value.
pub fn path_dirs(path: &str) -> Vec<PathBuf> {
    std::env::split_paths(path)
        .filter(|d| d.is_absolute())
        .collect()
}

/// Asks `python` for its trees: `sys.prefix`, `sys.base_prefix`,
/// `sys.exec_prefix`, the existing `sys.path` entries and the real
/// executable's directory. No interpreter (a Bash-only image) is no trees.
pub fn python_trees(python: &Path) -> Vec<PathBuf> {
    const PROBE: &str = "import os, sys\n\
        trees = [sys.prefix, sys.base_prefix, sys.exec_prefix, *sys.path]\n\
        trees.append(os.path.dirname(os.path.realpath(sys.executable)))\n\
        print('\\n'.join(t for t in trees if t and os.path.isabs(t) and os.path.exists(t)))\n";
    let out = std::process::Command::new(python)
        .args(["-I", "-c", PROBE])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output();
    match out {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout)
            .lines()
            .map(PathBuf::from)
            .collect(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs() -> Inputs {
        Inputs {
            path_dirs: path_dirs("/root/.pyenv/shims:/usr/local/bin:relative/bin:/usr/bin"),
            python_trees: vec!["/root/.pyenv/versions/3.11.9".into()],
            exe: Some("/opt/krt/bin/krt".into()),
            allow_read: vec!["/srv/models".into()],
            work_root: "/state/work/runtimed-0".into(),
            socket_dir: "/state/sockets/runtimed-0".into(),
            tmp_dir: "/state/tmp/runtimed-0".into(),
            protect: vec!["/state".into()],
        }
    }

    #[test]
    fn path_python_exe_and_allowed_trees_are_readable_with_proc() {
        let p = plan(&inputs());
        for t in [
            "/proc",
            "/sys/fs/cgroup",
            "/root/.pyenv/shims",
            "/root/.pyenv",
            "/usr/local/bin",
            "/usr/bin",
            "/root/.pyenv/versions/3.11.9",
            "/opt/krt/bin/krt",
            "/srv/models",
        ] {
            assert!(p.read_only.contains(&PathBuf::from(t)), "{t}: {p:?}");
        }
        assert!(!p.read_only.iter().any(|t| t.is_relative()));
    }

    #[test]
    fn own_directories_beneath_a_protected_one_stay_writable() {
        let mut i = inputs();
        i.tmp_dir = "/state/tmp/runtimed-0".into();
        let p = plan(&i);
        assert_eq!(
            p.read_write,
            vec![
                PathBuf::from("/state/work/runtimed-0"),
                PathBuf::from("/state/sockets/runtimed-0"),
                PathBuf::from("/state/tmp/runtimed-0"),
            ]
        );
        assert!(p.refused.is_empty(), "{:?}", p.refused);
    }

    #[test]
    fn no_tree_that_contains_or_lies_in_a_protected_path_is_allowed() {
        let mut i = inputs();
        i.path_dirs.push("/".into());
        i.allow_read.push("/state/pki".into());
        i.tmp_dir = "/state".into();
        i.work_root = "/".into();
        let p = plan(&i);
        for t in ["/", "/state/pki", "/state"] {
            let t = PathBuf::from(t);
            assert!(!p.read_only.contains(&t), "{t:?} readable");
            assert!(!p.read_write.contains(&t), "{t:?} writable");
        }
        assert_eq!(p.refused.len(), 4, "{:?}", p.refused);
        assert!(
            p.refused
                .iter()
                .all(|(_, prot)| prot == Path::new("/state"))
        );
    }

    #[test]
    fn a_temporary_directory_above_the_state_is_refused() {
        let mut i = inputs();
        i.protect = vec!["/tmp/test-123/.kruntimes".into()];
        i.tmp_dir = "/tmp".into();
        let p = plan(&i);
        assert!(!p.read_write.contains(&PathBuf::from("/tmp")));
        assert_eq!(p.refused[0].0, PathBuf::from("/tmp"));
    }

    #[test]
    fn the_probe_finds_this_machines_python_or_nothing() {
        let trees = python_trees(Path::new("python3"));
        assert!(trees.iter().all(|t| t.is_absolute() && t.exists()));
        assert!(python_trees(Path::new("/no/such/python")).is_empty());
    }
}
