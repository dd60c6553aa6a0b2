//! Workspace-relative paths, resolved beneath the workspace on the real file
//! system: the contract's lexical rule first (relative, no `..`), then every existing
//! component is resolved and must stay inside the workspace, so a symlink can
//! never lead an operation outside it.

use std::path::{Path, PathBuf};

use kruntimes_proto::runtime::path as lexical;

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

impl From<lexical::PathError> for PathError {
    fn from(e: lexical::PathError) -> Self {
        match e {
            lexical::PathError::Absolute => Self::Absolute,
            lexical::PathError::Traversal => Self::Traversal,
            lexical::PathError::Invalid => Self::Invalid,
        }
    }
}

/// The contract's lexical rule ([`lexical::normalize`]).
pub fn normalize(rel: &str) -> Result<PathBuf, PathError> {
    Ok(lexical::normalize(rel)?)
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
    fn the_contracts_lexical_rule_comes_first() {
        assert_eq!(normalize("../x"), Err(PathError::Traversal));
        assert_eq!(
            resolve(Path::new("/w"), "/etc", false),
            Err(PathError::Absolute)
        );
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
