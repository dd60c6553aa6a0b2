//! Where the test API server's binaries and the CRDs it installs live, and
//! the command that builds the binaries when they are missing.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, bail};

/// The binaries every [`crate::ApiServer`] runs.
const BINARIES: [&str; 2] = ["etcd", "kube-apiserver"];

/// Where the binaries of this checkout's pinned versions live (they are
/// built by `kubetest/envtest/build.sh`, which owns the version pins).
pub fn binaries_dir() -> anyhow::Result<PathBuf> {
    if let Ok(dir) = std::env::var("KRT_ENVTEST_DIR") {
        return Ok(PathBuf::from(dir));
    }
    let script = build_script();
    let out = Command::new("bash")
        .arg(&script)
        .arg("--print")
        .output()
        .with_context(|| format!("run {}", script.display()))?;
    if !out.status.success() {
        bail!("{} --print failed", script.display());
    }
    Ok(PathBuf::from(String::from_utf8(out.stdout)?.trim()))
}

/// [`binaries_dir`], failing with the build command when a binary is
/// missing: a test that needs the API server never passes without it.
pub(crate) fn require_binaries() -> anyhow::Result<PathBuf> {
    let bins = binaries_dir()?;
    for bin in BINARIES {
        if !bins.join(bin).is_file() {
            bail!(
                "{} is missing: build the test API server with `{}` (CI does this in .ci/run)",
                bins.join(bin).display(),
                build_script().display()
            );
        }
    }
    Ok(bins)
}

fn build_script() -> PathBuf {
    kruntimes_testkit::checkout().join("kubetest/envtest/build.sh")
}

/// The committed CRD manifests installed into every API server.
pub fn crd_dir() -> PathBuf {
    kruntimes_testkit::checkout().join("charts/kruntimes/crds")
}
