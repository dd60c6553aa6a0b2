//! Session mode: a workspace per session Run and the commands running in
//! it. runtimed queues operations and runs them one at a time; the server
//! runs what it is given ([`exec`]) and performs file operations beneath
//! the workspace ([`files`], [`path`]), keeps its background processes
//! ([`process`]), watches its directories ([`watcher`]) and measures what
//! it uses ([`metrics`]). A session opened with `inputs`
//! finds the files staged for it in its workspace ([`crate::inputs`]); one
//! opened with `artifacts` has an artifacts directory beside its workspace
//! ([`crate::artifacts`]), named to every command. Closing a session kills
//! every command still running in it, waits until their trees are gone, and
//! removes the workspace and the artifacts directory.

pub mod exec;
pub mod files;
pub mod metrics;
pub mod path;
pub mod process;
pub mod watcher;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use crate::artifacts;
use crate::contain::Shim;
use crate::error::{Error, Result};
use crate::held::Held;
use crate::inputs::Inputs;
use crate::source;
use crate::validate::Open;

/// One open session.
#[derive(Debug)]
pub struct Session {
    /// Run UID.
    pub run_uid: String,
    /// Attempt it was opened at.
    pub attempt: u64,
    root: PathBuf,
    env: BTreeMap<String, String>,
    /// Its artifacts directory, when it was opened with one.
    artifacts: Option<artifacts::Location>,
    closed: watch::Sender<bool>,
    commands: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    /// Its background processes.
    pub processes: process::Processes,
    /// Its open watches ([`watcher`]).
    watches: std::sync::atomic::AtomicUsize,
    /// The shims of its commands that run now ([`metrics`] walks their
    /// trees).
    shims: Mutex<std::collections::BTreeSet<u32>>,
}

/// A command's shim counted among its session's while it runs.
pub struct Running<'a> {
    session: &'a Session,
    pid: u32,
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.session
            .shims
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.pid);
    }
}

impl Session {
    /// The canonical workspace root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The environment of one command: the session's, the command's own
    /// overrides, then `KRUNTIME_ARTIFACTS_DIR` when the session has an
    /// artifacts directory (the server's, whatever the request says).
    pub fn command_env(
        &self,
        overrides: impl IntoIterator<Item = (String, String)>,
    ) -> BTreeMap<String, String> {
        let mut env = self.env.clone();
        env.extend(overrides);
        if let Some(a) = &self.artifacts {
            env.insert(
                kruntimes_proto::runtime::ARTIFACTS_DIR_ENV.into(),
                a.path().display().to_string(),
            );
        }
        env
    }

    /// Its artifacts directory, when it was opened with one.
    pub fn artifacts(&self) -> Option<&artifacts::Location> {
        self.artifacts.as_ref()
    }

    /// Counts the shim `pid` of a command among the session's while the
    /// guard lives.
    pub fn running(&self, pid: u32) -> Running<'_> {
        self.shims
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(pid);
        Running { session: self, pid }
    }

    /// The shims of everything running in the session: its commands and
    /// its background processes.
    pub fn shim_pids(&self) -> Vec<u32> {
        let mut pids: Vec<u32> = self
            .shims
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .copied()
            .collect();
        pids.extend(
            self.processes
                .list()
                .iter()
                .filter(|p| p.running())
                .map(|p| p.pid),
        );
        pids
    }

    /// Fires when the session closes.
    pub fn closing(&self) -> watch::Receiver<bool> {
        self.closed.subscribe()
    }

    /// Keeps a running command's task, so closing can wait for it.
    pub fn track(&self, task: tokio::task::JoinHandle<()>) {
        let mut commands = self.commands.lock().unwrap_or_else(|p| p.into_inner());
        commands.retain(|t| !t.is_finished());
        commands.push(task);
    }

    async fn close(&self) {
        let _ = self.closed.send(true);
        let tasks = std::mem::take(&mut *self.commands.lock().unwrap_or_else(|p| p.into_inner()));
        for t in tasks {
            let _ = t.await;
        }
        let _ = std::fs::remove_dir_all(&self.root);
        if let Some(a) = &self.artifacts
            && let Err(e) = a.remove()
        {
            tracing::warn!(run_uid = %self.run_uid, error = %e, "the session's artifacts directory stays");
        }
    }
}

/// Writes the session's inline source into its workspace `root`, moves
/// the files staged for it there when it asked for them (else removes
/// them), and makes its artifacts directory at `location` when it asked
/// for one (else removes whatever is there); the directory, if any.
fn prepare(
    root: &Path,
    location: &artifacts::Location,
    inputs: &Inputs,
    req: &Open,
) -> Result<Option<artifacts::Location>> {
    if let Some((path, text)) = &req.source {
        source::write_inline(root, path, text.as_bytes())?;
    }
    if req.inputs {
        inputs.take(&req.run_uid, req.attempt, root)?;
    } else {
        inputs.discard(&req.run_uid)?;
    }
    if req.artifacts {
        location.create()?;
        Ok(Some(location.clone()))
    } else {
        location.remove()?;
        Ok(None)
    }
}

/// Every session of the server.
pub struct Sessions {
    root: PathBuf,
    shim: Shim,
    inputs: Arc<Inputs>,
    held: Held<Session>,
}

impl Sessions {
    /// No sessions yet; workspaces live under `root`, staged files come
    /// from `inputs`.
    pub fn new(root: PathBuf, shim: Shim, inputs: Arc<Inputs>) -> Self {
        Self {
            root,
            shim,
            inputs,
            held: Held::default(),
        }
    }

    /// The shim commands run under.
    pub fn shim(&self) -> &Shim {
        &self.shim
    }

    /// The open session of a Run.
    pub fn get(&self, run_uid: &str) -> Result<Arc<Session>> {
        self.held
            .get(run_uid)
            .ok_or_else(|| Error::NotFound(format!("session {run_uid}")))
    }

    /// Opens a session: the same attempt again is idempotent, a higher one
    /// replaces the session (and its workspace), a lower one is refused.
    pub async fn open(&self, req: Open) -> Result<()> {
        let _change = self.held.change().await;
        match self.get(&req.run_uid).ok() {
            Some(s) if s.attempt == req.attempt => return Ok(()),
            Some(s) if s.attempt > req.attempt => {
                return Err(Error::Stale {
                    requested: req.attempt,
                    current: s.attempt,
                });
            }
            Some(s) => {
                self.held.take(&s.run_uid);
                s.close().await;
            }
            None => {}
        }
        let workspace = self.root.join(&req.run_uid);
        if workspace.exists() {
            std::fs::remove_dir_all(&workspace)?;
        }
        std::fs::create_dir_all(&workspace)?;
        let root = workspace.canonicalize()?;
        // Beside the workspace, never in it; empty for each attempt.
        // Without artifacts, whatever an earlier server left goes.
        let location = artifacts::Location::new(&self.root, &req.run_uid);
        let artifacts = match prepare(&root, &location, &self.inputs, &req) {
            Ok(a) => a,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&root);
                let _ = location.remove();
                return Err(e);
            }
        };
        let session = Arc::new(Session {
            env: crate::env::for_run(&req.run_uid, &root, req.env),
            run_uid: req.run_uid.clone(),
            attempt: req.attempt,
            root,
            artifacts,
            closed: watch::channel(false).0,
            commands: Mutex::new(Vec::new()),
            processes: process::Processes::default(),
            watches: std::sync::atomic::AtomicUsize::new(0),
            shims: Mutex::default(),
        });
        tracing::info!(run_uid = %session.run_uid, attempt = session.attempt, "session opened");
        self.held.insert(req.run_uid, session);
        Ok(())
    }

    /// Closes a session (and removes what was staged for it); `false`
    /// when there is none.
    pub async fn close(&self, run_uid: &str) -> bool {
        let _change = self.held.change().await;
        if let Err(e) = self.inputs.discard(run_uid) {
            tracing::warn!(run_uid = %run_uid, error = %e, "the session's staged inputs stay");
        }
        let Some(s) = self.held.take(run_uid) else {
            return false;
        };
        s.close().await;
        tracing::info!(run_uid = %run_uid, "session closed");
        true
    }

    /// Closes every session.
    pub async fn reset(&self) -> usize {
        let _change = self.held.change().await;
        let all = self.held.drain();
        for s in &all {
            s.close().await;
        }
        all.len()
    }
}
