//! Where the running test's checkout is.
//!
//! Read at run time, never with `env!("CARGO_MANIFEST_DIR")`: cargo hashes
//! a path package by its place in the workspace, so a target directory
//! shared between two checkouts (CI's clean clone and a developer's) keeps
//! a library or test built in one and runs it from the other, with the
//! first checkout's path compiled in: its scripts, charts and fixtures
//! would be read, or found missing once that checkout is gone.

use std::path::{Path, PathBuf};

/// The directory of the package whose test (or `cargo run` binary) is
/// running: cargo sets `CARGO_MANIFEST_DIR` when it runs one, too. Outside
/// cargo, the checkout this library was built in.
pub fn package_dir() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from)
}

/// The running test's checkout: the workspace root above
/// [`package_dir`] (the nearest directory with a `Cargo.lock`).
pub fn checkout() -> PathBuf {
    let package = package_dir();
    workspace_root(&package).unwrap_or(package)
}

fn workspace_root(dir: &Path) -> Option<PathBuf> {
    dir.ancestors()
        .find(|d| d.join("Cargo.lock").is_file())
        .map(Path::to_path_buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_checkout_is_the_nearest_directory_with_a_lockfile() {
        let dir = tempfile::tempdir().unwrap();
        let package = dir.path().join("ws/gateway");
        std::fs::create_dir_all(&package).unwrap();
        assert_eq!(workspace_root(&package), None);
        std::fs::write(dir.path().join("ws/Cargo.lock"), "").unwrap();
        assert_eq!(workspace_root(&package), Some(dir.path().join("ws")));
    }

    #[test]
    fn this_tests_checkout_holds_this_library() {
        assert!(checkout().join("testkit/src/paths.rs").is_file());
    }
}
