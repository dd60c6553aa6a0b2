//! Inputs: the files `StageInputs` stages for a Run before it starts, and
//! their move into the fresh working directory of `StartTask` or
//! `OpenSession` with `inputs`.
//!
//! A Run's staged files live in `{work_root}/.inputs/{run_uid}` (mode 0700):
//! beside every working directory, never in one, under a name no Run UID
//! (`[0-9a-f-]`) can take. A `StageInputs` call first forgets and removes
//! what an earlier call staged for the Run, then writes into a private
//! directory of its own (`.inputs/{run_uid}.partial-{random}`), which only a
//! complete stream renames to `.inputs/{run_uid}`; a stream that breaks
//! midway, or a malformed one, leaves nothing. The attempt staged is held in
//! memory: starting any other attempt with `inputs` is refused.
//!
//! Writing trusts nothing beneath the work root: `.inputs` and the staging
//! directory are opened without following a link, every directory of a
//! staged path is made and opened relative to its parent's descriptor with
//! `O_NOFOLLOW | O_DIRECTORY`, and every file is created with
//! `O_CREAT | O_EXCL | O_NOFOLLOW`. Moving renames each top-level entry into
//! the working directory (the same file system), after checking that none
//! would replace what is there (the source).

use std::collections::{HashMap, HashSet};
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use kruntimes_proto::runtime::v1 as pb;
use nix::dir::Dir;
use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, open, openat, renameat};
use nix::sys::stat::{Mode, fchmod, fstatat, mkdirat};
use nix::unistd::{UnlinkatFlags, unlinkat};

use crate::error::{Error, Result};
use crate::validate;

/// The directory under the work root that holds every Run's staged files.
/// It starts with a `.`, which no Run UID does.
pub const PARENT: &str = ".inputs";

/// How directories are opened: never through a link.
fn dir_flags() -> OFlag {
    OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC
}

/// How staged files are created: new, never through a link.
fn file_flags() -> OFlag {
    OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC
}

/// The server's own failure, with what it was doing (never a user path).
fn sys(what: &str, e: Errno) -> Error {
    Error::Io(io::Error::new(
        io::Error::from(e).kind(),
        format!("{what}: {e}"),
    ))
}

/// Every Run's staged files.
#[derive(Debug)]
pub struct Inputs {
    work_root: PathBuf,
    /// The attempt staged whole at `.inputs/{run_uid}`, by Run UID.
    staged: Mutex<HashMap<String, u64>>,
}

impl Inputs {
    /// Nothing staged yet; staging lives under `work_root` (canonical).
    pub fn new(work_root: PathBuf) -> Self {
        Self {
            work_root,
            staged: Mutex::default(),
        }
    }

    fn staged(&self) -> std::sync::MutexGuard<'_, HashMap<String, u64>> {
        self.staged.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn parent(&self) -> PathBuf {
        self.work_root.join(PARENT)
    }

    /// Opens `.inputs` beneath the work root without following a link,
    /// made (0700) when missing; whatever else took its name goes.
    fn open_parent(&self) -> Result<OwnedFd> {
        let root = open(
            &self.work_root,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| sys("open the work root", e))?;
        let make = || match mkdirat(&root, PARENT, Mode::S_IRWXU) {
            Ok(()) | Err(Errno::EEXIST) => Ok(()),
            Err(e) => Err(sys("create the inputs directory", e)),
        };
        make()?;
        let parent = match openat(&root, PARENT, dir_flags(), Mode::empty()) {
            Ok(fd) => fd,
            // Something else took its name (user code may write the work
            // root): it goes, the directory comes back.
            Err(Errno::ELOOP | Errno::ENOTDIR) => {
                unlinkat(&root, PARENT, UnlinkatFlags::NoRemoveDir).map_err(|e| {
                    sys("remove what is not a directory at the inputs directory", e)
                })?;
                make()?;
                openat(&root, PARENT, dir_flags(), Mode::empty())
                    .map_err(|e| sys("open the inputs directory", e))?
            }
            Err(e) => return Err(sys("open the inputs directory", e)),
        };
        fchmod(&parent, Mode::S_IRWXU)
            .map_err(|e| sys("set the mode of the inputs directory", e))?;
        Ok(parent)
    }

    /// Removes `.inputs/{name}` and everything in it; nothing there is
    /// fine. A parent that is not a directory is left alone: nothing of
    /// the server's can be beneath it.
    fn remove(&self, name: &str) -> io::Result<()> {
        let parent = self.parent();
        match std::fs::symlink_metadata(&parent) {
            Ok(md) if md.is_dir() => {}
            _ => return Ok(()),
        }
        let dir = parent.join(name);
        match std::fs::symlink_metadata(&dir) {
            Ok(md) if md.is_dir() => std::fs::remove_dir_all(&dir),
            Ok(_) => std::fs::remove_file(&dir),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
        }
        .map_err(|e| io::Error::new(e.kind(), format!("remove staged inputs: {e}")))
    }

    /// Forgets and removes what was staged for a Run.
    pub fn discard(&self, run_uid: &str) -> Result<()> {
        let mut staged = self.staged();
        staged.remove(run_uid);
        self.remove(run_uid)?;
        Ok(())
    }

    /// Forgets and removes everything staged, and every staging under way
    /// (its stream then fails).
    pub fn reset(&self) {
        let mut staged = self.staged();
        staged.clear();
        let parent = self.parent();
        let removed = match std::fs::symlink_metadata(&parent) {
            Ok(md) if md.is_dir() => std::fs::remove_dir_all(&parent),
            Ok(_) => std::fs::remove_file(&parent),
            Err(_) => Ok(()),
        };
        if let Err(e) = removed {
            tracing::warn!(error = %e, "staged inputs stay");
        }
    }

    /// Begins staging for `run_uid` at `attempt`: what was staged for the
    /// Run goes, and a fresh private directory is made to write into.
    /// Blocking.
    pub fn begin(&self, run_uid: &str, attempt: u64) -> Result<Stager> {
        self.discard(run_uid)?;
        let parent = self.open_parent()?;
        let name = format!("{run_uid}.partial-{}", uuid::Uuid::new_v4().simple());
        mkdirat(&parent, name.as_str(), Mode::S_IRWXU)
            .map_err(|e| sys("create a staging directory", e))?;
        let root = match openat(&parent, name.as_str(), dir_flags(), Mode::empty()) {
            Ok(fd) => fd,
            Err(e) => {
                let _ = self.remove(&name);
                return Err(sys("open a staging directory", e));
            }
        };
        // The mode asked for, whatever the umask took away.
        fchmod(&root, Mode::S_IRWXU).map_err(|e| sys("set the mode of a staging directory", e))?;
        Ok(Stager {
            run_uid: run_uid.to_owned(),
            attempt,
            parent_path: self.parent(),
            parent,
            name,
            root,
            current: None,
            seen: HashSet::new(),
            files: 0,
            bytes: 0,
            committed: false,
        })
    }

    /// Ends a staging whose stream ended: the last file must be whole.
    /// Its directory becomes the Run's staged files, replacing any a
    /// concurrent call staged. Files and bytes staged. Blocking.
    pub fn commit(&self, mut stager: Stager) -> Result<(u32, u64)> {
        stager.finish_file()?;
        let mut staged = self.staged();
        self.remove(&stager.run_uid)?;
        renameat(
            &stager.parent,
            stager.name.as_str(),
            &stager.parent,
            stager.run_uid.as_str(),
        )
        .map_err(|e| sys("keep the staged inputs", e))?;
        stager.committed = true;
        staged.insert(stager.run_uid.clone(), stager.attempt);
        Ok((stager.files, stager.bytes))
    }

    /// Moves what was staged for `run_uid` at `attempt` into `workspace`
    /// (fresh, canonical, the server's): each top-level entry is renamed
    /// into it, none replacing what it holds (the source). The staging is
    /// spent whatever the outcome. FAILED_PRECONDITION when nothing was
    /// staged for this attempt or an entry would replace a path. Blocking.
    pub fn take(&self, run_uid: &str, attempt: u64, workspace: &Path) -> Result<()> {
        let not_staged = || {
            Error::Inputs(format!(
                "no inputs are staged for run {run_uid} at attempt {attempt}"
            ))
        };
        // Claimed under the lock, so a concurrent StageInputs cannot swap
        // what is moved.
        let (parent, claimed) = {
            let mut staged = self.staged();
            if staged.get(run_uid) != Some(&attempt) {
                return Err(not_staged());
            }
            staged.remove(run_uid);
            let parent = self.open_parent()?;
            let claimed = format!("{run_uid}.taken-{}", uuid::Uuid::new_v4().simple());
            match renameat(&parent, run_uid, &parent, claimed.as_str()) {
                Ok(()) => {}
                Err(Errno::ENOENT) => return Err(not_staged()),
                Err(e) => return Err(sys("claim the staged inputs", e)),
            }
            (parent, claimed)
        };
        let moved = move_into(parent.as_fd(), &claimed, workspace);
        let removed = self.remove(&claimed);
        moved?;
        removed?;
        Ok(())
    }
}

/// Renames every top-level entry of `parent/claimed` into `workspace`,
/// after checking that none would replace a path there.
fn move_into(parent: BorrowedFd<'_>, claimed: &str, workspace: &Path) -> Result<()> {
    let mut from = Dir::openat(parent, claimed, dir_flags(), Mode::empty())
        .map_err(|e| sys("open the staged inputs", e))?;
    let mut names: Vec<OsString> = Vec::new();
    for entry in from.iter() {
        let entry = entry.map_err(|e| sys("read the staged inputs", e))?;
        let n = entry.file_name().to_bytes();
        if n != b"." && n != b".." {
            names.push(OsStr::from_bytes(n).to_os_string());
        }
    }
    names.sort_unstable();
    let to = open(workspace, dir_flags(), Mode::empty())
        .map_err(|e| sys("open the working directory", e))?;
    for n in &names {
        match fstatat(&to, n.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW) {
            Err(Errno::ENOENT) => {}
            Ok(_) => {
                return Err(Error::Inputs(format!(
                    "input {:?} would replace what the working directory already holds \
                     at that path (the Run's source)",
                    n.to_string_lossy()
                )));
            }
            Err(e) => return Err(sys("examine the working directory", e)),
        }
    }
    for n in &names {
        renameat(&from, n.as_os_str(), &to, n.as_os_str())
            .map_err(|e| sys("move a staged input into the working directory", e))?;
    }
    Ok(())
}

/// The file being written.
#[derive(Debug)]
struct Current {
    path: String,
    file: File,
    size: u64,
    left: u64,
}

/// One staging under way: its private directory and the file being
/// written. Dropped before [`Inputs::commit`], it removes its directory.
#[derive(Debug)]
pub struct Stager {
    run_uid: String,
    attempt: u64,
    parent_path: PathBuf,
    parent: OwnedFd,
    name: String,
    root: OwnedFd,
    current: Option<Current>,
    /// Paths staged so far.
    seen: HashSet<String>,
    files: u32,
    bytes: u64,
    committed: bool,
}

impl Stager {
    /// Takes one message after the target. Blocking.
    pub fn push(&mut self, part: pb::stage_chunk::Part) -> Result<()> {
        match part {
            pb::stage_chunk::Part::Target(_) => Err(Error::Invalid(
                "only the first message of StageInputs is a StageTarget".into(),
            )),
            pb::stage_chunk::Part::File(f) => self.file(f),
            pb::stage_chunk::Part::Data(d) => self.data(&d),
        }
    }

    /// The last file must have all its bytes.
    fn finish_file(&mut self) -> Result<()> {
        match self.current.take() {
            Some(c) if c.left > 0 => Err(Error::Invalid(format!(
                "input {:?}: its data ended after {} of its {} bytes",
                c.path,
                c.size - c.left,
                c.size
            ))),
            _ => Ok(()),
        }
    }

    /// A file's header: its parents are made, it is created.
    fn file(&mut self, f: pb::StagedFile) -> Result<()> {
        self.finish_file()?;
        let segments = validate::staged_path(&f.path)?;
        if !self.seen.insert(f.path.clone()) {
            return Err(Error::Invalid(format!(
                "input {:?} is staged twice",
                f.path
            )));
        }
        let Some((last, dirs)) = segments.split_last() else {
            return Err(Error::Invalid(format!(
                "input {:?}: the path is empty",
                f.path
            )));
        };
        let mut dir: Option<OwnedFd> = None;
        for (i, seg) in dirs.iter().enumerate() {
            let at = dir.as_ref().map_or(self.root.as_fd(), |d| d.as_fd());
            match mkdirat(at, seg.as_str(), Mode::from_bits_truncate(0o755)) {
                Ok(()) | Err(Errno::EEXIST) => {}
                Err(e) => return Err(sys("create a staged directory", e)),
            }
            let next = match openat(at, seg.as_str(), dir_flags(), Mode::empty()) {
                Ok(d) => d,
                Err(Errno::ENOTDIR | Errno::ELOOP) => {
                    return Err(Error::Invalid(format!(
                        "input {:?}: {:?} is a staged file, not a directory",
                        f.path,
                        segments[..=i].join("/")
                    )));
                }
                Err(e) => return Err(sys("open a staged directory", e)),
            };
            dir = Some(next);
        }
        let at = dir.as_ref().map_or(self.root.as_fd(), |d| d.as_fd());
        let fd = match openat(
            at,
            last.as_str(),
            file_flags(),
            Mode::from_bits_truncate(0o644),
        ) {
            Ok(fd) => fd,
            Err(Errno::EEXIST) => {
                return Err(Error::Invalid(format!(
                    "input {:?}: a staged directory has that path",
                    f.path
                )));
            }
            Err(e) => return Err(sys("create a staged file", e)),
        };
        self.files = self.files.saturating_add(1);
        self.current = Some(Current {
            path: f.path,
            file: File::from(fd),
            size: f.size,
            left: f.size,
        });
        Ok(())
    }

    /// Content of the current file, written as it comes.
    fn data(&mut self, d: &[u8]) -> Result<()> {
        let Some(c) = self.current.as_mut() else {
            return Err(Error::Invalid(
                "StageInputs data came before any StagedFile header".into(),
            ));
        };
        let n = d.len() as u64;
        if n > c.left {
            return Err(Error::Invalid(format!(
                "input {:?}: more data than its {} bytes",
                c.path, c.size
            )));
        }
        c.file
            .write_all(d)
            .map_err(|e| io::Error::new(e.kind(), format!("write a staged file: {e}")))?;
        c.left -= n;
        self.bytes += n;
        Ok(())
    }
}

impl Drop for Stager {
    fn drop(&mut self) {
        if self.committed {
            return;
        }
        // Path-based, as `Inputs::remove`: `.inputs` must still be a
        // directory.
        let removed = match std::fs::symlink_metadata(&self.parent_path) {
            Ok(md) if md.is_dir() => std::fs::remove_dir_all(self.parent_path.join(&self.name)),
            _ => Ok(()),
        };
        match removed {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!(run_uid = %self.run_uid, error = %e, "a partial staging stays");
            }
        }
    }
}

#[cfg(test)]
mod tests;
