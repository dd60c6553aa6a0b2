//! Process confinement for the two sides of a Runtime Pod.
//!
//! The Runtime Server, which runs user code, confines itself before it
//! starts anything ([`confine`]): `no_new_privs` (no setuid escalation),
//! every capability dropped (a root server keeps its uid but loses
//! `CAP_DAC_OVERRIDE`, `CAP_SYS_PTRACE` and the rest), and a Landlock
//! allowlist of the file system (read-only system paths, read-write only its
//! own work root): the state directory with the stack's keys and tokens, and
//! `/proc` with other processes' command lines and environments, are simply
//! not reachable. runtimed, which holds the secrets, makes itself
//! non-dumpable ([`forbid_inspection`]) so no process of its uid without
//! `CAP_SYS_PTRACE` can read its memory or `/proc/PID/environ`.
//!
//! All of it is per thread and inherited by threads and processes created
//! afterwards: call it first in `main`, before any runtime or thread starts.

use std::path::{Path, PathBuf};

use landlock::{
    ABI, Access, AccessFs, Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetStatus,
    path_beneath_rules,
};

/// The Landlock ABI the rules are written for; older kernels enforce what
/// they can (best effort), newer ones the same.
const LANDLOCK_ABI: ABI = ABI::V5;

/// Errors of confining the current process.
#[derive(Debug, thiserror::Error)]
pub enum ConfineError {
    /// `prctl` failed.
    #[error("prctl {what}: {source}")]
    Prctl {
        /// Which operation.
        what: &'static str,
        /// Cause.
        source: nix::Error,
    },
    /// Dropping a capability failed.
    #[error("drop capabilities: {0}")]
    Capabilities(#[from] caps::errors::CapsError),
    /// Building or applying the Landlock ruleset failed.
    #[error("landlock: {0}")]
    Landlock(#[from] landlock::RulesetError),
}

/// What the file system of a confined process is made of.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Confinement {
    /// Readable and executable trees (system directories, the interpreter).
    pub read_only: Vec<PathBuf>,
    /// Trees it may read, write, create and remove in (its work root).
    pub read_write: Vec<PathBuf>,
}

impl Confinement {
    /// The system trees every program needs (those that exist): `/usr`,
    /// `/lib`, `/lib64`, `/bin`, `/sbin`, `/etc`, `/opt`; plus `extra`
    /// read-only trees and the `read_write` ones. `/dev/null`, `/dev/zero`,
    /// `/dev/random` and `/dev/urandom` are readable and writable, and so
    /// are the terminal devices (`/dev/ptmx`, `/dev/pts`, `/dev/tty`): a
    /// session's processes may run on terminals of their own.
    pub fn with_system(extra: &[PathBuf], read_write: &[PathBuf]) -> Self {
        let system = ["/usr", "/lib", "/lib64", "/bin", "/sbin", "/etc", "/opt"];
        let devices = [
            "/dev/null",
            "/dev/zero",
            "/dev/random",
            "/dev/urandom",
            "/dev/ptmx",
            "/dev/pts",
            "/dev/tty",
        ];
        Self {
            read_only: system
                .iter()
                .map(PathBuf::from)
                .chain(extra.iter().cloned())
                .collect(),
            read_write: devices
                .iter()
                .map(PathBuf::from)
                .chain(read_write.iter().cloned())
                .collect(),
        }
    }
}

/// How far the confinement went on this kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Confined {
    /// Landlock rules are enforced in full.
    pub landlock_full: bool,
    /// Landlock is enforced at all (partially on an older kernel).
    pub landlock: bool,
    /// Capabilities were held and are now dropped.
    pub capabilities_dropped: bool,
}

fn existing(paths: &[PathBuf]) -> Vec<&Path> {
    paths
        .iter()
        .map(PathBuf::as_path)
        .filter(|p| p.exists())
        .collect()
}

/// Confines the current thread (and everything it starts afterwards):
/// `no_new_privs`, no capabilities, and the file system of `c` only.
pub fn confine(c: &Confinement) -> Result<Confined, ConfineError> {
    nix::sys::prctl::set_no_new_privs().map_err(|source| ConfineError::Prctl {
        what: "PR_SET_NO_NEW_PRIVS",
        source,
    })?;
    let capabilities_dropped = drop_capabilities()?;
    let read = AccessFs::from_read(LANDLOCK_ABI);
    let status = Ruleset::default()
        .handle_access(AccessFs::from_all(LANDLOCK_ABI))?
        .create()?
        .add_rules(path_beneath_rules(existing(&c.read_only), read))?
        .add_rules(path_beneath_rules(
            existing(&c.read_write),
            AccessFs::from_all(LANDLOCK_ABI),
        ))?
        .restrict_self()?;
    Ok(Confined {
        landlock_full: status.ruleset == RulesetStatus::FullyEnforced,
        landlock: status.ruleset != RulesetStatus::NotEnforced,
        capabilities_dropped,
    })
}

/// Drops every capability: the bounding set first (while `CAP_SETPCAP` is
/// still effective), then ambient, inheritable, effective and permitted.
/// Returns whether any was held.
fn drop_capabilities() -> Result<bool, ConfineError> {
    use caps::CapSet;
    let held = !caps::read(None, CapSet::Permitted)?.is_empty();
    if caps::has_cap(None, CapSet::Effective, caps::Capability::CAP_SETPCAP)? {
        for cap in caps::read(None, CapSet::Bounding)? {
            caps::drop(None, CapSet::Bounding, cap)?;
        }
    }
    for set in [
        CapSet::Ambient,
        CapSet::Inheritable,
        CapSet::Effective,
        CapSet::Permitted,
    ] {
        caps::clear(None, set)?;
    }
    Ok(held)
}

/// Makes the current process non-dumpable: its memory and
/// `/proc/PID/environ` are out of reach of processes of its uid that lack
/// `CAP_SYS_PTRACE`, and it leaves no core dump.
pub fn forbid_inspection() -> Result<(), ConfineError> {
    nix::sys::prctl::set_dumpable(false).map_err(|source| ConfineError::Prctl {
        what: "PR_SET_DUMPABLE",
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_trees_are_read_only_and_devices_writable() {
        let c = Confinement::with_system(&["/opt/python".into()], &["/work".into()]);
        assert!(c.read_only.contains(&PathBuf::from("/usr")));
        assert!(c.read_only.contains(&PathBuf::from("/opt/python")));
        assert!(c.read_write.contains(&PathBuf::from("/dev/null")));
        assert!(c.read_write.contains(&PathBuf::from("/work")));
        assert!(!c.read_only.iter().any(|p| p.starts_with("/proc")));
        assert!(!c.read_only.iter().any(|p| p.starts_with("/root")));
    }

    #[test]
    fn missing_trees_are_left_out_of_the_rules() {
        let paths = ["/usr".into(), "/no/such/tree".into()];
        let got = existing(&paths);
        assert_eq!(got, vec![Path::new("/usr")]);
    }
}
