//! `krt session`: create, use and close session (sandbox) Runs of an
//! embedded stack. Sessions are created as manifests in the stack's Run
//! store (`session-NS-NAME.yaml`) and used through the gateway.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use base64::Engine as _;
use serde_json::json;

use crate::client::{self, ClientConfig, RunRow};

/// `krt session …`
#[derive(Debug, clap::Subcommand)]
pub enum SessionCommand {
    /// Create a session Run and wait until it is Ready.
    Create {
        /// Name.
        name: String,
        /// Namespace.
        #[arg(short, long, default_value = "default")]
        namespace: String,
        /// Runtime.
        #[arg(long, default_value = "bash")]
        runtime: String,
        /// Environment (`KEY=VALUE`, repeatable).
        #[arg(long = "env")]
        env: Vec<String>,
        /// Idle timeout, seconds.
        #[arg(long)]
        idle_timeout: Option<u32>,
        /// Queue size.
        #[arg(long)]
        queue_size: Option<u32>,
    },
    /// Run a command, streaming its output; exits with its exit code.
    Exec {
        /// Session name.
        name: String,
        /// Namespace.
        #[arg(short, long, default_value = "default")]
        namespace: String,
        /// A `bash -c` script instead of argv.
        #[arg(long, conflicts_with = "argv")]
        shell: Option<String>,
        /// Working directory in the workspace.
        #[arg(long)]
        cwd: Option<String>,
        /// Timeout, seconds.
        #[arg(long)]
        timeout: Option<u64>,
        /// Program and arguments.
        #[arg(last = true)]
        argv: Vec<String>,
    },
    /// Copy a file: `LOCAL NAME:PATH` uploads, `NAME:PATH LOCAL` downloads.
    Cp {
        /// Source.
        src: String,
        /// Destination.
        dst: String,
        /// Namespace.
        #[arg(short, long, default_value = "default")]
        namespace: String,
    },
    /// List a directory: `NAME[:PATH]`.
    Ls {
        /// `NAME` or `NAME:PATH`.
        target: String,
        /// Namespace.
        #[arg(short, long, default_value = "default")]
        namespace: String,
    },
    /// End a session: drain accepted work (or `--cancel` it).
    Close {
        /// Name.
        name: String,
        /// Namespace.
        #[arg(short, long, default_value = "default")]
        namespace: String,
        /// Cancel queued and running work.
        #[arg(long)]
        cancel: bool,
    },
}

fn manifest_path(cfg: &ClientConfig, ns: &str, name: &str) -> anyhow::Result<PathBuf> {
    let dir = cfg
        .runs_dir
        .clone()
        .context("client.json has no runsDir (restart krt up)")?;
    Ok(dir.join(format!("session-{ns}-{name}.yaml")))
}

fn write_manifest(path: &Path, doc: &serde_json::Value) -> anyhow::Result<()> {
    // JSON is valid YAML; write-then-rename so the store never reads half a file.
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, serde_json::to_vec_pretty(doc)?)?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}

async fn wait_phase(
    state_dir: &Path,
    ns: &str,
    name: &str,
    phases: &[&str],
    timeout: Duration,
) -> anyhow::Result<RunRow> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(runs) = client::load_runs(state_dir)
            && let Some(r) = runs
                .runs
                .into_iter()
                .find(|r| r.namespace == ns && r.name == name)
        {
            if phases.contains(&r.phase.as_str()) {
                return Ok(r);
            }
            if ["Failed", "Timeout", "Cancelled", "Succeeded"].contains(&r.phase.as_str()) {
                bail!(
                    "session {ns}/{name} is {} ({}: {})",
                    r.phase,
                    r.reason,
                    r.message
                );
            }
        }
        if Instant::now() > deadline {
            bail!("session {ns}/{name} did not reach {phases:?} within {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn session_url(state_dir: &Path, ns: &str, name: &str) -> anyhow::Result<String> {
    let runs = client::load_runs(state_dir)?;
    let r = runs
        .runs
        .into_iter()
        .find(|r| r.namespace == ns && r.name == name)
        .with_context(|| format!("session {ns}/{name} not found"))?;
    if r.mode != "session" {
        bail!("{ns}/{name} is a {} run, not a session", r.mode);
    }
    r.endpoint.context("session has no endpoint yet")
}

async fn check(resp: reqwest::Response) -> anyhow::Result<reqwest::Response> {
    if resp.status().is_success() {
        return Ok(resp);
    }
    let status = resp.status().as_u16();
    let body = resp.bytes().await?;
    match serde_json::from_slice::<kruntimes_proto::api::ErrorBody>(&body) {
        Ok(e) => bail!("{status} {}: {}", e.error.code.as_str(), e.error.message),
        Err(_) => bail!("{status}: {}", String::from_utf8_lossy(&body)),
    }
}

fn split_target(s: &str) -> Option<(&str, &str)> {
    s.split_once(':')
}

/// Runs a `krt session` command; returns the process exit code.
pub async fn run(state_dir: &Path, cmd: SessionCommand) -> anyhow::Result<i32> {
    let cfg = client::load_client(state_dir)?;
    let http = client::authed_client(&cfg)?;
    match cmd {
        SessionCommand::Create {
            name,
            namespace,
            runtime,
            env,
            idle_timeout,
            queue_size,
        } => {
            let env: Vec<serde_json::Value> = env
                .iter()
                .map(|kv| {
                    let (k, v) = kv
                        .split_once('=')
                        .with_context(|| format!("--env {kv}: expected KEY=VALUE"))?;
                    Ok(json!({"name": k, "value": v}))
                })
                .collect::<anyhow::Result<_>>()?;
            let mut session = serde_json::Map::new();
            if let Some(t) = idle_timeout {
                session.insert("idleTimeoutSeconds".into(), t.into());
            }
            if let Some(q) = queue_size {
                session.insert("queueSize".into(), q.into());
            }
            let doc = json!({
                "apiVersion": "kruntimes.io/v1alpha1",
                "kind": "Run",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"runtime": runtime, "env": env, "mode": {"session": session}},
            });
            write_manifest(&manifest_path(&cfg, &namespace, &name)?, &doc)?;
            let r = wait_phase(
                state_dir,
                &namespace,
                &name,
                &["Ready"],
                Duration::from_secs(60),
            )
            .await?;
            println!("{}", r.endpoint.unwrap_or_default());
            Ok(0)
        }
        SessionCommand::Exec {
            name,
            namespace,
            shell,
            cwd,
            timeout,
            argv,
        } => {
            let url = session_url(state_dir, &namespace, &name)?;
            let mut body = match (shell, argv.is_empty()) {
                (Some(s), true) => json!({"command": {"shell": s}}),
                (None, false) => json!({"command": {"argv": argv}}),
                _ => bail!("pass a program after `--`, or --shell"),
            };
            if let Some(c) = cwd {
                body["cwd"] = c.into();
            }
            if let Some(t) = timeout {
                body["timeoutSeconds"] = t.into();
            }
            let mut resp = check(
                http.post(format!("{url}/operations:stream"))
                    .json(&body)
                    .send()
                    .await?,
            )
            .await?;
            let mut buf = Vec::new();
            let mut code = 1;
            while let Some(chunk) = resp.chunk().await? {
                buf.extend_from_slice(&chunk);
                while let Some(pos) = buf.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = buf.drain(..=pos).collect();
                    let ev: serde_json::Value = serde_json::from_slice(&line)?;
                    match ev["type"].as_str() {
                        Some("output") => {
                            let data = ev["data"].as_str().unwrap_or_default();
                            if ev["stream"] == "stderr" {
                                eprint!("{data}");
                            } else {
                                print!("{data}");
                                std::io::stdout().flush()?;
                            }
                        }
                        Some("completed") => {
                            code = match ev["state"].as_str() {
                                Some("Succeeded") => 0,
                                _ => ev["exitCode"].as_i64().map_or(1, |c| c as i32),
                            };
                            if ev["state"] != "Succeeded" && ev["state"] != "Failed" {
                                eprintln!("operation {}", ev["state"].as_str().unwrap_or("ended"));
                            }
                        }
                        Some("failed") => eprintln!("error: {}", ev["error"]),
                        _ => {}
                    }
                }
            }
            Ok(code)
        }
        SessionCommand::Cp {
            src,
            dst,
            namespace,
        } => {
            match (split_target(&src), split_target(&dst)) {
                (None, Some((name, path))) => {
                    let data = std::fs::read(&src).with_context(|| format!("read {src}"))?;
                    let url = session_url(state_dir, &namespace, name)?;
                    let body = json!({"writeFile": {"path": path, "contentBase64": base64::engine::general_purpose::STANDARD.encode(data)}});
                    let r: serde_json::Value = check(
                        http.post(format!("{url}/operations:execute"))
                            .json(&body)
                            .send()
                            .await?,
                    )
                    .await?
                    .json()
                    .await?;
                    if r["state"] != "Succeeded" {
                        bail!("write {path}: {}", r["error"].as_str().unwrap_or("failed"));
                    }
                }
                (Some((name, path)), None) => {
                    let url = session_url(state_dir, &namespace, name)?;
                    let bytes = check(
                        http.get(format!("{url}/files:content"))
                            .query(&[("path", path)])
                            .send()
                            .await?,
                    )
                    .await?
                    .bytes()
                    .await?;
                    std::fs::write(&dst, bytes).with_context(|| format!("write {dst}"))?;
                }
                _ => bail!("exactly one of SRC and DST must be NAME:PATH"),
            }
            Ok(0)
        }
        SessionCommand::Ls { target, namespace } => {
            let (name, path) = split_target(&target).unwrap_or((target.as_str(), ""));
            let url = session_url(state_dir, &namespace, name)?;
            let mut token: Option<String> = None;
            loop {
                let mut q = vec![("path", path.to_owned()), ("limit", "1000".to_owned())];
                if let Some(t) = &token {
                    q.push(("pageToken", t.clone()));
                }
                let page: serde_json::Value =
                    check(http.get(format!("{url}/files")).query(&q).send().await?)
                        .await?
                        .json()
                        .await?;
                for e in page["entries"].as_array().into_iter().flatten() {
                    println!(
                        "{:<9} {:>10}  {}",
                        e["type"].as_str().unwrap_or("?"),
                        e["size"],
                        e["name"].as_str().unwrap_or("")
                    );
                }
                token = page["nextPageToken"].as_str().map(str::to_owned);
                if token.is_none() {
                    return Ok(0);
                }
            }
        }
        SessionCommand::Close {
            name,
            namespace,
            cancel,
        } => {
            let path = manifest_path(&cfg, &namespace, &name)?;
            let text = std::fs::read(&path).with_context(|| {
                format!("{} was not created by krt session create", path.display())
            })?;
            let mut doc: serde_json::Value = serde_json::from_slice(&text)?;
            let mode = if cancel { "Immediate" } else { "Drain" };
            doc["spec"]["termination"] = json!({"mode": mode});
            write_manifest(&path, &doc)?;
            let want = if cancel { "Cancelled" } else { "Succeeded" };
            let r = wait_phase(
                state_dir,
                &namespace,
                &name,
                &[want, "Cancelled"],
                Duration::from_secs(120),
            )
            .await?;
            println!("{}", r.phase);
            Ok(0)
        }
    }
}
