//! Workspace-relative paths as the contract takes them: relative, without
//! `..`, without NUL, at most 4096 bytes; `""` and `"."` name the workspace
//! itself. runtimed refuses a bad path before queueing it; the server
//! applies the same rule before resolving the path on its file system.
//! Pure.

use std::path::{Component, Path, PathBuf};

/// Why a path is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathError {
    /// Absolute path.
    Absolute,
    /// `..` component.
    Traversal,
    /// NUL byte, or over 4096 bytes.
    Invalid,
}

impl std::fmt::Display for PathError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Absolute => "path must be relative to the workspace",
            Self::Traversal => "path must not contain '..'",
            Self::Invalid => "path is empty, too long or contains NUL",
        })
    }
}

impl std::error::Error for PathError {}

/// Lexical normalization: strips `.` components, refuses `..` and absolute
/// paths. `""` and `"."` mean the workspace root (an empty path).
pub fn normalize(rel: &str) -> Result<PathBuf, PathError> {
    if rel.len() > 4096 || rel.contains('\0') {
        return Err(PathError::Invalid);
    }
    if rel.starts_with('/') {
        return Err(PathError::Absolute);
    }
    let mut out = PathBuf::new();
    for c in Path::new(rel).components() {
        match c {
            Component::Normal(s) => out.push(s),
            Component::CurDir => {}
            Component::ParentDir => return Err(PathError::Traversal),
            Component::RootDir | Component::Prefix(_) => return Err(PathError::Absolute),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_stay_relative_and_inside() {
        assert_eq!(normalize("a/./b").unwrap(), PathBuf::from("a/b"));
        assert_eq!(normalize("").unwrap(), PathBuf::new());
        assert_eq!(normalize(".").unwrap(), PathBuf::new());
        assert_eq!(normalize("/etc/passwd"), Err(PathError::Absolute));
        assert_eq!(normalize("../x"), Err(PathError::Traversal));
        assert_eq!(normalize("a/../../x"), Err(PathError::Traversal));
        assert_eq!(normalize("a\0b"), Err(PathError::Invalid));
        assert_eq!(normalize(&"a".repeat(5000)), Err(PathError::Invalid));
    }
}
