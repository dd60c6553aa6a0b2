//! File operations beneath a session workspace. Every path goes through
//! [`super::path::resolve`].

use std::path::Path;

use base64::Engine as _;

use super::path::{PathError, resolve};

/// Largest file read when the request sets no bound.
pub const MAX_FILE_BYTES: usize = 32 * 1024 * 1024;

/// A failed file operation.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// The path is not acceptable (400).
    #[error(transparent)]
    Path(#[from] PathError),
    /// Not found (404).
    #[error("{0} not found")]
    NotFound(String),
    /// Over the size bound (413).
    #[error("{0} is larger than the read limit")]
    TooLarge(String),
    /// Wrong kind of file or other I/O failure.
    #[error("{0}")]
    Io(String),
}

fn io(path: &str, e: std::io::Error) -> FileError {
    if e.kind() == std::io::ErrorKind::NotFound {
        FileError::NotFound(path.to_owned())
    } else {
        FileError::Io(format!("{path}: {e}"))
    }
}

/// Writes (replaces) a file, creating its missing parent directories.
pub fn write(root: &Path, path: &str, content: &[u8]) -> Result<(), FileError> {
    let r = resolve(root, path, false)?;
    if r.path.is_dir() {
        return Err(FileError::Io(format!("{path} is a directory")));
    }
    if let Some(parent) = r.path.parent()
        && !parent.is_dir()
    {
        std::fs::create_dir_all(parent).map_err(|e| io(path, e))?;
        // Re-check: a component created concurrently could be a link.
        resolve(root, path, false)?;
    }
    std::fs::write(&r.path, content).map_err(|e| io(path, e))
}

/// Creates a directory and its missing parents.
pub fn mkdir(root: &Path, path: &str) -> Result<(), FileError> {
    let r = resolve(root, path, false)?;
    std::fs::create_dir_all(&r.path).map_err(|e| io(path, e))?;
    // Re-check: a component created concurrently could be a link.
    resolve(root, path, false)?;
    Ok(())
}

/// Deletes a file, a symlink (not its target) or a directory tree.
pub fn delete(root: &Path, path: &str) -> Result<(), FileError> {
    let r = resolve(root, path, false)?;
    let md = std::fs::symlink_metadata(&r.path).map_err(|e| io(path, e))?;
    if md.is_dir() {
        std::fs::remove_dir_all(&r.path)
    } else {
        std::fs::remove_file(&r.path)
    }
    .map_err(|e| io(path, e))
}

/// Renames within the workspace.
pub fn rename(root: &Path, from: &str, to: &str) -> Result<(), FileError> {
    let a = resolve(root, from, false)?;
    let b = resolve(root, to, false)?;
    std::fs::rename(&a.path, &b.path).map_err(|e| io(from, e))
}

/// Reads a whole file of at most `max` bytes.
pub fn read(root: &Path, path: &str, max: usize) -> Result<Vec<u8>, FileError> {
    let r = resolve(root, path, false)?;
    let md = std::fs::metadata(&r.path).map_err(|e| io(path, e))?;
    if !md.is_file() {
        return Err(FileError::Io(format!("{path} is not a file")));
    }
    if md.len() > max as u64 {
        return Err(FileError::TooLarge(path.to_owned()));
    }
    std::fs::read(&r.path).map_err(|e| io(path, e))
}

/// One listing entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// File name.
    pub name: String,
    /// `file`, `directory`, `symlink` or `other`.
    pub kind: String,
    /// Size in bytes (of the link itself for symlinks).
    pub size: u64,
}

/// A page of a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listing {
    /// Entries in UTF-8 byte order of their names.
    pub entries: Vec<Entry>,
    /// Token of the next page, when there is one.
    pub next_page_token: Option<String>,
}

/// Default and largest page sizes.
pub const DEFAULT_LIMIT: usize = 100;
/// Largest page.
pub const MAX_LIMIT: usize = 1000;

/// Lists a directory, `limit` entries after the page token.
pub fn list(
    root: &Path,
    path: &str,
    limit: Option<usize>,
    page_token: Option<&str>,
) -> Result<Listing, FileError> {
    let r = resolve(root, path, true)?;
    let after = match page_token.filter(|t| !t.is_empty()) {
        Some(t) => Some(
            base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(t)
                .ok()
                .and_then(|b| String::from_utf8(b).ok())
                .ok_or_else(|| FileError::Io("invalid pageToken".into()))?,
        ),
        None => None,
    };
    let limit = limit.unwrap_or(DEFAULT_LIMIT).clamp(1, MAX_LIMIT);
    let mut entries: Vec<Entry> = std::fs::read_dir(&r.path)
        .map_err(|e| io(path, e))?
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let md = e.path().symlink_metadata().ok()?;
            let kind = if md.file_type().is_symlink() {
                "symlink"
            } else if md.is_dir() {
                "directory"
            } else if md.is_file() {
                "file"
            } else {
                "other"
            };
            Some(Entry {
                name,
                kind: kind.into(),
                size: md.len(),
            })
        })
        .filter(|e| {
            after
                .as_ref()
                .is_none_or(|a| e.name.as_bytes() > a.as_bytes())
        })
        .collect();
    entries.sort_by(|a, b| a.name.as_bytes().cmp(b.name.as_bytes()));
    let more = entries.len() > limit;
    entries.truncate(limit);
    let next_page_token = more
        .then(|| {
            entries
                .last()
                .map(|e| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(e.name.as_bytes()))
        })
        .flatten();
    Ok(Listing {
        entries,
        next_page_token,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ws() -> (tempfile::TempDir, std::path::PathBuf) {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().canonicalize().unwrap();
        (d, root)
    }

    #[test]
    fn write_read_rename_delete_round_trip() {
        let (_d, root) = ws();
        mkdir(&root, "a/b").unwrap();
        write(&root, "a/b/f.txt", b"hello").unwrap();
        assert_eq!(read(&root, "a/b/f.txt", MAX_FILE_BYTES).unwrap(), b"hello");
        rename(&root, "a/b/f.txt", "a/g.txt").unwrap();
        assert!(matches!(
            read(&root, "a/b/f.txt", MAX_FILE_BYTES),
            Err(FileError::NotFound(_))
        ));
        assert_eq!(read(&root, "a/g.txt", MAX_FILE_BYTES).unwrap(), b"hello");
        delete(&root, "a").unwrap();
        assert!(!root.join("a").exists());
        assert!(matches!(delete(&root, "a"), Err(FileError::NotFound(_))));
    }

    #[test]
    fn writing_creates_missing_parents_but_never_through_a_link_or_a_file() {
        let (_d, root) = ws();
        write(&root, "fresh/a/b/c.txt", b"deep").unwrap();
        assert_eq!(
            read(&root, "fresh/a/b/c.txt", MAX_FILE_BYTES).unwrap(),
            b"deep"
        );
        let outside = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), root.join("out")).unwrap();
        assert!(write(&root, "out/new/x.txt", b"x").is_err());
        assert!(!outside.path().join("new").exists());
        write(&root, "plain", b"f").unwrap();
        assert!(matches!(
            write(&root, "plain/child.txt", b"x"),
            Err(FileError::Io(_))
        ));
        assert!(matches!(
            write(&root, "fresh", b"x"),
            Err(FileError::Io(m)) if m.contains("is a directory")
        ));
    }

    #[test]
    fn every_operation_refuses_escapes() {
        let (_d, root) = ws();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), b"s").unwrap();
        std::os::unix::fs::symlink(outside.path(), root.join("out")).unwrap();
        for p in ["../x", "/etc/passwd", "out/secret", "out", "a/../../x"] {
            assert!(write(&root, p, b"x").is_err(), "write {p}");
            assert!(mkdir(&root, p).is_err(), "mkdir {p}");
            assert!(read(&root, p, MAX_FILE_BYTES).is_err(), "read {p}");
            assert!(delete(&root, p).is_err(), "delete {p}");
            assert!(rename(&root, p, "ok").is_err(), "rename from {p}");
            assert!(list(&root, p, None, None).is_err(), "list {p}");
        }
        std::fs::write(root.join("ok"), b"x").unwrap();
        assert!(rename(&root, "ok", "out/stolen").is_err());
        assert!(!outside.path().join("stolen").exists());
        assert_eq!(std::fs::read(outside.path().join("secret")).unwrap(), b"s");
        assert!(matches!(
            delete(&root, ""),
            Err(FileError::Path(PathError::Root))
        ));
    }

    #[test]
    fn listing_pages_in_utf8_byte_order() {
        let (_d, root) = ws();
        for n in ["b", "a", "Z", "é", "c"] {
            write(&root, n, n.as_bytes()).unwrap();
        }
        mkdir(&root, "dir").unwrap();
        let first = list(&root, "", Some(2), None).unwrap();
        let names: Vec<_> = first.entries.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["Z", "a"]);
        let mut all: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        let mut token = first.next_page_token;
        while let Some(t) = token {
            let page = list(&root, ".", Some(2), Some(&t)).unwrap();
            all.extend(page.entries.iter().map(|e| e.name.clone()));
            token = page.next_page_token;
        }
        assert_eq!(all, ["Z", "a", "b", "c", "dir", "é"]);
        let dir = list(&root, "", None, None).unwrap();
        assert_eq!(
            dir.entries.iter().find(|e| e.name == "dir").unwrap().kind,
            "directory"
        );
        assert!(dir.next_page_token.is_none());
        assert!(list(&root, "", None, Some("***")).is_err());
    }
}
