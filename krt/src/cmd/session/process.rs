//! `krt session start | ps | attach | kill | shell`: a session's background
//! processes and terminals (docs/sessions.md, "Background processes and
//! terminals").

use std::io::Write as _;
use std::os::fd::AsFd;

use anyhow::{Context as _, bail};
use base64::Engine as _;
use kruntimes_client::gateway::{self, Gateway};
use serde_json::{Value, json};

/// Most bytes of keyboard input sent in one `:input` call.
const INPUT_BATCH: usize = 64 * 1024;

/// Starts a background process; returns its pid.
pub async fn start(gw: &Gateway, url: &str, body: &Value) -> anyhow::Result<u64> {
    let resp = gw
        .http()
        .post(format!("{url}/processes"))
        .json(body)
        .send()
        .await?;
    let v: Value = gateway::check(resp).await?.json().await?;
    v["pid"].as_u64().context("the answer names no pid")
}

/// Prints the session's processes as a table.
pub async fn ps(gw: &Gateway, url: &str) -> anyhow::Result<()> {
    let resp = gw.http().get(format!("{url}/processes")).send().await?;
    let v: Value = gateway::check(resp).await?.json().await?;
    println!(
        "{:<8} {:<8} {:<5} {:<4} {:<20} COMMAND",
        "PID", "STATE", "EXIT", "PTY", "STARTED"
    );
    for p in v["processes"].as_array().into_iter().flatten() {
        let state = if p["running"] == true {
            "running"
        } else {
            "exited"
        };
        let exit = p["exitCode"].as_i64().map_or("-".into(), |c| c.to_string());
        let command = match (&p["command"]["shell"], &p["command"]["argv"]) {
            (Value::String(s), _) => s.clone(),
            (_, Value::Array(a)) => a
                .iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(" "),
            _ => String::new(),
        };
        println!(
            "{:<8} {:<8} {:<5} {:<4} {:<20} {}",
            p["pid"],
            state,
            exit,
            if p["pty"] == true { "yes" } else { "no" },
            p["startedAt"].as_str().unwrap_or("-"),
            command.replace('\n', " ")
        );
    }
    Ok(())
}

/// Sends `signal` (`SIGTERM`, `KILL`, …) to process `pid`.
pub async fn signal(gw: &Gateway, url: &str, pid: u64, signal: &str) -> anyhow::Result<()> {
    let resp = gw
        .http()
        .post(format!("{url}/processes/{pid}:signal"))
        .json(&json!({ "signal": signal }))
        .send()
        .await?;
    gateway::check(resp).await?;
    Ok(())
}

/// Sends `data` to process `pid`'s stdin or terminal.
async fn input(gw: &Gateway, url: &str, pid: u64, data: &[u8]) -> anyhow::Result<()> {
    let body = json!({"dataBase64": base64::engine::general_purpose::STANDARD.encode(data)});
    let resp = gw
        .http()
        .post(format!("{url}/processes/{pid}:input"))
        .json(&body)
        .send()
        .await?;
    gateway::check(resp).await?;
    Ok(())
}

async fn resize(gw: &Gateway, url: &str, pid: u64, (rows, cols): (u16, u16)) -> anyhow::Result<()> {
    let resp = gw
        .http()
        .post(format!("{url}/processes/{pid}:resize"))
        .json(&json!({"rows": rows, "cols": cols}))
        .send()
        .await?;
    gateway::check(resp).await?;
    Ok(())
}

/// One parsed `:connect` line: what to write where, or the exit code.
#[derive(Debug, PartialEq, Eq)]
pub enum Line {
    /// Output for stdout (stdout and a terminal's).
    Stdout(Vec<u8>),
    /// Output for stderr.
    Stderr(Vec<u8>),
    /// Bytes the ring dropped before what follows.
    Lost(u64),
    /// The process ended with this exit code (`None`: unknown).
    Exited(Option<i32>),
    /// A failed stream: the error body.
    Failed(String),
    /// Nothing to do (keepalive, an event type this krt does not know).
    Skip,
}

/// Parses one `:connect` line. Pure.
pub fn parse_line(line: &[u8]) -> anyhow::Result<Line> {
    let ev: Value = serde_json::from_slice(line).context("a connect event that is not JSON")?;
    Ok(match ev["type"].as_str() {
        Some("output") => {
            let data = base64::engine::general_purpose::STANDARD
                .decode(ev["dataBase64"].as_str().unwrap_or_default())
                .context("output that is not base64")?;
            if ev["stream"] == "stderr" {
                Line::Stderr(data)
            } else {
                Line::Stdout(data)
            }
        }
        Some("lost") => Line::Lost(ev["bytes"].as_u64().unwrap_or(0)),
        Some("exited") => Line::Exited(ev["exitCode"].as_i64().map(|c| c as i32)),
        Some("failed") => Line::Failed(ev["error"].to_string()),
        _ => Line::Skip,
    })
}

/// Follows process `pid`'s output to this terminal until it ends; its exit
/// code. `stop` ends the wait early (the process runs on).
pub async fn attach(
    gw: &Gateway,
    url: &str,
    pid: u64,
    stop: impl std::future::Future<Output = ()>,
) -> anyhow::Result<Option<i32>> {
    let resp = gw
        .http()
        .get(format!("{url}/processes/{pid}:connect"))
        .send()
        .await?;
    let mut resp = gateway::check(resp).await?;
    tokio::pin!(stop);
    let mut buf = Vec::new();
    loop {
        let line = tokio::select! {
            l = super::next_line(&mut resp, &mut buf) => l?,
            () = &mut stop => return Ok(None),
        };
        let Some(line) = line else {
            bail!("the output of process {pid} ended before its exit");
        };
        match parse_line(&line)? {
            Line::Stdout(d) => {
                let mut out = std::io::stdout().lock();
                out.write_all(&d)?;
                out.flush()?;
            }
            Line::Stderr(d) => std::io::stderr().write_all(&d)?,
            Line::Lost(n) => eprintln!("[krt: {n} bytes of output were dropped before this]"),
            Line::Exited(code) => return Ok(Some(code.unwrap_or(1))),
            Line::Failed(e) => bail!("the output stream failed: {e}"),
            Line::Skip => {}
        }
    }
}

/// The local terminal in raw mode until dropped.
struct Raw {
    saved: Option<rustix::termios::Termios>,
}

impl Raw {
    fn enter() -> Self {
        let stdin = std::io::stdin();
        let saved = rustix::termios::tcgetattr(stdin.as_fd()).ok();
        if let Some(t) = &saved {
            let mut raw = t.clone();
            raw.make_raw();
            let _ = rustix::termios::tcsetattr(
                stdin.as_fd(),
                rustix::termios::OptionalActions::Now,
                &raw,
            );
        }
        Self { saved }
    }
}

impl Drop for Raw {
    fn drop(&mut self) {
        if let Some(t) = &self.saved {
            let _ = rustix::termios::tcsetattr(
                std::io::stdin().as_fd(),
                rustix::termios::OptionalActions::Now,
                t,
            );
        }
    }
}

/// The local terminal's size, or 24×80.
fn local_size() -> (u16, u16) {
    match rustix::termios::tcgetwinsize(std::io::stdout().as_fd()) {
        Ok(w) if w.ws_row > 0 && w.ws_col > 0 => (w.ws_row, w.ws_col),
        _ => (24, 80),
    }
}

/// `krt session shell`: `argv` on a new terminal in the session, this
/// terminal in raw mode wired to it (keys in, output out, resizes passed
/// on) until it exits; its exit code. Whatever ends it early — the output
/// stream breaking, this terminal hanging up, SIGTERM — restores this
/// terminal and hangs the remote one up (SIGHUP), so nothing is left
/// running in the session.
pub async fn shell(gw: &Gateway, url: &str, argv: Vec<String>) -> anyhow::Result<i32> {
    use tokio::signal::unix::{SignalKind, signal};
    let (rows, cols) = local_size();
    let pid = start(
        gw,
        url,
        &json!({"command": {"argv": argv}, "pty": {"rows": rows, "cols": cols}}),
    )
    .await?;
    let interactive = rustix::termios::isatty(std::io::stdin().as_fd());
    let raw = interactive.then(Raw::enter);
    // Keys are read on a thread of their own: a blocking read cannot be
    // cancelled, and a runtime waits for its blocking tasks when it ends.
    let (keys_tx, mut keys_rx) = tokio::sync::mpsc::channel::<Vec<u8>>(16);
    std::thread::spawn(move || {
        use std::io::Read as _;
        let mut stdin = std::io::stdin();
        let mut buf = vec![0u8; INPUT_BATCH];
        loop {
            match stdin.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if keys_tx.blocking_send(buf[..n].to_vec()).is_err() {
                        return;
                    }
                }
            }
        }
    });
    let keys = {
        let (gw, url) = (gw.clone(), url.to_owned());
        tokio::spawn(async move {
            while let Some(data) = keys_rx.recv().await {
                if input(&gw, &url, pid, &data).await.is_err() {
                    return;
                }
            }
        })
    };
    let resizes = {
        let (gw, url) = (gw.clone(), url.to_owned());
        let mut winch = signal(SignalKind::window_change())?;
        tokio::spawn(async move {
            while winch.recv().await.is_some() {
                let _ = resize(&gw, &url, pid, local_size()).await;
            }
        })
    };
    let mut hangup = signal(SignalKind::hangup())?;
    let mut term = signal(SignalKind::terminate())?;
    // Not a terminal here: Ctrl-C is a signal, not a key.
    let mut interrupt = signal(SignalKind::interrupt())?;
    let stop = async move {
        tokio::select! {
            _ = hangup.recv() => {}
            _ = term.recv() => {}
            _ = interrupt.recv() => {}
        }
    };
    let ended = attach(gw, url, pid, stop).await;
    keys.abort();
    resizes.abort();
    drop(raw);
    match ended {
        Ok(Some(code)) => Ok(code),
        other => {
            // It did not end on its own: it must not run on.
            let _ = signal_process(gw, url, pid, "SIGHUP").await;
            match other {
                Err(e) => Err(e),
                _ => Ok(129),
            }
        }
    }
}

/// [`signal`], under another name inside [`shell`] (whose `signal` is
/// tokio's).
async fn signal_process(gw: &Gateway, url: &str, pid: u64, sig: &str) -> anyhow::Result<()> {
    self::signal(gw, url, pid, sig).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_lines_become_what_the_terminal_shows() {
        let out = br#"{"type":"output","stream":"stdout","dataBase64":"aGkK","offset":3}"#;
        assert_eq!(parse_line(out).unwrap(), Line::Stdout(b"hi\n".to_vec()));
        let pty = br#"{"type":"output","stream":"pty","dataBase64":"G1s=","offset":2}"#;
        assert_eq!(parse_line(pty).unwrap(), Line::Stdout(b"\x1b[".to_vec()));
        let err = br#"{"type":"output","stream":"stderr","dataBase64":"eA==","offset":1}"#;
        assert_eq!(parse_line(err).unwrap(), Line::Stderr(b"x".to_vec()));
        assert_eq!(
            parse_line(br#"{"type":"lost","bytes":10}"#).unwrap(),
            Line::Lost(10)
        );
        assert_eq!(
            parse_line(br#"{"type":"exited","exitCode":137}"#).unwrap(),
            Line::Exited(Some(137))
        );
        assert_eq!(
            parse_line(br#"{"type":"exited","exitCode":null}"#).unwrap(),
            Line::Exited(None)
        );
        assert_eq!(parse_line(br#"{"type":"keepalive"}"#).unwrap(), Line::Skip);
        assert_eq!(parse_line(br#"{"type":"new-kind"}"#).unwrap(), Line::Skip);
        assert!(parse_line(b"not json").is_err());
        assert!(parse_line(br#"{"type":"output","dataBase64":"%%"}"#).is_err());
    }
}
