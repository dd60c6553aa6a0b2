//! The `krt` binary the end-to-end tests run, wherever those tests live.
//!
//! `krt`'s own tests have `CARGO_BIN_EXE_krt`; the gateway's and runtimed's
//! end-to-end tests live beside their crates, which cannot depend on a
//! binary. So the first stack a test process starts asks cargo for `krt`,
//! the way `cargo test --workspace` builds it (the workspace's features,
//! with the dev-dependencies', so the artifacts are the ones that command
//! made and the ask is a no-op after it): a test never runs a `krt` older
//! than the code it tests, whichever `cargo test` started it.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The variable that names a `krt` to test instead (a release build, say);
/// it is taken as it is, and nothing is built.
pub const KRT_VARIABLE: &str = "KRUNTIMES_TEST_KRT";

/// A test target of `krt`'s: building it builds `krt` (cargo builds a
/// package's binaries for its integration tests).
const KRT_TEST: &str = "cli";

/// The `krt` binary to test; panics, with cargo's answer, when it cannot be
/// built.
pub fn krt_binary() -> &'static Path {
    static KRT: OnceLock<PathBuf> = OnceLock::new();
    KRT.get_or_init(|| match std::env::var_os(KRT_VARIABLE) {
        Some(path) => PathBuf::from(path),
        None => build().unwrap_or_else(|why| panic!("{why} (or name a krt in {KRT_VARIABLE})")),
    })
}

fn build() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this test's path: {e}"))?;
    // target/<profile>/deps/<test>-<hash> → target/<profile>
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .ok_or_else(|| format!("{} is not in a cargo target directory", exe.display()))?;
    // The package of the running test (cargo sets this at run time too): its
    // checkout's workspace is the one to build, whichever checkout built
    // this library.
    let package = crate::package_dir();
    let args = cargo_args(profile_dir, &package)?;
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(&cargo);
    command.args(&args);
    for (name, value) in cargo_test_env(std::env::vars_os(), profile_dir.parent()) {
        match value {
            Some(value) => command.env(name, value),
            None => command.env_remove(name),
        };
    }
    let out = command
        .output()
        .map_err(|e| format!("cannot run {}: {e}", Path::new(&cargo).display()))?;
    if !out.status.success() {
        return Err(format!(
            "`cargo {}` failed to build krt:\n{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(profile_dir.join("krt"))
}

/// The variables `cargo test` set for this test process, to take back
/// (`None`) or restore before asking cargo again: build scripts that watch
/// one (ring's watches `CARGO_MANIFEST_DIR`) would otherwise rebuild, and
/// everything above them, on every switch between a test's cargo and the
/// user's.
fn cargo_test_env(
    vars: impl Iterator<Item = (OsString, OsString)>,
    target_dir: Option<&Path>,
) -> Vec<(OsString, Option<OsString>)> {
    const SET_FOR_TESTS: [&str; 7] = [
        "CARGO_MANIFEST_DIR",
        "CARGO_MANIFEST_PATH",
        "CARGO_CRATE_NAME",
        "CARGO_BIN_NAME",
        "CARGO_PRIMARY_PACKAGE",
        "CARGO_TARGET_TMPDIR",
        "CARGO_RUSTC_CURRENT_DIR",
    ];
    let mut changes = Vec::new();
    for (name, value) in vars {
        let Some(text) = name.to_str() else { continue };
        if SET_FOR_TESTS.contains(&text)
            || text.starts_with("CARGO_PKG_")
            || text.starts_with("CARGO_BIN_EXE_")
            || text == "OUT_DIR"
        {
            changes.push((name, None));
        } else if text == "LD_LIBRARY_PATH" {
            // cargo put the target's and the toolchain's library directories first.
            let kept: Vec<PathBuf> = std::env::split_paths(&value)
                .filter(|dir| {
                    !target_dir.is_some_and(|t| dir.starts_with(t))
                        && !dir.to_string_lossy().contains("/toolchains/")
                })
                .collect();
            let kept = (!kept.is_empty())
                .then(|| std::env::join_paths(kept).ok())
                .flatten();
            changes.push((name, kept));
        }
    }
    changes
}

/// The arguments that build `krt` into `profile_dir` (`<target>/<profile>`)
/// as `cargo test --workspace` does in the workspace of the package at
/// `package`.
fn cargo_args(profile_dir: &Path, package: &Path) -> Result<Vec<String>, String> {
    let profile = profile_dir
        .file_name()
        .and_then(|p| p.to_str())
        .ok_or_else(|| format!("{} names no profile", profile_dir.display()))?;
    let target_dir = profile_dir
        .parent()
        .ok_or_else(|| format!("{} has no target directory", profile_dir.display()))?;
    let mut args: Vec<String> = [
        "test",
        "--workspace",
        "--no-run",
        "--quiet",
        "--test",
        KRT_TEST,
    ]
    .map(String::from)
    .to_vec();
    // The profile flag the test was built with, read back from its directory.
    match profile {
        "debug" => {}
        "release" => args.push("--release".into()),
        other => args.extend(["--profile".into(), other.into()]),
    }
    args.extend([
        "--manifest-path".into(),
        package.join("Cargo.toml").to_string_lossy().into_owned(),
        "--target-dir".into(),
        target_dir.to_string_lossy().into_owned(),
    ]);
    Ok(args)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn value_of<'a>(args: &'a [String], flag: &str) -> &'a str {
        let at = args.iter().position(|a| a == flag).unwrap();
        &args[at + 1]
    }

    #[test]
    fn krt_is_built_as_the_workspace_tests_build_it_into_the_same_directory() {
        let args = cargo_args(Path::new("/t/target/debug"), Path::new("/w/gateway")).unwrap();
        assert_eq!(&args[..3], ["test", "--workspace", "--no-run"]);
        assert_eq!(value_of(&args, "--test"), KRT_TEST);
        assert!(!args.iter().any(|a| a == "--release" || a == "--profile"));
        assert_eq!(value_of(&args, "--target-dir"), "/t/target");
        // The running test's own checkout, whichever one built testkit.
        assert_eq!(value_of(&args, "--manifest-path"), "/w/gateway/Cargo.toml");
    }

    #[test]
    fn the_profile_follows_the_directory_the_test_runs_from() {
        let release = cargo_args(Path::new("/t/target/release"), Path::new("/w/krt")).unwrap();
        assert!(release.iter().any(|a| a == "--release"));
        let custom = cargo_args(Path::new("/t/target/fast"), Path::new("/w/krt")).unwrap();
        assert_eq!(value_of(&custom, "--profile"), "fast");
    }

    #[test]
    fn the_named_test_target_is_one_of_krts() {
        let krt_tests = crate::checkout().join("krt/tests");
        assert!(krt_tests.join(format!("{KRT_TEST}.rs")).is_file());
    }

    #[test]
    fn what_cargo_set_for_the_test_is_taken_back_and_the_rest_kept() {
        let vars = [
            ("CARGO_MANIFEST_DIR", "/w/gateway"),
            ("CARGO_PKG_NAME", "kruntimes-gateway"),
            ("CARGO_BIN_EXE_krt", "/w/target/debug/krt"),
            ("CARGO_HOME", "/root/.cargo"),
            ("CARGO_TARGET_DIR", "/t"),
            ("PATH", "/usr/bin"),
            (
                "LD_LIBRARY_PATH",
                "/t/debug/build/ring-1/out:/t/debug/deps:/r/toolchains/stable/lib:/opt/lib",
            ),
        ]
        .map(|(n, v)| (OsString::from(n), OsString::from(v)));
        let changes = cargo_test_env(vars.into_iter(), Some(Path::new("/t")));
        let change = |name: &str| {
            changes
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.clone())
        };
        assert_eq!(change("CARGO_MANIFEST_DIR"), Some(None));
        assert_eq!(change("CARGO_PKG_NAME"), Some(None));
        assert_eq!(change("CARGO_BIN_EXE_krt"), Some(None));
        assert_eq!(change("CARGO_HOME"), None, "the user's cargo settings stay");
        assert_eq!(change("CARGO_TARGET_DIR"), None);
        assert_eq!(change("PATH"), None);
        assert_eq!(change("LD_LIBRARY_PATH"), Some(Some("/opt/lib".into())));
    }

    #[test]
    fn a_library_path_cargo_made_alone_is_removed() {
        let vars = [("LD_LIBRARY_PATH", "/t/debug/deps:/r/toolchains/stable/lib")]
            .map(|(n, v)| (OsString::from(n), OsString::from(v)));
        let changes = cargo_test_env(vars.into_iter(), Some(Path::new("/t")));
        assert_eq!(changes, [(OsString::from("LD_LIBRARY_PATH"), None)]);
    }
}
