//! `krt session`: create, use and close session (sandbox) Runs — as a
//! manifest in `krt up`'s store, or a Run through the Kubernetes API — and
//! reach them through the gateway.

use std::io::Write as _;
use std::time::Duration;

use anyhow::{Context as _, bail};
use base64::Engine as _;
use kruntimes_api::{EnvVar, Phase, Run, RunMode, RunSpec, SessionMode, TerminationMode};
use kruntimes_proto::api;
use serde_json::json;

use kruntimes_client::gateway::{self, Gateway};

mod process;
mod watch;
use kruntimes_client::{self as client, Target};

/// `krt session …`
#[derive(Debug, clap::Subcommand)]
pub enum SessionCommand {
    /// Create a session Run and wait until it is Ready; prints its URL.
    Create {
        /// Name.
        name: String,
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
        /// How long to wait for Ready.
        #[arg(long, default_value = "60s", value_parser = super::parse_duration)]
        timeout: Duration,
    },
    /// Run a command, streaming its output; exits with its exit code.
    Exec {
        /// Session name.
        name: String,
        /// A `bash -c` script instead of argv.
        #[arg(long, conflicts_with = "argv")]
        shell: Option<String>,
        /// Working directory in the workspace.
        #[arg(long)]
        cwd: Option<String>,
        /// Timeout, seconds.
        #[arg(long)]
        timeout: Option<u64>,
        /// Print the operation id (to stderr) once the session accepts it.
        #[arg(short, long)]
        verbose: bool,
        /// Program and arguments.
        #[arg(last = true)]
        argv: Vec<String>,
    },
    /// Cancel a queued or running operation (its id: `exec -v`).
    Cancel {
        /// Session name.
        name: String,
        /// Operation id (`op-…`).
        operation: String,
    },
    /// Copy a file: `LOCAL NAME:PATH` uploads, `NAME:PATH LOCAL` downloads.
    Cp {
        /// Source.
        src: String,
        /// Destination.
        dst: String,
    },
    /// List a directory: `NAME[:PATH]`.
    Ls {
        /// `NAME` or `NAME:PATH`.
        target: String,
    },
    /// Start a background process; prints its pid. It runs on after krt
    /// exits, until it ends, is killed or the session ends.
    Start {
        /// Session name.
        name: String,
        /// A `bash -c` script instead of argv.
        #[arg(long, conflicts_with = "argv")]
        shell: Option<String>,
        /// Working directory in the workspace.
        #[arg(long)]
        cwd: Option<String>,
        /// Environment (`KEY=VALUE`, repeatable).
        #[arg(long = "env")]
        env: Vec<String>,
        /// Keep its stdin open (for input sent later).
        #[arg(long)]
        stdin: bool,
        /// Then follow its output as `attach` does.
        #[arg(short, long)]
        attach: bool,
        /// Program and arguments.
        #[arg(last = true)]
        argv: Vec<String>,
    },
    /// List the session's background processes.
    Ps {
        /// Session name.
        name: String,
    },
    /// Print a process's output (what it kept, then what comes) until it
    /// ends; exits with its exit code. Ctrl-C detaches (it runs on).
    Attach {
        /// Session name.
        name: String,
        /// Process id.
        pid: u64,
    },
    /// Send a process a signal.
    Kill {
        /// Session name.
        name: String,
        /// Process id.
        pid: u64,
        /// The signal (`SIGTERM` ends its whole tree after a grace; `SIGKILL` at once).
        #[arg(short, long, default_value = "SIGTERM")]
        signal: String,
    },
    /// Open an interactive terminal in the session (`bash -i -l`, or the
    /// program after `--`); exits with its exit code.
    Shell {
        /// Session name.
        name: String,
        /// Program and arguments (default: `bash -i -l`).
        #[arg(last = true)]
        argv: Vec<String>,
    },
    /// Print what changes beneath a directory (`NAME[:PATH]`), one
    /// `CHANGE PATH` line each, until Ctrl-C.
    Watch {
        /// `NAME` or `NAME:PATH`.
        target: String,
        /// Its subdirectories too.
        #[arg(short, long)]
        recursive: bool,
    },
    /// Print what the session uses: CPU, memory, disk, processes.
    Metrics {
        /// Session name.
        name: String,
    },
    /// End a session: drain accepted work (or `--cancel` it).
    Close {
        /// Name.
        name: String,
        /// Cancel queued and running work.
        #[arg(long)]
        cancel: bool,
        /// How long to wait for the end.
        #[arg(long, default_value = "120s", value_parser = super::parse_duration)]
        timeout: Duration,
    },
}

/// `KEY=VALUE` pairs.
fn key_values(pairs: &[String]) -> anyhow::Result<Vec<(String, String)>> {
    pairs
        .iter()
        .map(|kv| {
            let (k, v) = kv
                .split_once('=')
                .with_context(|| format!("--env {kv}: expected KEY=VALUE"))?;
            Ok((k.to_owned(), v.to_owned()))
        })
        .collect()
}

/// Follows process `pid` until it ends (its exit code) or Ctrl-C (130, it
/// runs on).
async fn follow(gw: &Gateway, url: &str, pid: u64) -> anyhow::Result<i32> {
    let mut interrupts = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    let stop = async move {
        interrupts.recv().await;
    };
    match process::attach(gw, url, pid, stop).await? {
        Some(code) => Ok(code),
        None => {
            eprintln!("detached: process {pid} runs on (krt session attach … {pid})");
            Ok(INTERRUPTED)
        }
    }
}

fn session_run(
    namespace: &str,
    name: &str,
    runtime: &str,
    env: &[String],
    idle_timeout: Option<u32>,
    queue_size: Option<u32>,
) -> anyhow::Result<Run> {
    let env = key_values(env)?
        .into_iter()
        .map(|(name, value)| EnvVar { name, value })
        .collect();
    let mut run = Run::new(
        name,
        RunSpec {
            runtime: runtime.into(),
            env,
            mode: RunMode {
                session: Some(SessionMode {
                    idle_timeout_seconds: idle_timeout,
                    queue_size,
                    operation_timeout: None,
                }),
                ..Default::default()
            },
            ..Default::default()
        },
    );
    run.metadata.namespace = Some(namespace.into());
    Ok(run)
}

/// The session's URL and a gateway client for it.
async fn session(t: &Target, namespace: &str, name: &str) -> anyhow::Result<(String, Gateway)> {
    let r = t.run_of_mode(namespace, name, "session").await?;
    let url = client::endpoint(&r)?.to_owned();
    Ok((url, t.gateway(&r).await?))
}

/// Runs a `krt session` command; returns the process exit code.
pub async fn run(t: &Target, namespace: &str, cmd: SessionCommand) -> anyhow::Result<i32> {
    match cmd {
        SessionCommand::Create {
            name,
            runtime,
            env,
            idle_timeout,
            queue_size,
            timeout,
        } => {
            let run = session_run(namespace, &name, &runtime, &env, idle_timeout, queue_size)?;
            t.create(&run).await?;
            let r =
                super::runs::wait_showing(t, namespace, &name, &[Phase::Ready], timeout).await?;
            println!("{}", r.endpoint.unwrap_or_default());
            Ok(0)
        }
        SessionCommand::Cancel { name, operation } => {
            let (url, gw) = session(t, namespace, &name).await?;
            cancel(&gw, &url, &operation).await?;
            println!("{operation} cancelled");
            Ok(0)
        }
        SessionCommand::Exec {
            name,
            shell,
            cwd,
            timeout,
            verbose,
            argv,
        } => {
            let (url, gw) = session(t, namespace, &name).await?;
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
            // Listening before the request goes out: a Ctrl-C from here on
            // reaches the stream's loop (and cancels what was accepted), never
            // ends the process behind an operation's back.
            let interrupts =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
            let resp = gw
                .http()
                .post(format!("{url}/operations:stream"))
                .json(&body)
                .send()
                .await?;
            let events = gateway::check(resp).await?;
            stream(events, interrupts, verbose, |id| {
                let (gw, url) = (gw.clone(), url.clone());
                async move { cancel(&gw, &url, &id).await }
            })
            .await
        }
        SessionCommand::Cp { src, dst } => {
            match (src.split_once(':'), dst.split_once(':')) {
                (None, Some((name, path))) => {
                    let len = std::fs::metadata(&src)
                        .with_context(|| format!("read {src}"))?
                        .len();
                    if len > api::MAX_SESSION_FILE_BYTES as u64 {
                        bail!("{src}: {}", api::session_file_too_large(len));
                    }
                    let data = std::fs::read(&src).with_context(|| format!("read {src}"))?;
                    let (url, gw) = session(t, namespace, name).await?;
                    let body = json!({"writeFile": {"path": path, "contentBase64": base64::engine::general_purpose::STANDARD.encode(data)}});
                    let resp = gw
                        .http()
                        .post(format!("{url}/operations:execute"))
                        .json(&body)
                        .send()
                        .await?;
                    let r: serde_json::Value = gateway::check(resp).await?.json().await?;
                    if r["state"] != "Succeeded" {
                        bail!("write {path}: {}", r["error"].as_str().unwrap_or("failed"));
                    }
                }
                (Some((name, path)), None) => {
                    let (url, gw) = session(t, namespace, name).await?;
                    let resp = gw
                        .http()
                        .get(format!("{url}/files:content"))
                        .query(&[("path", path)])
                        .send()
                        .await?;
                    let bytes = gateway::check(resp).await?.bytes().await?;
                    std::fs::write(&dst, bytes).with_context(|| format!("write {dst}"))?;
                }
                _ => bail!("exactly one of SRC and DST must be NAME:PATH"),
            }
            Ok(0)
        }
        SessionCommand::Ls { target } => {
            let (name, path) = target.split_once(':').unwrap_or((target.as_str(), ""));
            let (url, gw) = session(t, namespace, name).await?;
            let mut token: Option<String> = None;
            loop {
                let mut q = vec![("path", path.to_owned()), ("limit", "1000".to_owned())];
                if let Some(t) = &token {
                    q.push(("pageToken", t.clone()));
                }
                let resp = gw
                    .http()
                    .get(format!("{url}/files"))
                    .query(&q)
                    .send()
                    .await?;
                let page: serde_json::Value = gateway::check(resp).await?.json().await?;
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
        SessionCommand::Start {
            name,
            shell,
            cwd,
            env,
            stdin,
            attach,
            argv,
        } => {
            let mut body = match (shell, argv.is_empty()) {
                (Some(s), true) => json!({"command": {"shell": s}}),
                (None, false) => json!({"command": {"argv": argv}}),
                _ => bail!("pass a program after `--`, or --shell"),
            };
            if let Some(c) = cwd {
                body["cwd"] = c.into();
            }
            if !env.is_empty() {
                body["env"] = key_values(&env)?.into_iter().collect();
            }
            body["stdin"] = stdin.into();
            let (url, gw) = session(t, namespace, &name).await?;
            let pid = process::start(&gw, &url, &body).await?;
            if !attach {
                println!("{pid}");
                return Ok(0);
            }
            eprintln!("process {pid} started (Ctrl-C detaches; it runs on)");
            follow(&gw, &url, pid).await
        }
        SessionCommand::Ps { name } => {
            let (url, gw) = session(t, namespace, &name).await?;
            process::ps(&gw, &url).await?;
            Ok(0)
        }
        SessionCommand::Attach { name, pid } => {
            let (url, gw) = session(t, namespace, &name).await?;
            follow(&gw, &url, pid).await
        }
        SessionCommand::Kill { name, pid, signal } => {
            let (url, gw) = session(t, namespace, &name).await?;
            process::signal(&gw, &url, pid, &signal).await?;
            Ok(0)
        }
        SessionCommand::Shell { name, argv } => {
            let argv = if argv.is_empty() {
                vec!["bash".into(), "-i".into(), "-l".into()]
            } else {
                argv
            };
            let (url, gw) = session(t, namespace, &name).await?;
            process::shell(&gw, &url, argv).await
        }
        SessionCommand::Watch { target, recursive } => {
            let (name, path) = target.split_once(':').unwrap_or((target.as_str(), ""));
            let (url, gw) = session(t, namespace, name).await?;
            let mut interrupts =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
            let stop = async move {
                interrupts.recv().await;
            };
            watch::watch(&gw, &url, path, recursive, stop).await?;
            Ok(0)
        }
        SessionCommand::Metrics { name } => {
            let (url, gw) = session(t, namespace, &name).await?;
            let resp = gw.http().get(format!("{url}/metrics")).send().await?;
            let m: serde_json::Value = gateway::check(resp).await?.json().await?;
            print!("{}", render_metrics(&m));
            Ok(0)
        }
        SessionCommand::Close {
            name,
            cancel,
            timeout,
        } => {
            t.run_of_mode(namespace, &name, "session").await?;
            let (mode, want) = if cancel {
                (TerminationMode::Immediate, Phase::Cancelled)
            } else {
                (TerminationMode::Drain, Phase::Succeeded)
            };
            t.terminate(namespace, &name, mode).await?;
            // A drained session may fail at the end: its artifacts refused.
            let ends = [want, Phase::Cancelled, Phase::Failed];
            let r = super::runs::wait_showing(t, namespace, &name, &ends, timeout).await?;
            println!("{}", r.phase);
            if r.phase == "Failed" {
                eprintln!("session {name} failed: {}: {}", r.reason, r.message);
                return Ok(1);
            }
            Ok(0)
        }
    }
}

/// Binary-prefixed bytes (`1.5 MiB`).
fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

/// A session's `metrics` answer for people. Pure.
fn render_metrics(m: &serde_json::Value) -> String {
    let n = |k: &str| m[k].as_u64().unwrap_or(0);
    let limit = m["memoryLimitBytes"]
        .as_u64()
        .map_or("no limit".to_owned(), |l| format!("of {}", bytes(l)));
    format!(
        "cpu        {:.2} s used, {} CPUs\nmemory     {} ({limit})\nprocesses  {}\ndisk       {}{} in the workspace, {} free of {}\n",
        m["cpuSeconds"].as_f64().unwrap_or(0.0),
        n("cpuCount"),
        bytes(n("memoryBytes")),
        n("processes"),
        if m["diskPartial"] == true {
            "at least "
        } else {
            ""
        },
        bytes(n("diskBytes")),
        bytes(n("diskFreeBytes")),
        bytes(n("diskTotalBytes")),
    )
}

/// Cancels operation `id` of the session at `url`.
async fn cancel(gw: &Gateway, url: &str, id: &str) -> anyhow::Result<()> {
    let resp = gw
        .http()
        .post(format!("{url}/operations:cancel"))
        .json(&json!({"operationId": id}))
        .send()
        .await?;
    gateway::check(resp).await?;
    Ok(())
}

/// The next line of an NDJSON answer, `None` at its end. The partial line
/// lives in `buf`, so a caller may drop this future (in a `select!`)
/// without losing bytes.
pub(crate) async fn next_line(
    resp: &mut reqwest::Response,
    buf: &mut Vec<u8>,
) -> anyhow::Result<Option<Vec<u8>>> {
    loop {
        if let Some(pos) = buf.iter().position(|b| *b == b'\n') {
            return Ok(Some(buf.drain(..=pos).collect()));
        }
        match resp.chunk().await? {
            Some(c) => buf.extend_from_slice(&c),
            None => return Ok(None),
        }
    }
}

/// Exit code of a command Ctrl-C cancelled (a shell's `128 + SIGINT`).
const INTERRUPTED: i32 = 130;

/// Prints an `operations:stream` response; returns the command's exit code.
/// The first Ctrl-C cancels the operation (`cancel` with its id, as soon as
/// the session has accepted it) and waits for its end; a second one stops
/// waiting.
async fn stream<F, Fut>(
    mut resp: reqwest::Response,
    mut interrupts: tokio::signal::unix::Signal,
    verbose: bool,
    cancel: F,
) -> anyhow::Result<i32>
where
    F: Fn(String) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    let mut buf = Vec::new();
    let mut code = 1;
    let mut completed = false;
    let mut operation: Option<String> = None;
    let mut interrupted = false;
    loop {
        let line = tokio::select! {
            line = next_line(&mut resp, &mut buf) => line?,
            _ = interrupts.recv() => {
                if interrupted {
                    return Ok(INTERRUPTED);
                }
                interrupted = true;
                eprintln!("cancelling (Ctrl-C again to stop waiting)");
                // Not accepted yet: cancelled as soon as it is.
                if let Some(id) = &operation
                    && let Err(e) = cancel(id.clone()).await
                {
                    eprintln!("error: cancel {id}: {e:#}");
                    return Ok(INTERRUPTED);
                }
                continue;
            }
        };
        let Some(line) = line else { break };
        let ev: serde_json::Value = serde_json::from_slice(&line)?;
        match ev["type"].as_str() {
            Some("accepted") => {
                operation = ev["operationId"].as_str().map(str::to_owned);
                if verbose && let Some(id) = &operation {
                    eprintln!("operation {id} accepted");
                }
                if interrupted
                    && let Some(id) = &operation
                    && let Err(e) = cancel(id.clone()).await
                {
                    eprintln!("error: cancel {id}: {e:#}");
                    return Ok(INTERRUPTED);
                }
            }
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
                completed = true;
                code = match ev["state"].as_str() {
                    Some("Succeeded") => 0,
                    Some("Cancelled") if interrupted => INTERRUPTED,
                    _ => ev["exitCode"].as_i64().map_or(1, |c| c as i32),
                };
                if ev["state"] != "Succeeded" && ev["state"] != "Failed" {
                    eprintln!("operation {}", ev["state"].as_str().unwrap_or("ended"));
                }
            }
            Some("failed") => {
                completed = true;
                eprintln!("error: {}", ev["error"]);
            }
            _ => {}
        }
    }
    if !completed {
        // Never silent: the caller learns the outcome is unknown.
        let op = operation.as_deref().unwrap_or("the operation");
        eprintln!(
            "error: the stream ended before {op} completed: whether it ran is unknown (krt session exec -v names operations)"
        );
    }
    Ok(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_read_as_people_read_them() {
        let m = serde_json::json!({"cpuSeconds": 1.234, "cpuCount": 2, "memoryBytes": 70_000_000u64,
            "memoryLimitBytes": null, "processes": 3, "diskBytes": 1_048_576, "diskPartial": true,
            "diskTotalBytes": 10_737_418_240u64, "diskFreeBytes": 5_368_709_120u64});
        assert_eq!(
            render_metrics(&m),
            "cpu        1.23 s used, 2 CPUs\nmemory     66.8 MiB (no limit)\nprocesses  3\ndisk       at least 1.0 MiB in the workspace, 5.0 GiB free of 10.0 GiB\n"
        );
        assert_eq!(bytes(512), "512 B");
    }
}
