//! The children of `krt up`: starting them (a listener handed over, a
//! clean or added environment), reading what a start logged, restarting
//! them with backoff.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use command_fds::{CommandFdExt as _, FdMapping};
use tokio::process::{Child, Command};

/// A child process of `krt up`: how to start it, its log, its restarts.
pub(super) struct Supervised {
    pub(super) name: String,
    pub(super) address: String,
    pub(super) args: Vec<String>,
    /// The whole environment, when the child must not inherit krt's.
    pub(super) env: Option<Vec<(String, String)>>,
    /// Variables added to the environment it inherits: settings that must
    /// not show in its command line (`/proc/PID/cmdline` is readable by
    /// every process of the machine).
    pub(super) extra_env: Vec<(String, String)>,
    /// Its metrics listener, if it has one (the gateway).
    pub(super) metrics: Option<String>,
    /// A listener krt bound for it, handed over at its next start
    /// ([`Supervised::hand_over`]).
    handover: Option<std::net::TcpListener>,
    pub(super) log: PathBuf,
    /// Where its log ended when it was last started: what it wrote since
    /// is this run's.
    log_start: u64,
    pub(super) child: Option<Child>,
    restarts: u32,
    next_start: Option<Instant>,
}

impl Supervised {
    pub(super) fn new(name: String, address: String, args: Vec<String>, log: PathBuf) -> Self {
        Self {
            name,
            address,
            args,
            env: None,
            extra_env: Vec::new(),
            metrics: None,
            handover: None,
            log,
            log_start: 0,
            child: None,
            restarts: 0,
            next_start: None,
        }
    }

    pub(super) fn spawn(&mut self, exe: &Path) -> anyhow::Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .with_context(|| format!("open {}", self.log.display()))?;
        self.log_start = log.metadata().map(|m| m.len()).unwrap_or(0);
        let mut cmd = Command::new(exe);
        if let Some(env) = &self.env {
            cmd.env_clear().envs(env.iter().cloned());
        }
        cmd.envs(self.extra_env.iter().cloned());
        // No child takes krt's own socket-activation variables for its own.
        for var in [
            "LISTEN_FDS",
            "LISTEN_PID",
            "LISTEN_FDNAMES",
            "LISTEN_FDS_FIRST_FD",
        ] {
            cmd.env_remove(var);
        }
        if let Some(listener) = self.handover.take() {
            // Systemd's protocol: descriptor 3, `LISTEN_FDS=1`, no
            // `LISTEN_PID` (the child's pid is not known before it starts).
            cmd.fd_mappings(vec![FdMapping {
                parent_fd: listener.into(),
                child_fd: 3,
            }])
            .map_err(|_| anyhow::anyhow!("descriptor 3 handed over twice to {}", self.name))?;
            cmd.env("LISTEN_FDS", "1");
        }
        let child = cmd
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("start {}", self.name))?;
        tracing::info!(name = %self.name, pid = child.id(), "started");
        self.child = Some(child);
        self.next_start = None;
        Ok(())
    }

    /// Hands `listener` over at its next start (systemd's socket
    /// activation, which runtimed takes): the port stays bound from krt's
    /// pick to the child's first accept. krt keeps no copy once the child
    /// started; a restart binds the address again.
    pub(super) fn hand_over(&mut self, listener: std::net::TcpListener) {
        self.handover = Some(listener);
    }

    /// Serves its metrics on `addr` (the gateway), from its next start.
    pub(super) fn set_metrics(&mut self, addr: SocketAddr) {
        let addr = addr.to_string();
        match self.args.iter().position(|a| a == "--metrics-listen") {
            Some(i) if i + 1 < self.args.len() => self.args[i + 1] = addr.clone(),
            _ => self.args.extend(["--metrics-listen".into(), addr.clone()]),
        }
        self.metrics = Some(addr);
    }

    /// What it logged since it was last started (the log is appended to
    /// across runs of `krt up` and restarts).
    pub(super) fn log_of_this_run(&self) -> String {
        use std::io::{Read as _, Seek as _};
        let mut text = Vec::new();
        if let Ok(mut log) = std::fs::File::open(&self.log) {
            let _ = log
                .seek(std::io::SeekFrom::Start(self.log_start))
                .and_then(|_| log.read_to_end(&mut text));
        }
        String::from_utf8_lossy(&text).into_owned()
    }

    pub(super) fn pid(&self) -> Option<u32> {
        self.child.as_ref().and_then(Child::id)
    }
}

/// How `c` ended, once it has (never, if it was not started).
pub(super) async fn exited(c: &mut Supervised) -> String {
    match c.child.as_mut() {
        // Cancel-safe: the start-up `select!` drops it when ready.
        Some(child) => match child.wait().await {
            Ok(status) => status.to_string(),
            Err(e) => format!("lost: {e}"),
        },
        None => std::future::pending().await,
    }
}

/// Why a process failed, from its log: its last `Error: ` report (which is
/// how a `main` returning an error ends), without the backtrace
/// `RUST_BACKTRACE` adds; else the log's last 20 lines.
pub(super) fn failure_of(log: &str) -> &str {
    let report = log
        .rfind("\nError: ")
        .map(|i| i + 1)
        .or_else(|| log.starts_with("Error: ").then_some(0));
    match report {
        Some(at) => {
            let report = &log[at..];
            let end = report.find("\n\nStack backtrace:").unwrap_or(report.len());
            report[..end].trim_end()
        }
        None => last_lines(log, 20),
    }
}

/// The last `n` lines of `text`.
pub(super) fn last_lines(text: &str, n: usize) -> &str {
    if n == 0 {
        return "";
    }
    let text = text.trim_end_matches('\n');
    match text.rmatch_indices('\n').nth(n - 1) {
        Some((i, _)) => &text[i + 1..],
        None => text,
    }
}

/// Restarts children that exited, with exponential backoff. Returns whether
/// any pid changed.
pub(super) fn supervise(exe: &Path, children: &mut [Supervised]) -> anyhow::Result<bool> {
    let mut changed = false;
    for c in children.iter_mut() {
        if let Some(child) = c.child.as_mut()
            && let Ok(Some(status)) = child.try_wait()
        {
            c.restarts += 1;
            let backoff = Duration::from_millis(200 * 2u64.pow(c.restarts.min(5)));
            tracing::warn!(name = %c.name, %status, restart_in = ?backoff, "child exited; restarting");
            c.child = None;
            c.next_start = Some(Instant::now() + backoff);
            changed = true;
        }
        if c.child.is_none() && c.next_start.is_some_and(|t| t <= Instant::now()) {
            c.spawn(exe)?;
            changed = true;
        }
    }
    Ok(changed)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::{Supervised, failure_of, last_lines};
    use crate::up::metrics_address_taken;

    #[test]
    fn a_failure_is_the_last_error_report_without_its_backtrace() {
        let log = "{\"level\":\"INFO\"}\nError: first\nError: cannot listen for https on 127.0.0.1:1: Address in use\n\nCaused by:\n    x\n\nStack backtrace:\n   0: main\n";
        assert_eq!(
            failure_of(log),
            "Error: cannot listen for https on 127.0.0.1:1: Address in use\n\nCaused by:\n    x"
        );
        assert_eq!(failure_of("Error: at once\n"), "Error: at once");
        // A panic or a kill leaves no report: the end of the log.
        let panicked = "line 1\nthread 'main' panicked at src/x.rs:1:1:\nboom\n";
        assert_eq!(failure_of(panicked), panicked.trim_end());
        assert_eq!(failure_of(""), "");
    }

    #[test]
    fn a_new_metrics_address_replaces_the_old_one() {
        let mut g = Supervised::new(
            "gateway".into(),
            "127.0.0.1:8443".into(),
            vec!["--threads".into(), "1".into()],
            "gateway.log".into(),
        );
        g.set_metrics("127.0.0.1:1001".parse().unwrap());
        g.set_metrics("127.0.0.1:1002".parse().unwrap());
        assert_eq!(
            g.args,
            ["--threads", "1", "--metrics-listen", "127.0.0.1:1002"]
        );
        assert_eq!(g.metrics.as_deref(), Some("127.0.0.1:1002"));
    }

    #[test]
    fn a_failure_is_read_from_what_the_last_start_logged() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("gateway.log");
        // An earlier run's report stays in the appended log ...
        std::fs::write(
            &log,
            "Error: cannot listen for metrics on 127.0.0.1:1\n\nCaused by:\n    Address already in use (os error 98)\n",
        )
        .unwrap();
        let mut g = Supervised::new(
            "gateway".into(),
            "127.0.0.1:8443".into(),
            vec![
                "-c".into(),
                "echo \"thread 'main' panicked at x.rs:1:1\"".into(),
            ],
            log.clone(),
        );
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            g.spawn(Path::new("/bin/sh")).unwrap();
            g.child.as_mut().unwrap().wait().await.unwrap();
        });
        // ... but this start's failure is only what it wrote itself.
        let this_run = g.log_of_this_run();
        assert_eq!(this_run, "thread 'main' panicked at x.rs:1:1\n");
        assert!(!metrics_address_taken(failure_of(&this_run)));
    }

    #[test]
    fn a_listener_is_handed_over_at_the_next_start_only() {
        use std::os::fd::AsFd as _;
        let dir = tempfile::tempdir().unwrap();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let inode = nix::sys::stat::fstat(listener.as_fd()).unwrap().st_ino;
        let addr = listener.local_addr().unwrap();
        let mut d = Supervised::new(
            "runtimed-0".into(),
            listener.local_addr().unwrap().to_string(),
            vec![
                "-c".into(),
                "echo \"fds=${LISTEN_FDS:-none} pid=${LISTEN_PID:-none} $(readlink /proc/self/fd/3)\"".into(),
            ],
            dir.path().join("runtimed.log"),
        );
        d.hand_over(listener);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let mut start = || {
            rt.block_on(async {
                d.spawn(Path::new("/bin/sh")).unwrap();
                d.child.as_mut().unwrap().wait().await.unwrap();
            });
            d.log_of_this_run()
        };
        // Descriptor 3 is krt's listener, announced as systemd does.
        assert_eq!(start(), format!("fds=1 pid=none socket:[{inode}]\n"));
        // krt kept no copy: with the child gone, nothing listens there ...
        assert!(std::net::TcpStream::connect(addr).is_err());
        // ... and a restart binds the address itself.
        assert_eq!(start(), "fds=none pid=none \n");
    }

    #[test]
    fn last_lines_keeps_the_end_of_a_log() {
        let log = "a\nb\nc\n";
        assert_eq!(last_lines(log, 2), "b\nc");
        assert_eq!(last_lines(log, 3), "a\nb\nc");
        assert_eq!(last_lines(log, 10), "a\nb\nc");
        assert_eq!(last_lines(log, 1), "c");
        assert_eq!(last_lines(log, 0), "");
        assert_eq!(last_lines("", 5), "");
        assert_eq!(last_lines("only", 1), "only");
    }
}
