//! Session operations through the gateway on the `sandbox` Run: a trivial
//! command, and 4 KiB and 1 MiB file writes and reads.

use base64::Engine as _;
use serde_json::{Value, json};

use super::context::Ctx;
use super::local::Local;
use super::support::https_client;
use crate::Sizes;
use crate::load::Outcome;
use crate::paths;

/// Records `session-exec-true`, `session-write-4k`, `session-read-4k`,
/// `session-write-1m` and `session-read-1m`, or skips `session` when the
/// sandbox never became Ready.
pub(super) async fn run(ctx: &mut Ctx, local: &Local, sizes: &Sizes) -> anyhow::Result<()> {
    ctx.bar.set_message("session");
    let sandbox = match local.stack.wait_phase("sandbox", "Ready").await {
        Ok(sb) => sb,
        Err(e) => {
            ctx.skip("session", e.to_string());
            return Ok(());
        }
    };
    let session = Session {
        client: https_client(&local.pki.file("public-ca.crt"))?,
        base: sandbox["endpoint"].as_str().unwrap_or_default().to_owned(),
        token: local.stack.token.clone(),
    };
    let (small, large) = (filler(4096), filler(1024 * 1024));
    let n = sizes.session;
    let m = (n / 5).max(5);
    // Each request builds its own body, as a client would.
    let exec_true = || json!({"command": {"argv": ["true"]}});
    ctx.sequential("session-exec-true", 10, n, || session.execute(exec_true()))
        .await;
    ctx.sequential("session-write-4k", 5, n, || {
        session.execute(write_file("f4k", &small))
    })
    .await;
    ctx.sequential("session-read-4k", 5, n, || session.read("f4k"))
        .await;
    ctx.sequential("session-write-1m", 2, m, || {
        session.execute(write_file("f1m", &large))
    })
    .await;
    ctx.sequential("session-read-1m", 2, m, || session.read("f1m"))
        .await;
    Ok(())
}

/// `n` bytes of `x`, base64-encoded.
fn filler(n: usize) -> String {
    base64::engine::general_purpose::STANDARD.encode(vec![b'x'; n])
}

/// The operation that writes `content_base64` to `path`.
fn write_file(path: &str, content_base64: &str) -> Value {
    json!({"writeFile": {"path": path, "contentBase64": content_base64}})
}

/// Requests to one session's endpoint.
pub(super) struct Session {
    /// The HTTPS client.
    pub(super) client: reqwest::Client,
    /// The session's endpoint.
    pub(super) base: String,
    /// The bearer token.
    pub(super) token: String,
}

impl Session {
    /// One `operations:execute`; a 200 whose operation did not succeed
    /// counts as 500.
    pub(super) async fn execute(&self, body: Value) -> Outcome {
        let r = self
            .client
            .post(format!("{}/operations:execute", self.base))
            .bearer_auth(&self.token)
            .json(&body)
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let status = r.status().as_u16();
        let v: Value = r.json().await.map_err(|e| e.to_string())?;
        Ok(if status == 200 && v["state"] != "Succeeded" {
            500
        } else {
            status
        })
    }

    /// One `files:content` read of `path`.
    async fn read(&self, path: &str) -> Outcome {
        paths::send(
            self.client
                .get(format!("{}/files:content?path={path}", self.base))
                .bearer_auth(&self.token),
        )
        .await
    }
}
