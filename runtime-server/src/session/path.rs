//! Workspace-relative paths, resolved beneath the workspace on the real file
//! system: lexical checks first (relative, no `..`), then every existing
//! component is resolved and must stay inside the workspace, so a symlink can
//! never lead an operation outside it.

use std::path::{Component, Path, PathBuf};

/// Why a path is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// Absolute path.
    #[error("path must be relative to the workspace")]
    Absolute,
    /// `..` or other escaping component.
    #[error("path must not contain '..'")]
    Traversal,
    /// Resolves (through a symlink) outside the workspace.
    #[error("path resolves outside the workspace")]
    Escapes,
    /// Empty, NUL, or over 4096 bytes.
    #[error("path is empty, too long or contains NUL")]
    Invalid,
    /// The workspace itself is not an allowed target here.
    #[error("the workspace root cannot be the target")]
    Root,
}

/// Lexical normalization: strips `.` components, refuses `..` and absolute
/// paths. `""` and `"."` mean the workspace root.
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

/// A path inside a workspace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// The canonical workspace root.
    pub root: PathBuf,
    /// The target (not itself canonicalized: it may not exist yet, and
    /// deleting or renaming a symlink acts on the link).
    pub path: PathBuf,
}

/// Resolves `rel` beneath `root` (which must be canonical). The parent of the
/// target must resolve inside the workspace; when the target exists and is a
/// symlink, its destination must too (`follow` reads through it).
pub fn resolve(root: &Path, rel: &str, allow_root: bool) -> Result<Resolved, PathError> {
    let norm = normalize(rel)?;
    if norm.as_os_str().is_empty() {
        return if allow_root {
            Ok(Resolved {
                root: root.to_path_buf(),
                path: root.to_path_buf(),
            })
        } else {
            Err(PathError::Root)
        };
    }
    let target = root.join(&norm);
    // The deepest existing ancestor of the parent must be inside the root.
    let parent = target.parent().unwrap_or(root);
    let mut probe = parent.to_path_buf();
    loop {
        match probe.canonicalize() {
            Ok(real) => {
                if !real.starts_with(root) {
                    return Err(PathError::Escapes);
                }
                break;
            }
            Err(_) if probe != root => {
                if !probe.pop() {
                    return Err(PathError::Escapes);
                }
            }
            Err(_) => return Err(PathError::Escapes),
        }
    }
    if let Ok(md) = std::fs::symlink_metadata(&target)
        && md.file_type().is_symlink()
    {
        match target.canonicalize() {
            Ok(real) if real.starts_with(root) => {}
            // Dangling or escaping links are refused outright.
            _ => return Err(PathError::Escapes),
        }
    }
    Ok(Resolved {
        root: root.to_path_buf(),
        path: target,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lexical_rules() {
        assert_eq!(normalize("a/./b").unwrap(), PathBuf::from("a/b"));
        assert_eq!(normalize("").unwrap(), PathBuf::new());
        assert_eq!(normalize("/etc/passwd"), Err(PathError::Absolute));
        assert_eq!(normalize("../x"), Err(PathError::Traversal));
        assert_eq!(normalize("a/../../x"), Err(PathError::Traversal));
        assert_eq!(normalize("a\0b"), Err(PathError::Invalid));
        assert_eq!(normalize(&"a".repeat(5000)), Err(PathError::Invalid));
    }

    #[test]
    fn symlinks_may_not_lead_outside() {
        let ws = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let root = ws.path().canonicalize().unwrap();
        std::fs::create_dir(root.join("dir")).unwrap();
        std::fs::write(root.join("dir/f"), b"x").unwrap();
        std::os::unix::fs::symlink(outside.path(), root.join("out")).unwrap();
        std::os::unix::fs::symlink(root.join("dir/f"), root.join("inside-link")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", root.join("passwd")).unwrap();

        assert!(resolve(&root, "dir/f", false).is_ok());
        assert!(resolve(&root, "dir/new/deeper", false).is_ok());
        assert!(resolve(&root, "inside-link", false).is_ok());
        assert_eq!(resolve(&root, "out/x", false), Err(PathError::Escapes));
        assert_eq!(resolve(&root, "out", false), Err(PathError::Escapes));
        assert_eq!(resolve(&root, "passwd", false), Err(PathError::Escapes));
        assert_eq!(
            resolve(&root, "out/new/deeper", false),
            Err(PathError::Escapes)
        );
        assert_eq!(resolve(&root, "", false), Err(PathError::Root));
        assert_eq!(resolve(&root, ".", true).unwrap().path, root);
    }
}
