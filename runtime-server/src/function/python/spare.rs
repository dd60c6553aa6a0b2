//! Pre-started interpreters, so registering a Python function (and
//! replacing a worker) only pays for importing the handler, not for
//! starting Python (~80 ms here). Spares run under shims like every worker
//! and belong to no Run until one is taken.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use super::worker::{self, Process};
use crate::contain::Shim;
use crate::{env, logs};

/// A pool of spares kept at its target size.
pub struct SparePool {
    shim: Shim,
    python: PathBuf,
    root: PathBuf,
    target: usize,
    spares: Mutex<Vec<Process>>,
}

impl std::fmt::Debug for SparePool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SparePool")
            .field("python", &self.python)
            .field("target", &self.target)
            .finish_non_exhaustive()
    }
}

impl SparePool {
    /// A pool keeping `target` spares of `python`, started in `root`.
    pub fn new(shim: Shim, python: PathBuf, root: PathBuf, target: usize) -> Arc<Self> {
        let pool = Arc::new(Self {
            shim,
            python,
            root,
            target,
            spares: Mutex::new(Vec::new()),
        });
        pool.fill();
        pool
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Process>> {
        self.spares.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Tops the pool up to its target.
    pub fn fill(&self) {
        let mut spares = self.lock();
        while spares.len() < self.target {
            match worker::spawn(
                &self.shim,
                &self.python,
                &self.root,
                &env::spare(),
                None,
                logs::Label::new("spare"),
            ) {
                Ok(p) => spares.push(p),
                Err(e) => {
                    tracing::warn!(error = %e, "could not start a spare python worker");
                    return;
                }
            }
        }
    }

    /// A live spare, if any; the pool refills itself afterwards.
    pub fn take(self: &Arc<Self>) -> Option<Process> {
        let found = {
            let mut spares = self.lock();
            let mut found = None;
            // Oldest first: it has had the longest to finish booting.
            while !spares.is_empty() {
                let mut p = spares.remove(0);
                if p.alive() {
                    found = Some(p);
                    break;
                }
                p.kill();
            }
            found
        };
        let pool = self.clone();
        tokio::spawn(async move { pool.fill() });
        found
    }

    /// Kills every spare (on shutdown; dropping them does the same).
    pub fn clear(&self) {
        for mut p in self.lock().drain(..) {
            p.kill();
        }
    }
}
