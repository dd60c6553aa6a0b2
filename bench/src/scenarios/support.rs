//! Small helpers several scenarios share: waiting for a condition or for a
//! path to route, an HTTPS client trusting one CA, and sequential requests
//! round robin over a set of targets.

use std::future::Future;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::bail;

use crate::load::{self, Recorder};
use crate::paths::HttpTarget;

/// Polls `f` every 50 ms until it holds, failing after `timeout`.
pub(super) async fn wait_until<F, Fut>(timeout: Duration, mut f: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if f().await {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    bail!("condition not met within {timeout:?}")
}

/// Waits up to 30 s until `target` answers 200 (a new gateway has its
/// table and its authentication ready).
pub(super) async fn wait_routed(target: &HttpTarget) -> anyhow::Result<()> {
    wait_until(Duration::from_secs(30), || async {
        target.call().await == Ok(200)
    })
    .await
}

/// A default HTTPS client trusting the CA in `ca` (PEM).
pub(super) fn https_client(ca: &Path) -> anyhow::Result<reqwest::Client> {
    Ok(reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(&std::fs::read(ca)?)?)
        .build()?)
}

/// `n` sequential requests without warm-up, request `i` to
/// `targets[i % len]`, each advancing `tick`.
pub(super) async fn round_robin(
    targets: &[HttpTarget],
    n: u64,
    tick: impl Fn(),
) -> (Recorder, Duration) {
    if targets.is_empty() {
        return (Recorder::new(), Duration::ZERO);
    }
    let mut i = 0;
    load::sequential(
        0,
        n,
        || {
            let target = &targets[i % targets.len()];
            i += 1;
            target.call()
        },
        tick,
    )
    .await
}
