//! Materializing a Run's inline source beneath its working directory.
//!
//! `source.inlinePath` is validated lexically (relative, no `..`, no empty or
//! `.` components) and then every existing ancestor is checked not to be a
//! symlink, so a pre-existing link cannot redirect the write outside.

use std::path::{Component, Path, PathBuf};

/// Why an inline path is refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SourcePathError {
    /// Empty path.
    #[error("inlinePath is empty")]
    Empty,
    /// Absolute path.
    #[error("inlinePath must be relative to the Run's working directory")]
    Absolute,
    /// `..`, `.` or other non-normal component.
    #[error("inlinePath must not contain '..' or '.' components")]
    Traversal,
    /// A path component resolves through a symlink.
    #[error("inlinePath resolves through a symlink")]
    Symlink,
    /// Longer than the bound.
    #[error("inlinePath is longer than 1024 bytes")]
    TooLong,
}

/// Validates an inline path lexically and returns it as a relative path.
pub fn validate_inline_path(path: &str) -> Result<PathBuf, SourcePathError> {
    if path.is_empty() {
        return Err(SourcePathError::Empty);
    }
    if path.len() > 1024 {
        return Err(SourcePathError::TooLong);
    }
    let p = Path::new(path);
    if p.is_absolute() || path.starts_with('/') || path.starts_with('\\') {
        return Err(SourcePathError::Absolute);
    }
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::Normal(seg) => out.push(seg),
            Component::RootDir | Component::Prefix(_) => return Err(SourcePathError::Absolute),
            Component::ParentDir | Component::CurDir => return Err(SourcePathError::Traversal),
        }
    }
    if out.as_os_str().is_empty() {
        return Err(SourcePathError::Empty);
    }
    Ok(out)
}

/// Errors of writing source files.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// The path is not acceptable.
    #[error(transparent)]
    Path(#[from] SourcePathError),
    /// I/O failed.
    #[error("write source: {0}")]
    Io(#[from] std::io::Error),
}

/// Writes `contents` at `rel` beneath `root`, refusing symlinked ancestors or
/// targets.
pub fn write_inline(root: &Path, rel: &str, contents: &[u8]) -> Result<PathBuf, WriteError> {
    let rel = validate_inline_path(rel)?;
    let mut cur = root.to_path_buf();
    let comps: Vec<_> = rel.components().collect();
    for (i, c) in comps.iter().enumerate() {
        cur.push(c);
        match std::fs::symlink_metadata(&cur) {
            Ok(md) if md.file_type().is_symlink() => return Err(SourcePathError::Symlink.into()),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if i + 1 < comps.len() {
                    std::fs::create_dir(&cur)?;
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
    std::fs::write(&cur, contents)?;
    Ok(cur)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths_are_accepted() {
        assert_eq!(
            validate_inline_path("main.py").unwrap(),
            PathBuf::from("main.py")
        );
        assert_eq!(
            validate_inline_path("pkg/mod.sh").unwrap(),
            PathBuf::from("pkg/mod.sh")
        );
    }

    #[test]
    fn escapes_are_rejected() {
        assert_eq!(validate_inline_path(""), Err(SourcePathError::Empty));
        assert_eq!(
            validate_inline_path("/etc/passwd"),
            Err(SourcePathError::Absolute)
        );
        assert_eq!(
            validate_inline_path("../x.py"),
            Err(SourcePathError::Traversal)
        );
        assert_eq!(
            validate_inline_path("a/../../x.py"),
            Err(SourcePathError::Traversal)
        );
        assert_eq!(
            validate_inline_path("./x.py"),
            Err(SourcePathError::Traversal)
        );
        assert_eq!(
            validate_inline_path(&"a".repeat(1025)),
            Err(SourcePathError::TooLong)
        );
    }

    #[test]
    fn writes_beneath_root_and_refuses_symlink_escapes() {
        let root = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let p = write_inline(root.path(), "dir/main.py", b"x = 1").unwrap();
        assert!(p.starts_with(root.path()));
        assert_eq!(std::fs::read(&p).unwrap(), b"x = 1");

        std::os::unix::fs::symlink(outside.path(), root.path().join("link")).unwrap();
        let err = write_inline(root.path(), "link/evil.py", b"boom").unwrap_err();
        assert!(matches!(err, WriteError::Path(SourcePathError::Symlink)));
        assert!(!outside.path().join("evil.py").exists());

        std::os::unix::fs::symlink(outside.path().join("t"), root.path().join("file.py")).unwrap();
        let err = write_inline(root.path(), "file.py", b"boom").unwrap_err();
        assert!(matches!(err, WriteError::Path(SourcePathError::Symlink)));
        assert!(!outside.path().join("t").exists());
    }
}
