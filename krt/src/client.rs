//! The client side of an embedded stack: `STATE_DIR/client.json`,
//! `STATE_DIR/runs.json`, and invoking through the gateway.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use serde::{Deserialize, Serialize};

/// `STATE_DIR/client.json`: how clients reach the gateway.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClientConfig {
    /// Gateway base URL.
    pub gateway: String,
    /// CA bundle of the gateway's certificate.
    pub ca_file: PathBuf,
    /// Bearer token.
    pub token: String,
    /// Internal CA (for direct-to-runtimed diagnostics and benchmarks).
    #[serde(default)]
    pub internal_ca_file: Option<PathBuf>,
    /// Control plane ownership watch address.
    #[serde(default)]
    pub control_plane: Option<String>,
    /// The watched directory of Run manifests (the embedded store).
    #[serde(default)]
    pub runs_dir: Option<PathBuf>,
}

/// One entry of `STATE_DIR/runs.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunRow {
    /// Name.
    pub name: String,
    /// Namespace.
    pub namespace: String,
    /// Runtime.
    pub runtime: String,
    /// UID.
    pub uid: String,
    /// Mode.
    pub mode: String,
    /// Phase.
    pub phase: String,
    /// Reason.
    #[serde(default)]
    pub reason: String,
    /// Message.
    #[serde(default)]
    pub message: String,
    /// Owner.
    #[serde(default)]
    pub assigned_pod: Option<String>,
    /// Attempt.
    #[serde(default)]
    pub attempt: u64,
    /// Endpoint URL.
    #[serde(default)]
    pub endpoint: Option<String>,
}

/// `STATE_DIR/runs.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunsFile {
    /// Runs.
    pub runs: Vec<RunRow>,
    /// Skipped manifests.
    #[serde(default)]
    pub errors: Vec<serde_json::Value>,
}

/// Reads one of the JSON files `krt up` keeps in the state directory.
fn read_state<T: serde::de::DeserializeOwned>(state_dir: &Path, name: &str) -> anyhow::Result<T> {
    let p = state_dir.join(name);
    let text = std::fs::read(&p).with_context(|| {
        format!(
            "read {} (is `krt up` running with this --state-dir?)",
            p.display()
        )
    })?;
    serde_json::from_slice(&text).with_context(|| format!("parse {}", p.display()))
}

/// Reads `client.json`.
pub fn load_client(state_dir: &Path) -> anyhow::Result<ClientConfig> {
    read_state(state_dir, "client.json")
}

/// Reads `runs.json`.
pub fn load_runs(state_dir: &Path) -> anyhow::Result<RunsFile> {
    read_state(state_dir, "runs.json")
}

/// An HTTP client trusting the stack's public CA.
pub fn http_client(cfg: &ClientConfig) -> anyhow::Result<reqwest::Client> {
    let ca =
        std::fs::read(&cfg.ca_file).with_context(|| format!("read {}", cfg.ca_file.display()))?;
    Ok(reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(&ca)?)
        .build()?)
}

/// An HTTP client trusting the stack's public CA that sends its token.
pub fn authed_client(cfg: &ClientConfig) -> anyhow::Result<reqwest::Client> {
    let ca =
        std::fs::read(&cfg.ca_file).with_context(|| format!("read {}", cfg.ca_file.display()))?;
    let mut auth = reqwest::header::HeaderValue::from_str(&format!("Bearer {}", cfg.token))
        .context("the token in client.json is not a valid header value")?;
    auth.set_sensitive(true);
    let headers = reqwest::header::HeaderMap::from_iter([(reqwest::header::AUTHORIZATION, auth)]);
    Ok(reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(&ca)?)
        .default_headers(headers)
        .build()?)
}

/// `krt runs`.
pub fn print_runs(state_dir: &Path, json: bool) -> anyhow::Result<()> {
    let runs = load_runs(state_dir)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&runs.runs)?);
        return Ok(());
    }
    println!(
        "{:<20} {:<12} {:<8} {:<36} {:<9} {:<10} {:<12} ENDPOINT",
        "NAME", "NAMESPACE", "RUNTIME", "UID", "MODE", "PHASE", "OWNER"
    );
    for r in &runs.runs {
        println!(
            "{:<20} {:<12} {:<8} {:<36} {:<9} {:<10} {:<12} {}",
            r.name,
            r.namespace,
            r.runtime,
            r.uid,
            r.mode,
            r.phase,
            r.assigned_pod.as_deref().unwrap_or("-"),
            r.endpoint.as_deref().unwrap_or("-")
        );
        if !r.message.is_empty() {
            println!("  {}: {}", r.reason, r.message);
        }
    }
    for e in &runs.errors {
        eprintln!("skipped manifest: {e}");
    }
    Ok(())
}

/// `krt invoke`: returns the process exit code.
pub async fn invoke(
    state_dir: &Path,
    namespace: &str,
    name: &str,
    data: Vec<u8>,
) -> anyhow::Result<i32> {
    let cfg = load_client(state_dir)?;
    let runs = load_runs(state_dir)?;
    let run = runs
        .runs
        .iter()
        .find(|r| r.name == name && r.namespace == namespace)
        .with_context(|| format!("run {namespace}/{name} not found (see `krt runs`)"))?;
    if run.mode != "function" {
        anyhow::bail!(
            "run {namespace}/{name} is a {} run; only function runs are invoked",
            run.mode
        );
    }
    let url = run
        .endpoint
        .clone()
        .with_context(|| format!("run {namespace}/{name} has no endpoint yet"))?;
    let resp = http_client(&cfg)?
        .post(url)
        .bearer_auth(&cfg.token)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(data)
        .send()
        .await
        .context("send invoke request")?;
    let status = resp.status();
    let served_by = resp
        .headers()
        .get(kruntimes_proto::api::HEADER_SERVED_BY)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let body = resp.bytes().await?;
    if status.is_success() {
        println!("{}", String::from_utf8_lossy(&body));
        if let Some(s) = served_by {
            tracing::debug!(served_by = %s, "invoke served");
        }
        return Ok(0);
    }
    match serde_json::from_slice::<kruntimes_proto::api::ErrorBody>(&body) {
        Ok(e) => eprintln!(
            "error: {} {}: {}{}",
            status.as_u16(),
            e.error.code.as_str(),
            e.error.message,
            e.error
                .invocation_id
                .map(|i| format!(" (invocation {i})"))
                .unwrap_or_default()
        ),
        Err(_) => eprintln!("error: {status}: {}", String::from_utf8_lossy(&body)),
    }
    Ok(1)
}
