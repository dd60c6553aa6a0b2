//! Task Runs on `krt up` as a user drives them: created by the library
//! `krt apply` calls (one manifest per Run in the stack's runs directory,
//! all N documents in one apply), followed in `runs.json` as `krt run` and
//! `krt wait` follow them — except that the file is read when it changes
//! (inotify) instead of every 50 ms, so what is measured is the stack,
//! not a poll period.
//!
//! A task counts from the moment the apply began (one apply creates every
//! task of a burst). Every `runs.json` the control plane writes replaces
//! the last (write, then rename): a version counts as written when the
//! rename was notified (its modification time is no finer than the
//! kernel's tick, 4 ms here), and a version the reader did not get to
//! before the next replaced it is never seen, its changes counting from
//! the next one's time. The reader waits four times as long as its last
//! read took before it reads again, so it takes at most a fifth of a core
//! from the stack, whatever the file's size (a thousand Runs make it
//! ~0.6 MB).

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use kruntimes_client::embedded::{Embedded, RunRow, RunsFile};
use kruntimes_testkit::{Options, Stack};
use serde_json::json;
use tokio::sync::mpsc;

use super::cpu::{self, Usage};
use super::timeline::{self, SCRIPT, Seen};

/// The namespace the tasks are created in.
const NAMESPACE: &str = "default";
/// Phases with an owner.
const OWNED: [&str; 8] = [
    "Scheduled",
    "Running",
    "Ready",
    "Finalizing",
    "Succeeded",
    "Failed",
    "Timeout",
    "Cancelled",
];
/// Phases that end a Run.
const TERMINAL: [&str; 4] = ["Succeeded", "Failed", "Timeout", "Cancelled"];

/// One `runs.json` as the reader got it.
struct Version {
    /// When the control plane wrote it: the last notification before the
    /// read, or its modification time if that is later.
    written: f64,
    /// When the reader had parsed it.
    seen: f64,
    runs: Vec<RunRow>,
    /// runtimed instances it lists.
    instances: usize,
}

/// What a burst saw.
pub struct Followed {
    /// Every task's timeline.
    pub seen: Vec<Seen>,
    /// The most runtimed instances listed while it ran.
    pub instances: usize,
}

/// A `krt up` stack with `krt up`'s defaults (two runtimed at first, one
/// kept free, up to 16, capacity 8 each) and a reader of its `runs.json`.
pub struct Local {
    stack: Stack,
    client: Arc<Embedded>,
    versions: mpsc::UnboundedReceiver<Version>,
    /// Dropping it ends the reader.
    _watcher: notify::RecommendedWatcher,
}

/// A task Run as `krt run --runtime python --inline SCRIPT` creates it.
pub fn task_doc(name: &str) -> serde_json::Value {
    json!({
        "apiVersion": "kruntimes.io/v1alpha1",
        "kind": "Run",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"runtime": "python", "source": {"inline": SCRIPT}, "mode": {"task": {}}},
    })
}

impl Local {
    /// Starts `krt` up and the reader of its `runs.json`.
    pub async fn start(krt: &Path) -> anyhow::Result<Self> {
        let krt = krt.to_path_buf();
        let stack = tokio::task::spawn_blocking(move || {
            Stack::start(
                &krt,
                Options {
                    env: Vec::new(),
                    runtimed: 2,
                    max_runtimed: Some(16),
                    runs: Vec::new(),
                    extra_args: Vec::new(),
                },
            )
        })
        .await??;
        let client = Arc::new(Embedded::open(&kruntimes_client::Selector {
            state_dir: stack.state_dir(),
            ..Default::default()
        })?);
        let (watcher, versions) = read_on_change(stack.state_dir().join("runs.json"))?;
        Ok(Self {
            stack,
            client,
            versions,
            _watcher: watcher,
        })
    }

    /// The stack.
    /// The CPU used so far by each component of the stack.
    pub fn cpu(&self) -> anyhow::Result<Usage> {
        let children = self
            .stack
            .processes()?
            .into_iter()
            .filter_map(|(name, p)| Some((name, u32::try_from(p["pid"].as_u64()?).ok()?)))
            .collect();
        Ok(cpu::sample(Some(self.stack.up_pid()), &children))
    }

    /// Creates the task Runs `names` in one apply and follows them until
    /// each has ended or `within` has passed.
    pub async fn burst(&mut self, names: &[String], within: Duration) -> anyhow::Result<Followed> {
        while self.versions.try_recv().is_ok() {}
        let docs = names.iter().map(|n| task_doc(n)).collect();
        let client = self.client.clone();
        let began = timeline::now();
        tokio::task::spawn_blocking(move || client.apply(docs)).await??;
        let mut pending: HashMap<&str, Seen> = names
            .iter()
            .map(|n| (n.as_str(), Seen::created_at(began)))
            .collect();
        let mut done = Vec::with_capacity(names.len());
        let mut instances = 0;
        let deadline = Instant::now() + within;
        while !pending.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            let v = match tokio::time::timeout(left, self.versions.recv()).await {
                Ok(Some(v)) => v,
                Ok(None) => bail!("the runs.json reader stopped"),
                Err(_) => break,
            };
            instances = instances.max(v.instances);
            for row in &v.runs {
                if row.namespace != NAMESPACE {
                    continue;
                }
                let Some(seen) = pending.get_mut(row.name.as_str()) else {
                    continue;
                };
                if seen.scheduled.is_none()
                    && (OWNED.contains(&row.phase.as_str()) || row.assigned_pod.is_some())
                {
                    seen.scheduled = Some(v.written);
                }
                if TERMINAL.contains(&row.phase.as_str()) {
                    seen.ended_written = Some(v.written);
                    seen.ended_seen = Some(v.seen);
                    let task = row.task.as_ref();
                    seen.user_code = task.and_then(|t| timeline::printed_time(&t.stdout_tail));
                    if row.phase != "Succeeded" || task.is_none_or(|t| t.exit_code != 0) {
                        seen.failure = Some(format!("{}/{}", row.phase, row.reason));
                    }
                    if let Some(s) = pending.remove(row.name.as_str()) {
                        done.push(s);
                    }
                }
            }
        }
        done.extend(pending.into_values());
        Ok(Followed {
            seen: done,
            instances,
        })
    }

    /// Deletes the Runs `names` (as `krt delete` does: their manifests
    /// removed) and waits until `runs.json` lists none of them.
    pub async fn delete(&mut self, names: &[String]) -> anyhow::Result<()> {
        for n in names {
            self.client.delete(NAMESPACE, n)?;
        }
        let deadline = Instant::now() + Duration::from_secs(300);
        loop {
            let left: Vec<String> = self
                .stack
                .runs()?
                .iter()
                .filter_map(|r| r["name"].as_str().map(str::to_owned))
                .filter(|n| names.contains(n))
                .collect();
            if left.is_empty() {
                break;
            }
            if Instant::now() > deadline {
                bail!("{} deleted task Runs still listed after 300 s", left.len());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // The stack settles (instances beyond the need stay a minute).
        tokio::time::sleep(Duration::from_secs(1)).await;
        Ok(())
    }
}

/// Reads `path` each time it is replaced (and at least every 200 ms),
/// sending each new version parsed.
fn read_on_change(
    path: PathBuf,
) -> anyhow::Result<(notify::RecommendedWatcher, mpsc::UnboundedReceiver<Version>)> {
    use notify::Watcher as _;
    let dir = path
        .parent()
        .context("runs.json's directory")?
        .to_path_buf();
    let (wake, woken) = std::sync::mpsc::channel::<f64>();
    let file = path.clone();
    let mut watcher = notify::recommended_watcher(move |e: notify::Result<notify::Event>| {
        if let Ok(e) = e
            && !e.kind.is_access()
            && e.paths.contains(&file)
        {
            let _ = wake.send(timeline::now());
        }
    })?;
    watcher.watch(&dir, notify::RecursiveMode::NonRecursive)?;
    let (tx, rx) = mpsc::unbounded_channel();
    std::thread::Builder::new()
        .name("runs-json".into())
        .spawn(move || {
            let mut last_inode = 0;
            let mut not_before = Instant::now();
            let mut notified = 0.0;
            loop {
                match woken.recv_timeout(Duration::from_millis(200)) {
                    Ok(at) => notified = at,
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                    Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return,
                }
                std::thread::sleep(not_before.saturating_duration_since(Instant::now()));
                while let Ok(at) = woken.try_recv() {
                    notified = at;
                }
                let began = Instant::now();
                let Some((inode, mut v)) = read(&path) else {
                    continue;
                };
                v.written = v.written.max(notified);
                not_before = began + began.elapsed() * 5;
                if inode == last_inode {
                    continue;
                }
                last_inode = inode;
                if tx.send(v).is_err() {
                    return;
                }
            }
        })?;
    Ok((watcher, rx))
}

/// One version of `runs.json` and its inode (each write is a new file).
fn read(path: &Path) -> Option<(u64, Version)> {
    use std::io::Read as _;
    let mut file = std::fs::File::open(path).ok()?;
    let meta = file.metadata().ok()?;
    let written = timeline::unix(meta.modified().ok()?);
    let mut text = Vec::with_capacity(meta.len() as usize);
    file.read_to_end(&mut text).ok()?;
    let parsed: RunsFile = serde_json::from_slice(&text).ok()?;
    Some((
        meta.ino(),
        Version {
            written,
            seen: timeline::now(),
            instances: parsed.pods.len(),
            runs: parsed.runs,
        },
    ))
}
