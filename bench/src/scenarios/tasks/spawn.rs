//! The baseline on `krt up`'s machine: the task's script as `python3 -c`,
//! a process spawned per task, with the `python3` on `PATH` that `krt
//! up`'s Runtime Server starts for a task too. Its timeline has the same points: created
//! when the client asked for it, scheduled when it got a process (at once
//! one at a time; after a free slot in a burst), the script's own clock,
//! and the exit, which the parent sees as it is written.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;

use super::timeline::{self, SCRIPT, Seen};

/// Processes of a burst at once: as many tasks as `krt up`'s two first
/// runtimed hold at once (capacity 8 each).
pub const BURST_CONCURRENCY: usize = 16;

/// One task, spawned when called; its creation counts from `created`.
async fn one(python: &str, created: f64) -> Seen {
    let mut seen = Seen::created_at(created);
    seen.scheduled = Some(timeline::now());
    let out = tokio::process::Command::new(python)
        .arg("-c")
        .arg(SCRIPT)
        .kill_on_drop(true)
        .output()
        .await;
    let end = timeline::now();
    seen.ended_written = Some(end);
    seen.ended_seen = Some(end);
    match out {
        Ok(out) if out.status.success() => {
            seen.user_code = timeline::printed_time(&String::from_utf8_lossy(&out.stdout));
        }
        Ok(out) => seen.failure = Some(format!("exit {}", out.status)),
        Err(e) => seen.failure = Some(format!("spawn {python}: {e}")),
    }
    seen
}

/// One task at a time.
pub async fn single(python: &str) -> Seen {
    one(python, timeline::now()).await
}

/// `n` tasks created at once, [`BURST_CONCURRENCY`] processes at a time;
/// gives up on what has not ended within `within`.
pub async fn burst(python: &str, n: usize, within: Duration) -> Vec<Seen> {
    let created = timeline::now();
    let python: Arc<str> = python.into();
    let tasks = futures::stream::iter((0..n).map(|_| {
        let python = python.clone();
        async move { one(&python, created).await }
    }))
    .buffer_unordered(BURST_CONCURRENCY)
    .collect::<Vec<_>>();
    match tokio::time::timeout(within, tasks).await {
        Ok(seen) => seen,
        Err(_) => (0..n)
            .map(|_| {
                let mut s = Seen::created_at(created);
                s.failure = Some(format!("not ended within {within:?}"));
                s
            })
            .collect(),
    }
}
