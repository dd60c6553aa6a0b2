//! Released Go commands the tests run (helm, versitygw, h2spec): each built
//! once per version by its script on `scripts/go-tool.sh`, which prints the
//! binary's path last.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use anyhow::{Context, bail};

/// The binary `script` (a path in this checkout) builds, or the one the
/// environment variable `variable` names when it is set. The first call
/// may take minutes (a `go install` on cold caches); the script serializes
/// concurrent builds. Blocks: from async code, call it in `spawn_blocking`.
pub fn go_tool(script: &str, variable: Option<&str>) -> anyhow::Result<PathBuf> {
    if let Some(path) = variable.and_then(std::env::var_os) {
        return Ok(PathBuf::from(path));
    }
    let script = crate::checkout().join(script);
    let out = Command::new("bash")
        .arg(&script)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("run bash {}", script.display()))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    let instead = variable
        .map(|v| format!(" (or name a binary in {v})"))
        .unwrap_or_default();
    if !out.status.success() {
        let hint = if stderr.contains("go command is required") {
            "; it builds with `go install`, so Go must be on PATH"
        } else {
            ""
        };
        bail!(
            "{} failed ({}){hint}{instead}:\n{stderr}",
            script.display(),
            out.status
        );
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let path = stdout
        .lines()
        .last()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .with_context(|| format!("{} printed no binary path:\n{stderr}", script.display()))?;
    let path = PathBuf::from(path);
    if !path.is_file() {
        bail!(
            "{} printed {}, which is not a file",
            script.display(),
            path.display()
        );
    }
    Ok(path)
}

/// h2spec, the HTTP/2 conformance suite (`testkit/h2spec/build.sh`, or
/// `KRT_H2SPEC`).
pub async fn h2spec_binary() -> anyhow::Result<PathBuf> {
    tokio::task::spawn_blocking(|| go_tool("testkit/h2spec/build.sh", Some("KRT_H2SPEC")))
        .await
        .context("the h2spec build task")?
}
