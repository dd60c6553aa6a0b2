//! Artifacts: the directory a task started with `StartTaskRequest.artifacts`
//! (or every command of a session opened with `OpenSessionRequest.artifacts`)
//! writes its files into (`KRUNTIME_ARTIFACTS_DIR`), and `CollectArtifacts`,
//! which reads it back for runtimed.
//!
//! The directory is `{work_root}/.artifacts/{run_uid}`: beside the task's
//! working directory or the session's workspace (`{work_root}/{run_uid}`),
//! never inside it, and under a name no Run UID (`[0-9a-f-]`) can take. It is
//! created empty, mode 0700, for each attempt and removed with the task or
//! the session.
//!
//! The walk trusts nothing beneath the work root: every directory is opened
//! relative to its parent's descriptor with `O_NOFOLLOW | O_DIRECTORY`
//! (`openat`), every entry is examined with `lstat` semantics (`fstatat`
//! with `AT_SYMLINK_NOFOLLOW`) and every file is opened with `O_NOFOLLOW`
//! and judged by the `fstat` of its descriptor. A directory or file swapped
//! for a symbolic link between examining and opening it is refused, never
//! followed, so nothing outside the artifacts directory is ever read.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, Read};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use kruntimes_proto::api::artifact_name;
use kruntimes_proto::runtime::v1 as pb;
use kruntimes_proto::runtime::{ARTIFACT_CHUNK_BYTES, DEFAULT_MAX_ARTIFACT_FILES};
use nix::dir::Dir;
use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, openat};
use nix::sys::stat::{Mode, SFlag, fstatat};

/// The directory under the work root that holds every Run's artifacts
/// directory. It starts with a `.`, which no Run UID does.
pub const PARENT: &str = ".artifacts";
/// Directories a walk enters at most.
pub const MAX_DIRECTORIES: u64 = 10_000;

/// How directories beneath the artifacts directory are opened.
fn dir_flags() -> OFlag {
    OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC
}

/// How files are opened: never through a link, never blocking (a FIFO
/// swapped in is then refused by its `fstat`), never as a terminal.
fn file_flags() -> OFlag {
    OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK | OFlag::O_NOCTTY
}

/// Where a Run's artifacts directory is: `.artifacts/{run_uid}` beneath
/// the server's (canonical) work root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    work_root: PathBuf,
    run_uid: String,
}

impl Location {
    /// The artifacts directory of `run_uid` (a validated Run UID) beneath
    /// `work_root` (canonical).
    pub fn new(work_root: &Path, run_uid: &str) -> Self {
        Self {
            work_root: work_root.to_path_buf(),
            run_uid: run_uid.to_owned(),
        }
    }

    /// The directory's absolute path, as the task's environment names it.
    pub fn path(&self) -> PathBuf {
        self.work_root.join(PARENT).join(&self.run_uid)
    }

    /// Creates the directory, empty and mode 0700 (whatever was there
    /// before is removed), and its parent if needed; its path.
    pub fn create(&self) -> io::Result<PathBuf> {
        let parent = self.work_root.join(PARENT);
        let failed = |what: &str, p: &Path, e: io::Error| {
            io::Error::new(e.kind(), format!("{what} {}: {e}", p.display()))
        };
        match std::fs::symlink_metadata(&parent) {
            Ok(md) if md.is_dir() => {}
            // Something else took its name (a task can write the work
            // root): it goes, the directory comes back.
            Ok(_) => {
                std::fs::remove_file(&parent)
                    .map_err(|e| failed("remove what is not a directory at", &parent, e))?;
                make_dir(&parent).map_err(|e| failed("create", &parent, e))?;
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                make_dir(&parent).map_err(|e| failed("create", &parent, e))?;
            }
            Err(e) => return Err(failed("examine", &parent, e)),
        }
        std::fs::set_permissions(&parent, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| failed("set the mode of", &parent, e))?;
        let dir = self.path();
        self.remove()?;
        make_dir(&dir).map_err(|e| failed("create the artifacts directory", &dir, e))?;
        // The mode the builder asked for, whatever the umask took away.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| failed("set the mode of", &dir, e))?;
        Ok(dir)
    }

    /// Empties the directory (a function's, between two invocations): it
    /// is made again, empty, mode 0700, as [`Self::create`] makes it. What
    /// user code put in its place — a symbolic link to its working
    /// directory or to `/`, a file — is removed, never followed: the
    /// removal examines each path without following it (`lstat`) and
    /// `std::fs::remove_dir_all` never follows a link, at the top or below.
    pub fn clear(&self) -> io::Result<()> {
        self.create().map(drop)
    }

    /// Whether the directory holds anything — a file, an empty directory —
    /// or something else took its place (a link, a file, nothing): the
    /// directory then needs collecting or remaking. Never follows a link.
    pub fn holds_anything(&self) -> bool {
        let dir = self.path();
        match std::fs::symlink_metadata(&dir) {
            Ok(md) if md.is_dir() => {}
            _ => return true,
        }
        match std::fs::read_dir(&dir) {
            Ok(mut entries) => entries.next().is_some(),
            Err(_) => true,
        }
    }

    /// Removes the directory and everything in it; nothing there is fine.
    /// A parent that is no longer a directory is left alone: the Run's
    /// directory cannot be beneath it.
    pub fn remove(&self) -> io::Result<()> {
        let parent = self.work_root.join(PARENT);
        match std::fs::symlink_metadata(&parent) {
            Ok(md) if md.is_dir() => {}
            _ => return Ok(()),
        }
        let dir = self.path();
        let removed = match std::fs::symlink_metadata(&dir) {
            Ok(md) if md.is_dir() => std::fs::remove_dir_all(&dir),
            Ok(_) => std::fs::remove_file(&dir),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
        };
        removed.map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("remove the artifacts directory {}: {e}", dir.display()),
            )
        })
    }
}

fn make_dir(path: &Path) -> io::Result<()> {
    std::fs::DirBuilder::new().mode(0o700).create(path)
}

/// The bounds of one collection, from its request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Files at most.
    pub max_files: u64,
    /// Bytes per file at most (`None`: no bound).
    pub max_file_bytes: Option<u64>,
    /// Bytes of all files at most (`None`: no bound).
    pub max_total_bytes: Option<u64>,
}

impl From<&pb::CollectArtifactsRequest> for Bounds {
    fn from(r: &pb::CollectArtifactsRequest) -> Self {
        Self {
            max_files: u64::from(match r.max_files {
                0 => DEFAULT_MAX_ARTIFACT_FILES,
                n => n,
            }),
            max_file_bytes: (r.max_file_bytes > 0).then_some(r.max_file_bytes),
            max_total_bytes: (r.max_total_bytes > 0).then_some(r.max_total_bytes),
        }
    }
}

/// What a collection sent, for the server's log (never a name or a byte
/// of content).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Summary {
    /// Files sent whole or in part.
    pub files: u64,
    /// Content bytes sent.
    pub bytes: u64,
    /// The walk ended with an `ArtifactRefused`.
    pub refused: bool,
    /// The receiver went away before the end.
    pub abandoned: bool,
}

/// Why a walk stopped early.
enum Stop {
    /// An entry cannot be an artifact, or a bound was crossed.
    Refused(pb::ArtifactRefused),
    /// The receiver went away.
    Gone,
    /// The server's own failure.
    Failed(io::Error),
}

fn refused(name: impl Into<String>, reason: impl Into<String>) -> Stop {
    Stop::Refused(pb::ArtifactRefused {
        name: name.into(),
        reason: reason.into(),
    })
}

/// Walks the artifacts directory at `at` and hands each chunk of the
/// stream to `emit` (which answers `false` once its receiver is gone: the
/// walk stops there), depth first in byte order of names, as
/// `CollectArtifacts` documents. Blocking: run it on a blocking thread.
/// An error is the server's own failure (the work root cannot be opened);
/// everything the task left that cannot be an artifact is an
/// `ArtifactRefused`, the stream's last chunk.
pub fn collect(
    at: &Location,
    bounds: Bounds,
    emit: impl FnMut(pb::ArtifactChunk) -> bool,
) -> io::Result<Summary> {
    let mut walk = Walk {
        bounds,
        emit,
        summary: Summary::default(),
        files: 0,
        total: 0,
        entries: 0,
        directories: 0,
    };
    let ended = match open_root(at) {
        Ok(Some(mut root)) => walk.directory(&mut root, None),
        Ok(None) => Ok(()),
        Err(stop) => Err(stop),
    };
    match ended {
        Ok(()) => {}
        Err(Stop::Refused(r)) => {
            walk.summary.refused = true;
            let sent = (walk.emit)(pb::ArtifactChunk {
                part: Some(pb::artifact_chunk::Part::Refused(r)),
            });
            walk.summary.abandoned = !sent;
        }
        Err(Stop::Gone) => walk.summary.abandoned = true,
        Err(Stop::Failed(e)) => return Err(e),
    }
    Ok(walk.summary)
}

/// Opens the work root (the server's own), then `.artifacts` and the Run's
/// directory beneath it without following a link; `None` when either is
/// missing.
fn open_root(at: &Location) -> Result<Option<Dir>, Stop> {
    let base = Dir::open(
        &at.work_root,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| {
        Stop::Failed(io::Error::new(
            io::Error::from(e).kind(),
            format!("open the work root {}: {e}", at.work_root.display()),
        ))
    })?;
    let mut dir = base;
    for component in [PARENT, at.run_uid.as_str()] {
        dir = match Dir::openat(&dir, component, dir_flags(), Mode::empty()) {
            Ok(d) => d,
            Err(Errno::ENOENT) => return Ok(None),
            Err(e @ (Errno::ELOOP | Errno::ENOTDIR)) => {
                return Err(refused(
                    "",
                    format!(
                        "the artifacts directory ({}) was replaced by something that is not a directory: {e}",
                        at.path().display()
                    ),
                ));
            }
            Err(e) => {
                return Err(Stop::Failed(io::Error::new(
                    io::Error::from(e).kind(),
                    format!("open {}: {e}", at.work_root.join(component).display()),
                )));
            }
        };
    }
    Ok(Some(dir))
}

/// The kind of a directory entry, from its mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    File,
    Directory,
    Symlink,
    Fifo,
    Socket,
    CharDevice,
    BlockDevice,
    Other,
}

impl Kind {
    fn of_mode(mode: nix::libc::mode_t) -> Self {
        let format = SFlag::from_bits_truncate(mode) & SFlag::S_IFMT;
        if format == SFlag::S_IFREG {
            Self::File
        } else if format == SFlag::S_IFDIR {
            Self::Directory
        } else if format == SFlag::S_IFLNK {
            Self::Symlink
        } else if format == SFlag::S_IFIFO {
            Self::Fifo
        } else if format == SFlag::S_IFSOCK {
            Self::Socket
        } else if format == SFlag::S_IFCHR {
            Self::CharDevice
        } else if format == SFlag::S_IFBLK {
            Self::BlockDevice
        } else {
            Self::Other
        }
    }

    fn of_file_type(t: std::fs::FileType) -> Self {
        use std::os::unix::fs::FileTypeExt;
        if t.is_file() {
            Self::File
        } else if t.is_dir() {
            Self::Directory
        } else if t.is_symlink() {
            Self::Symlink
        } else if t.is_fifo() {
            Self::Fifo
        } else if t.is_socket() {
            Self::Socket
        } else if t.is_char_device() {
            Self::CharDevice
        } else if t.is_block_device() {
            Self::BlockDevice
        } else {
            Self::Other
        }
    }

    /// What it is, for a refusal.
    fn describe(self) -> &'static str {
        match self {
            Self::File => "a regular file",
            Self::Directory => "a directory",
            Self::Symlink => "a symbolic link",
            Self::Fifo => "a FIFO (named pipe)",
            Self::Socket => "a Unix socket",
            Self::CharDevice => "a character device",
            Self::BlockDevice => "a block device",
            Self::Other => "neither a regular file nor a directory",
        }
    }
}

/// `prefix/name`, or `name` at the top.
fn join(prefix: Option<&str>, name: &str) -> String {
    match prefix {
        Some(p) => format!("{p}/{name}"),
        None => name.to_owned(),
    }
}

/// One walk in progress.
struct Walk<F> {
    bounds: Bounds,
    emit: F,
    summary: Summary,
    /// Regular files met.
    files: u64,
    /// Bytes of the files accepted, by their sizes.
    total: u64,
    /// Directory entries read (every kind).
    entries: u64,
    /// Directories entered, the artifacts directory aside.
    directories: u64,
}

impl<F: FnMut(pb::ArtifactChunk) -> bool> Walk<F> {
    fn send(&mut self, part: pb::artifact_chunk::Part) -> Result<(), Stop> {
        if (self.emit)(pb::ArtifactChunk { part: Some(part) }) {
            Ok(())
        } else {
            Err(Stop::Gone)
        }
    }

    /// Entries read at most: every file and directory the bounds allow,
    /// and one more. What is held of the names at once stays bounded by it.
    fn max_entries(&self) -> u64 {
        self.bounds
            .max_files
            .saturating_add(MAX_DIRECTORIES)
            .saturating_add(1)
    }

    /// Walks `dir`, named `name` beneath the artifacts directory (`None`:
    /// the artifacts directory itself).
    fn directory(&mut self, dir: &mut Dir, name: Option<&str>) -> Result<(), Stop> {
        let mut names: Vec<OsString> = Vec::new();
        for entry in dir.iter() {
            let entry = entry.map_err(|e| {
                refused(
                    name.unwrap_or_default(),
                    format!("the directory cannot be read: {e}"),
                )
            })?;
            let n = entry.file_name().to_bytes();
            if n == b"." || n == b".." {
                continue;
            }
            self.entries += 1;
            if self.entries > self.max_entries() {
                return Err(refused(
                    "",
                    format!(
                        "more than {} entries (at most {} files and {MAX_DIRECTORIES} directories)",
                        self.max_entries() - 1,
                        self.bounds.max_files
                    ),
                ));
            }
            names.push(OsStr::from_bytes(n).to_os_string());
        }
        if names.is_empty() {
            // Empty directories are no artifacts, whatever their names.
            return Ok(());
        }
        // Every name beneath one that is not an artifact's is not one
        // either (it is as long, as deep, has the same characters).
        if let Some(name) = name
            && let Some(why) = artifact_name(name)
        {
            return Err(refused(name, why));
        }
        // Byte order: `OsString`s compare as their bytes on Unix.
        names.sort_unstable();
        for entry in names {
            self.entry(dir, name, &entry)?;
        }
        Ok(())
    }

    /// One entry of `dir` (named `prefix`).
    fn entry(&mut self, dir: &Dir, prefix: Option<&str>, entry: &OsStr) -> Result<(), Stop> {
        let Some(utf8) = entry.to_str() else {
            return Err(refused(
                join(prefix, &entry.to_string_lossy()),
                "the name is not UTF-8",
            ));
        };
        let name = join(prefix, utf8);
        let st = match fstatat(dir, entry, AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            // Gone since the listing: nothing to collect.
            Err(Errno::ENOENT) => return Ok(()),
            Err(e) => return Err(refused(name, format!("it cannot be examined: {e}"))),
        };
        match Kind::of_mode(st.st_mode) {
            Kind::Directory => {
                self.directories += 1;
                if self.directories > MAX_DIRECTORIES {
                    return Err(refused(
                        "",
                        format!("more than {MAX_DIRECTORIES} directories"),
                    ));
                }
                let mut sub = match Dir::openat(dir, entry, dir_flags(), Mode::empty()) {
                    Ok(d) => d,
                    Err(Errno::ENOENT) => return Ok(()),
                    Err(Errno::ELOOP) => {
                        return Err(refused(
                            name,
                            "it changed while it was read: the directory became a symbolic link",
                        ));
                    }
                    Err(Errno::ENOTDIR) => {
                        return Err(refused(
                            name,
                            "it changed while it was read: the directory became something else",
                        ));
                    }
                    Err(e) => {
                        return Err(refused(
                            name,
                            format!("the directory cannot be opened: {e}"),
                        ));
                    }
                };
                self.directory(&mut sub, Some(&name))
            }
            Kind::File => self.file(dir, entry, &name),
            Kind::Symlink => {
                let reason = match nix::fcntl::readlinkat(dir, entry) {
                    Ok(target) => format!(
                        "it is a symbolic link (to {}); links are not followed",
                        target.to_string_lossy()
                    ),
                    Err(_) => "it is a symbolic link; links are not followed".to_owned(),
                };
                Err(refused(name, reason))
            }
            other => Err(refused(
                name,
                format!(
                    "it is {}, not a regular file or directory",
                    other.describe()
                ),
            )),
        }
    }

    /// A regular file of `dir`: its header, then its content.
    fn file(&mut self, dir: &Dir, entry: &OsStr, name: &str) -> Result<(), Stop> {
        self.files += 1;
        if self.files > self.bounds.max_files {
            return Err(refused(
                "",
                format!("more than {} files", self.bounds.max_files),
            ));
        }
        if let Some(why) = artifact_name(name) {
            return Err(refused(name, why));
        }
        let fd = match openat(dir, entry, file_flags(), Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::ENOENT) => {
                self.files -= 1;
                return Ok(());
            }
            Err(Errno::ELOOP) => {
                return Err(refused(
                    name,
                    "it changed while it was read: the file became a symbolic link",
                ));
            }
            Err(e) => return Err(refused(name, format!("it cannot be opened: {e}"))),
        };
        let mut file = File::from(fd);
        // What the descriptor holds is what counts, not what was examined.
        let md = file
            .metadata()
            .map_err(|e| refused(name, format!("it cannot be examined: {e}")))?;
        let kind = Kind::of_file_type(md.file_type());
        if kind != Kind::File {
            return Err(refused(
                name,
                format!(
                    "it changed while it was read: it became {}",
                    kind.describe()
                ),
            ));
        }
        if md.nlink() > 1 {
            return Err(refused(
                name,
                format!("it has {} hard links; an artifact has one", md.nlink()),
            ));
        }
        let size = md.len();
        if let Some(max) = self.bounds.max_file_bytes
            && size > max
        {
            return Err(refused(
                name,
                format!("it is {size} bytes, more than the {max} bytes a file may have"),
            ));
        }
        let total = self.total.saturating_add(size);
        if let Some(max) = self.bounds.max_total_bytes
            && total > max
        {
            return Err(refused(
                name,
                format!(
                    "with it the files add up to {total} bytes, more than the {max} bytes allowed"
                ),
            ));
        }
        self.total = total;
        self.summary.files += 1;
        self.send(pb::artifact_chunk::Part::File(pb::ArtifactFile {
            name: name.to_owned(),
            size,
        }))?;
        let mut left = size;
        while left > 0 {
            let want =
                usize::try_from(left).map_or(ARTIFACT_CHUNK_BYTES, |l| l.min(ARTIFACT_CHUNK_BYTES));
            let mut buf = vec![0u8; want];
            let got = read_full(&mut file, &mut buf)
                .map_err(|e| refused(name, format!("it cannot be read: {e}")))?;
            if got > 0 {
                buf.truncate(got);
                left -= got as u64;
                self.summary.bytes += got as u64;
                self.send(pb::artifact_chunk::Part::Data(buf))?;
            }
            if got < want {
                return Err(refused(
                    name,
                    format!(
                        "it changed while it was read: it ended after {} of its {size} bytes",
                        size - left
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// Reads until `buf` is full or the file ends; the bytes read.
fn read_full(file: &mut File, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match file.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

#[cfg(test)]
mod tests;
