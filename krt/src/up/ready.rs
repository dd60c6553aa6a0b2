//! "kruntimes ready" means ready: before `krt up` says so, every Run it
//! started with is `Ready` and routed by the gateway (asked without running
//! anything), or has ended, or is named as still waiting after
//! [`WAIT`] — each with its reason. A manifest that could not be read is
//! named with its error. While it waits it shows which Runs it waits for:
//! a spinner line on a terminal, a plain line per change otherwise.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use kruntimes_client::embedded::{RunRow, RunsFile};

use crate::progress::Progress;

/// How long `krt up` waits for its first Runs before it says ready anyway,
/// naming those still waiting.
pub(super) const WAIT: Duration = Duration::from_secs(60);

/// Where the first Runs stand once `krt up` stops waiting for them.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Settled {
    /// Ready and routed.
    pub(super) ready: Vec<String>,
    /// Ended before they were Ready: name and why.
    pub(super) ended: Vec<(String, String)>,
    /// Still not Ready at the deadline: name and why.
    pub(super) waiting: Vec<(String, String)>,
    /// Manifests the store could not read: file and why.
    pub(super) skipped: Vec<(String, String)>,
}

impl Settled {
    /// The end of the ready line: what became of the first Runs.
    pub(super) fn summary(&self) -> String {
        let mut parts = Vec::new();
        if !self.ready.is_empty() {
            parts.push(format!(
                "{} Ready ({})",
                plural(self.ready.len()),
                self.ready.join(", ")
            ));
        }
        for (what, list) in [("ended", &self.ended), ("still waiting", &self.waiting)] {
            if !list.is_empty() {
                let named: Vec<String> =
                    list.iter().map(|(n, why)| format!("{n}: {why}")).collect();
                parts.push(format!(
                    "{} {what} ({})",
                    plural(list.len()),
                    named.join("; ")
                ));
            }
        }
        if !self.skipped.is_empty() {
            let named: Vec<String> = self
                .skipped
                .iter()
                .map(|(f, why)| format!("{f}: {why}"))
                .collect();
            let files = match self.skipped.len() {
                1 => "1 file".to_owned(),
                n => format!("{n} files"),
            };
            parts.push(format!("{files} skipped ({})", named.join("; ")));
        }
        if parts.is_empty() {
            "no Runs yet".into()
        } else {
            parts.join(", ")
        }
    }
}

fn plural(n: usize) -> String {
    if n == 1 {
        "1 Run".into()
    } else {
        format!("{n} Runs")
    }
}

/// A Run's status as a short reason: `Pending (NoIdlePod: 0/2 …)`.
fn why(r: &RunRow) -> String {
    match (r.reason.is_empty(), r.message.is_empty()) {
        (true, _) => r.phase.clone(),
        (false, true) => format!("{} ({})", r.phase, r.reason),
        (false, false) => format!("{} ({}: {})", r.phase, r.reason, r.message),
    }
}

fn terminal(phase: &str) -> bool {
    serde_json::from_value::<kruntimes_api::Phase>(serde_json::Value::String(phase.to_owned()))
        .is_ok_and(|p| p.is_terminal())
}

/// Waits for the Runs `keys` (`namespace/name`) of `runs.json` in
/// `state_dir`; `routed` asks the gateway whether it routes a Ready Run's
/// endpoint (and whether it is a session).
pub(super) async fn settle<F, Fut>(
    state_dir: &Path,
    keys: &BTreeSet<String>,
    within: Duration,
    routed: F,
) -> Settled
where
    F: Fn(String, bool) -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    let mut progress = Progress::new();
    let mut routable: BTreeSet<String> = BTreeSet::new();
    loop {
        let file: Option<RunsFile> = std::fs::read(state_dir.join("runs.json"))
            .ok()
            .and_then(|t| serde_json::from_slice(&t).ok());
        let mut settled = Settled::default();
        let rows: BTreeMap<String, RunRow> = match file {
            Some(f) => {
                settled.skipped = f
                    .errors
                    .iter()
                    .map(|e| {
                        let s = |k: &str| e[k].as_str().unwrap_or_default().to_owned();
                        (s("file"), s("message"))
                    })
                    .collect();
                f.runs
                    .into_iter()
                    .map(|r| (format!("{}/{}", r.namespace, r.name), r))
                    .collect()
            }
            None => BTreeMap::new(),
        };
        let mut pending = Vec::new();
        for key in keys {
            let name = key
                .split_once('/')
                .map_or(key.as_str(), |(_, n)| n)
                .to_owned();
            let Some(r) = rows.get(key) else {
                pending.push((name, "not yet read".to_owned()));
                continue;
            };
            if r.phase == "Ready" {
                if routable.contains(key) {
                    settled.ready.push(name);
                    continue;
                }
                if let Some(endpoint) = &r.endpoint
                    && routed(endpoint.clone(), r.mode == "session").await
                {
                    routable.insert(key.clone());
                    settled.ready.push(name);
                    continue;
                }
                pending.push((name, "Ready, not yet routed by the gateway".to_owned()));
            } else if terminal(&r.phase) {
                settled.ended.push((name, why(r)));
            } else {
                pending.push((name, why(r)));
            }
        }
        if pending.is_empty() || Instant::now() >= deadline {
            settled.waiting = pending;
            return settled;
        }
        let names: Vec<String> = pending.iter().map(|(n, w)| format!("{n} {w}")).collect();
        progress.show(format!(
            "waiting for {}: {}",
            plural(pending.len()),
            names.join("; ")
        ));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_names_every_run_and_why() {
        let s = Settled {
            ready: vec!["hello-python".into(), "sandbox".into()],
            ended: vec![(
                "broken".into(),
                "Failed (RegistrationFailed: SyntaxError)".into(),
            )],
            waiting: vec![],
            skipped: vec![("bad.yaml".into(), "line 3: mapping values".into())],
        };
        assert_eq!(
            s.summary(),
            "2 Runs Ready (hello-python, sandbox), 1 Run ended (broken: Failed (RegistrationFailed: SyntaxError)), 1 file skipped (bad.yaml: line 3: mapping values)"
        );
        assert_eq!(Settled::default().summary(), "no Runs yet");
        assert!(terminal("Failed") && terminal("Succeeded") && !terminal("Ready"));
    }
}
