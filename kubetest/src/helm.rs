//! helm for the chart tests: the binary `kubetest/helm/build.sh` builds from
//! the Go module proxy (cached by version), and the chart's renders parsed
//! into objects, so tests assert on what the API server would receive rather
//! than on text.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use anyhow::{Context, bail};
use serde::Deserialize;

/// The helm binary of this checkout's pinned version, built by
/// `kubetest/helm/build.sh` when it is missing (about two minutes on cold Go
/// caches; the script serializes concurrent builds). The script owns the
/// version pin and prints the binary's path last.
pub fn helm_binary() -> anyhow::Result<PathBuf> {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    if let Some(bin) = BINARY.get() {
        return Ok(bin.clone());
    }
    let bin = kruntimes_testkit::tools::go_tool("kubetest/helm/build.sh", None)?;
    Ok(BINARY.get_or_init(|| bin).clone())
}

/// The chart of this checkout, `charts/kruntimes`.
pub fn chart_dir() -> PathBuf {
    kruntimes_testkit::checkout().join("charts/kruntimes")
}

/// The chart's `ci/*-values.yaml` files, sorted by name.
pub fn ci_values_files() -> anyhow::Result<Vec<PathBuf>> {
    let dir = chart_dir().join("ci");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .with_context(|| format!("read {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.ends_with("-values.yaml"))
        })
        .collect();
    files.sort();
    Ok(files)
}

/// helm with a home of its own (cache, configuration, repositories), so a
/// test neither reads nor writes the user's.
pub struct Helm {
    bin: PathBuf,
    home: tempfile::TempDir,
}

impl Helm {
    /// Builds helm if needed ([`helm_binary`]).
    pub fn new() -> anyhow::Result<Self> {
        Ok(Self {
            bin: helm_binary()?,
            home: tempfile::tempdir()?,
        })
    }

    /// A `helm` command with this instance's home.
    pub fn command(&self) -> Command {
        let mut cmd = Command::new(&self.bin);
        let home = self.home.path();
        cmd.env("HELM_CACHE_HOME", home.join("cache"))
            .env("HELM_CONFIG_HOME", home.join("config"))
            .env("HELM_DATA_HOME", home.join("data"))
            .env_remove("KUBECONFIG");
        cmd
    }

    /// Runs `helm ARGS`, returning its stdout; a failure carries its stderr.
    pub fn run(&self, args: &[&str]) -> anyhow::Result<String> {
        let out = self
            .command()
            .args(args)
            .output()
            .with_context(|| format!("run helm {args:?}"))?;
        if !out.status.success() {
            bail!(
                "helm {args:?} failed ({}):\n{}{}",
                out.status,
                String::from_utf8_lossy(&out.stderr),
                String::from_utf8_lossy(&out.stdout)
            );
        }
        Ok(String::from_utf8(out.stdout)?)
    }

    /// `helm lint --strict` of the chart with `values` (none: the defaults).
    pub fn lint(&self, values: Option<&Path>) -> anyhow::Result<String> {
        let chart = chart_dir();
        let mut args = vec!["lint", "--strict", path_str(&chart)?];
        if let Some(v) = values {
            args.extend(["--values", path_str(v)?]);
        }
        self.run(&args)
    }

    /// `helm template RELEASE` of the chart into `namespace`, with values
    /// files and further arguments (`--set …`), parsed into one JSON value
    /// per object (empty documents dropped). The CRDs of `crds/` are not
    /// rendered (helm installs them apart, before the templates).
    pub fn template(
        &self,
        release: &str,
        namespace: &str,
        values: &[&Path],
        extra: &[&str],
    ) -> anyhow::Result<Vec<serde_json::Value>> {
        let chart = chart_dir();
        let mut args = vec![
            "template",
            release,
            path_str(&chart)?,
            "--namespace",
            namespace,
        ];
        for v in values {
            args.extend(["--values", path_str(v)?]);
        }
        args.extend_from_slice(extra);
        parse_manifests(&self.run(&args)?)
    }
}

fn path_str(p: &Path) -> anyhow::Result<&str> {
    p.to_str()
        .with_context(|| format!("{} is not UTF-8", p.display()))
}

/// Parses a multi-document YAML stream into one JSON value per non-empty
/// document.
pub fn parse_manifests(yaml: &str) -> anyhow::Result<Vec<serde_json::Value>> {
    let mut objects = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(yaml) {
        let value = serde_json::Value::deserialize(doc).context("parse a rendered document")?;
        if !value.is_null() {
            objects.push(value);
        }
    }
    Ok(objects)
}
