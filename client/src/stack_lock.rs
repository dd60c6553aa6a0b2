//! One `krt up` per state directory: the running stack holds an exclusive
//! `flock` on `STATE_DIR/krt-up.lock` for its whole life (the kernel drops
//! it when the process ends, however it ends) and writes its PID and
//! gateway address into the file. A second `krt up` is refused, naming
//! them; a client verb finds out whether a stack runs before it trusts the
//! state files.

use std::fs::File;
use std::io::{Seek as _, Write as _};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};

/// The lock file of a state directory.
pub const FILE: &str = "krt-up.lock";

/// Who holds a state directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    /// The `krt up` process.
    pub pid: u32,
    /// Its gateway's URL.
    pub gateway: String,
}

/// Why a state directory could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another `krt up` holds it.
    #[error(
        "another krt up runs with state directory {} (pid {}, gateway {}): stop it, or start this one with another --state-dir",
        dir.display(), holder.as_ref().map_or_else(|| "unknown".to_owned(), |h| h.pid.to_string()),
        holder.as_ref().map_or("unknown", |h| h.gateway.as_str())
    )]
    Held {
        /// The state directory.
        dir: PathBuf,
        /// What the holder wrote (none if it has not yet).
        holder: Option<Holder>,
    },
    /// The lock file could not be opened or locked.
    #[error("lock {}: {source}", path.display())]
    Io {
        /// The lock file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// The held lock of a running stack; released when dropped (or when the
/// process ends).
#[derive(Debug)]
pub struct StackLock {
    _lock: Flock<File>,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> LockError + '_ {
    move |source| LockError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn read_holder(path: &Path) -> Option<Holder> {
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

impl StackLock {
    /// Takes `dir` for this process's stack, whose gateway is `gateway`.
    pub fn acquire(dir: &Path, gateway: &str) -> Result<Self, LockError> {
        let path = dir.join(FILE);
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io(&path))?;
        let mut lock = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(lock) => lock,
            Err((_, Errno::EWOULDBLOCK)) => {
                return Err(LockError::Held {
                    dir: dir.to_path_buf(),
                    holder: read_holder(&path),
                });
            }
            Err((_, e)) => return Err(io(&path)(e.into())),
        };
        let holder = Holder {
            pid: std::process::id(),
            gateway: gateway.to_owned(),
        };
        let text = serde_json::to_vec(&holder).unwrap_or_default();
        lock.set_len(0).map_err(io(&path))?;
        lock.rewind().map_err(io(&path))?;
        lock.write_all(&text).map_err(io(&path))?;
        Ok(Self { _lock: lock })
    }
}

/// Who runs a stack with `dir`, or `None` when none does (no lock file, or
/// nobody holds it).
pub fn running(dir: &Path) -> Option<Holder> {
    let path = dir.join(FILE);
    let file = File::open(&path).ok()?;
    match Flock::lock(file, FlockArg::LockSharedNonblock) {
        // Nobody holds it: no stack (the shared lock goes with `_free`).
        Ok(_free) => None,
        Err(_) => Some(read_holder(&path).unwrap_or(Holder {
            pid: 0,
            gateway: String::new(),
        })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_holder_per_directory_until_it_lets_go() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(running(dir.path()), None, "no lock file: no stack");
        let lock = StackLock::acquire(dir.path(), "https://127.0.0.1:8443").unwrap();
        let holder = running(dir.path()).unwrap();
        assert_eq!(holder.pid, std::process::id());
        assert_eq!(holder.gateway, "https://127.0.0.1:8443");
        // A second taker is refused and told who holds it.
        let e = StackLock::acquire(dir.path(), "https://127.0.0.1:9443").unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains(&format!("pid {}", std::process::id()))
                && text.contains("gateway https://127.0.0.1:8443"),
            "{text}"
        );
        drop(lock);
        // Released: the file stays, the stack does not.
        assert_eq!(running(dir.path()), None);
        let again = StackLock::acquire(dir.path(), "https://127.0.0.1:9443").unwrap();
        assert_eq!(
            running(dir.path()).unwrap().gateway,
            "https://127.0.0.1:9443"
        );
        drop(again);
    }
}
