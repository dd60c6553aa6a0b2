//! A stream of invokes through the NodePort while something is restarted or
//! rotated, and what it saw.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{GATEWAY_HOST, Installed, NODE_PORT};

/// Invokes a Run through the NodePort every 50 ms on a thread of its own
/// (its own runtime), a new connection each time, until stopped.
pub struct Load {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<Report>>,
}

/// What a [`Load`] saw.
#[derive(Debug, Default)]
pub struct Report {
    pub ok: u64,
    /// Failures by kind: `HTTP 503 NotReady`, `connect`, …
    pub failures: BTreeMap<String, u64>,
    /// Answers that were neither a 200 with the right body nor a typed error.
    pub unexpected: Vec<String>,
    pub elapsed: Duration,
}

impl Report {
    pub fn failed(&self) -> u64 {
        self.failures.values().sum()
    }
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} ok, {} failed {:?} over {:?}",
            self.ok,
            self.failed(),
            self.failures,
            self.elapsed
        )
    }
}

impl Drop for Load {
    /// A test that panicked mid-load does not leave the thread posting.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

impl Load {
    pub fn start(k: &Installed, path: &str, token: &str) -> Self {
        let client = k
            .host_client_builder()
            .pool_max_idle_per_host(0)
            .build()
            .unwrap();
        let url = format!("https://{GATEWAY_HOST}:{NODE_PORT}{path}");
        let token = token.to_owned();
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let started = Instant::now();
                let mut report = Report::default();
                while !stopped.load(Ordering::Relaxed) {
                    let r = client
                        .post(&url)
                        .bearer_auth(&token)
                        .json(&json!({"name": "load"}))
                        .send()
                        .await;
                    match r {
                        Ok(r) => {
                            let status = r.status().as_u16();
                            let body: Value = r.json().await.unwrap_or_default();
                            if status == 200 && body["message"] == "hello load" {
                                report.ok += 1;
                            } else if let Some(code) = body["error"]["code"].as_str() {
                                *report
                                    .failures
                                    .entry(format!("HTTP {status} {code}"))
                                    .or_default() += 1;
                            } else {
                                report.unexpected.push(format!("{status} {body}"));
                            }
                        }
                        Err(e) => {
                            let kind = if e.is_connect() {
                                "connect"
                            } else if e.is_timeout() {
                                "timeout"
                            } else {
                                "transport"
                            };
                            *report.failures.entry(kind.to_owned()).or_default() += 1;
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                report.elapsed = started.elapsed();
                report
            })
        });
        Self {
            stop,
            thread: Some(thread),
        }
    }

    pub async fn stop(mut self) -> Report {
        self.stop.store(true, Ordering::Relaxed);
        let thread = self.thread.take().unwrap();
        tokio::task::spawn_blocking(move || thread.join().unwrap())
            .await
            .unwrap()
    }
}
