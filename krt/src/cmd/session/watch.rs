//! `krt session watch NAME[:PATH]`: what changes beneath a session's
//! directory, one `CHANGE PATH` line each, until Ctrl-C.

use std::io::Write as _;

use anyhow::bail;
use kruntimes_client::gateway::{self, Gateway};
use serde_json::Value;

/// What one `files:watch` line says, for a terminal. Pure.
pub fn render(ev: &Value) -> Option<String> {
    match ev["type"].as_str()? {
        "file" => Some(format!(
            "{:<6} {}",
            ev["change"].as_str().unwrap_or("?"),
            ev["path"].as_str().unwrap_or("")
        )),
        "lost" => Some(format!(
            "[{} events lost: this reader fell behind]",
            ev["events"]
        )),
        _ => None,
    }
}

/// Follows the watch of `path` until the stream ends, fails or `stop`.
pub async fn watch(
    gw: &Gateway,
    url: &str,
    path: &str,
    recursive: bool,
    stop: impl std::future::Future<Output = ()>,
) -> anyhow::Result<()> {
    let resp = gw
        .http()
        .get(format!("{url}/files:watch"))
        .query(&[
            ("path", path),
            ("recursive", if recursive { "true" } else { "false" }),
        ])
        .send()
        .await?;
    let mut resp = gateway::check(resp).await?;
    tokio::pin!(stop);
    let mut buf = Vec::new();
    loop {
        let line = tokio::select! {
            l = super::next_line(&mut resp, &mut buf) => l?,
            () = &mut stop => return Ok(()),
        };
        let Some(line) = line else {
            bail!("the watch ended (the session closed?)");
        };
        let ev: Value = serde_json::from_slice(&line)?;
        if ev["type"] == "failed" {
            bail!("the watch failed: {}", ev["error"]);
        }
        if ev["type"] == "ready" {
            eprintln!(
                "watching {}{}",
                if path.is_empty() {
                    "the workspace"
                } else {
                    path
                },
                if recursive { " and beneath" } else { "" }
            );
        }
        if let Some(text) = render(&ev) {
            let mut out = std::io::stdout().lock();
            writeln!(out, "{text}")?;
            out.flush()?;
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn changes_print_as_change_and_path() {
        let f = json!({"type": "file", "change": "write", "path": "src/a.py"});
        assert_eq!(render(&f).unwrap(), "write  src/a.py");
        let lost = json!({"type": "lost", "events": 12});
        assert!(render(&lost).unwrap().contains("12 events lost"));
        assert_eq!(render(&json!({"type": "keepalive"})), None);
        assert_eq!(render(&json!({"type": "ready"})), None);
        assert_eq!(render(&json!({})), None);
    }
}
