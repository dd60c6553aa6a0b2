//! `krt up`: the embedded stack on one machine — the control plane in this
//! process, N runtimed instances (each with its own Runtime Server, which
//! runs its user code) and the gateway as supervised child processes, all on
//! loopback with real TLS.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use command_fds::{CommandFdExt as _, FdMapping};
use kruntimes_operator::embedded::{self, EmbeddedConfig, PodConfig, TlsFiles};
use tokio::process::{Child, Command};

use crate::client::ClientConfig;
use crate::pki::{self, Pki};

/// `krt up` options.
#[derive(Debug, Clone, clap::Args)]
pub struct UpArgs {
    /// Directory of Run manifests (default: STATE_DIR/runs).
    #[arg(long)]
    pub runs: Option<PathBuf>,
    /// Gateway HTTPS listen address.
    #[arg(long, default_value = "127.0.0.1:8443")]
    pub gateway_addr: String,
    /// Optional plain HTTP listener of the gateway.
    #[arg(long)]
    pub gateway_http_addr: Option<String>,
    /// Number of runtimed instances.
    #[arg(long, default_value_t = 2)]
    pub runtimed: usize,
    /// Loopback address the runtimed instances listen on: `127.0.0.1`, or
    /// `::1` for an IPv6 stack (their addresses are then `[::1]:PORT`).
    #[arg(long, default_value = "127.0.0.1")]
    pub runtimed_ip: std::net::IpAddr,
    /// `runs` capacity of each runtimed instance.
    #[arg(long, default_value_t = 8)]
    pub capacity: u32,
    /// Lifetime of the generated client token, hours.
    #[arg(long, default_value_t = 24)]
    pub token_ttl_hours: u64,
    /// How long a lost runtimed may stay away before its Runs move, seconds.
    #[arg(long, default_value_t = 5)]
    pub owner_grace_secs: u64,
    /// Gateway worker threads. One is best on small machines, where the
    /// runtimed instances and their workers need the other cores.
    #[arg(long, default_value_t = 1)]
    pub gateway_threads: usize,
    /// Whether the gateway logs one line per invoke.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub gateway_access_log: bool,
    /// Gateway limit of requests in flight (503 `Overloaded` beyond).
    #[arg(long, default_value_t = 4096)]
    pub max_in_flight: usize,
    /// Authenticate and authorize callers against this Kubernetes cluster
    /// (TokenReview + SubjectAccessReview, as the gateway's own identity in
    /// this kubeconfig) instead of the embedded tokens and policy.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Extra flag passed to the gateway as is (repeatable), for example
    /// `--gateway-flag=--authz-allowed-ttl-secs=10`.
    #[arg(long = "gateway-flag", allow_hyphen_values = true)]
    pub gateway_flags: Vec<String>,
    /// Extra flag passed to every runtimed as is (repeatable), for example
    /// `--runtimed-flag=--max-connections=256`.
    #[arg(long = "runtimed-flag", allow_hyphen_values = true)]
    pub runtimed_flags: Vec<String>,
    /// Exit when the parent process exits (used by test harnesses).
    #[arg(long, hide = true)]
    pub exit_with_parent: bool,
}

struct Supervised {
    name: String,
    address: String,
    args: Vec<String>,
    /// The whole environment, when the child must not inherit krt's.
    env: Option<Vec<(String, String)>>,
    /// Variables added to the environment it inherits: settings that must
    /// not show in its command line (`/proc/PID/cmdline` is readable by
    /// every process of the machine).
    extra_env: Vec<(String, String)>,
    /// Its metrics listener, if it has one (the gateway).
    metrics: Option<String>,
    /// A listener krt bound for it, handed over at its next start
    /// ([`Supervised::hand_over`]).
    handover: Option<std::net::TcpListener>,
    log: PathBuf,
    /// Where its log ended when it was last started: what it wrote since
    /// is this run's.
    log_start: u64,
    child: Option<Child>,
    restarts: u32,
    next_start: Option<Instant>,
}

impl Supervised {
    fn new(name: String, address: String, args: Vec<String>, log: PathBuf) -> Self {
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

    fn spawn(&mut self, exe: &Path) -> anyhow::Result<()> {
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
    fn hand_over(&mut self, listener: std::net::TcpListener) {
        self.handover = Some(listener);
    }

    /// Serves its metrics on `addr` (the gateway), from its next start.
    fn set_metrics(&mut self, addr: SocketAddr) {
        let addr = addr.to_string();
        match self.args.iter().position(|a| a == "--metrics-listen") {
            Some(i) if i + 1 < self.args.len() => self.args[i + 1] = addr.clone(),
            _ => self.args.extend(["--metrics-listen".into(), addr.clone()]),
        }
        self.metrics = Some(addr);
    }

    /// What it logged since it was last started (the log is appended to
    /// across runs of `krt up` and restarts).
    fn log_of_this_run(&self) -> String {
        use std::io::{Read as _, Seek as _};
        let mut text = Vec::new();
        if let Ok(mut log) = std::fs::File::open(&self.log) {
            let _ = log
                .seek(std::io::SeekFrom::Start(self.log_start))
                .and_then(|_| log.read_to_end(&mut text));
        }
        String::from_utf8_lossy(&text).into_owned()
    }

    fn pid(&self) -> Option<u32> {
        self.child.as_ref().and_then(Child::id)
    }
}

/// How many metrics ports `krt up` tries before giving up on a start.
const METRICS_PICKS: u32 = 4;

/// Whether a gateway's failure is its metrics address being taken (the
/// gateway binds it at start, first of its listeners).
fn metrics_address_taken(failure: &str) -> bool {
    failure.contains("cannot listen for metrics") && failure.contains("Address already in use")
}

/// A listener on a port of the kernel's choosing at `ip`, kept bound.
fn bind_port(ip: std::net::IpAddr) -> anyhow::Result<(SocketAddr, std::net::TcpListener)> {
    let l =
        std::net::TcpListener::bind((ip, 0)).with_context(|| format!("cannot listen on {ip}"))?;
    Ok((l.local_addr()?, l))
}

fn free_port(ip: std::net::IpAddr) -> anyhow::Result<SocketAddr> {
    let l = std::net::TcpListener::bind((ip, 0))?;
    Ok(l.local_addr()?)
}

fn write_json(path: &Path, v: &impl serde::Serialize) -> anyhow::Result<()> {
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, serde_json::to_vec_pretty(v)?)?;
    std::fs::rename(tmp, path)?;
    Ok(())
}

/// Writes a secret JSON file that is 0600 from its creation on (never
/// readable by others, not even between a write and a chmod).
fn write_private_json(path: &Path, v: &impl serde::Serialize) -> anyhow::Result<()> {
    let tmp = path.with_extension("json.tmp");
    let _ = std::fs::remove_file(&tmp);
    kruntimes_certs::write_private(&tmp, &serde_json::to_vec_pretty(v)?)?;
    std::fs::rename(tmp, path)?;
    Ok(())
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

/// A runtimed: its settings in its environment, so that its command line —
/// which user code can read in `/proc` — names nothing of the stack.
fn runtimed(
    pki: &Pki,
    name: &str,
    addr: SocketAddr,
    runtime_server: &Path,
    log: PathBuf,
) -> Supervised {
    let mut d = Supervised::new(
        name.into(),
        addr.to_string(),
        vec!["runtimed".into(), "--exit-with-parent".into()],
        log,
    );
    d.extra_env = [
        ("KRUNTIMES_RUNTIMED_NAME", name.to_owned()),
        ("KRUNTIMES_RUNTIMED_LISTEN", addr.to_string()),
        ("KRUNTIMES_RUNTIMED_TLS_CERT", s(&pki.tls.runtimed_cert)),
        ("KRUNTIMES_RUNTIMED_TLS_KEY", s(&pki.tls.runtimed_key)),
        ("KRUNTIMES_RUNTIMED_CLIENT_CA", s(&pki.tls.internal_ca)),
        ("KRUNTIMES_RUNTIMED_RUNTIME_SERVER", s(runtime_server)),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    d
}

/// A Runtime Server for one runtimed: its socket in a directory only this
/// user may enter, its own work root and temporary directory, a clean
/// environment (PATH to find the interpreters, RUST_LOG for its logs — none
/// of krt's secrets or settings), and the state directory protected from
/// its file-system allowlist: user code can reach neither runtimed's keys
/// nor its environment.
fn runtime_server(
    state_dir: &Path,
    logs: &Path,
    runtimed: &str,
) -> anyhow::Result<(Supervised, PathBuf)> {
    use std::os::unix::fs::PermissionsExt;
    let sockets = state_dir.join("sockets").join(runtimed);
    std::fs::create_dir_all(&sockets)?;
    for dir in [sockets.parent().unwrap_or(&sockets), sockets.as_path()] {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    }
    let socket = sockets.join("runtime.sock");
    let work = state_dir.join("work").join(runtimed);
    std::fs::create_dir_all(&work)?;
    let tmp = state_dir.join("tmp").join(runtimed);
    std::fs::create_dir_all(&tmp)?;
    let name = format!(
        "runtime-server-{}",
        runtimed.trim_start_matches("runtimed-")
    );
    let args = vec![
        "runtime-server".into(),
        "--exit-with-parent".into(),
        "--socket".into(),
        s(&socket),
        "--work-root".into(),
        s(&work),
        "--protect".into(),
        s(state_dir),
    ];
    let mut server = Supervised::new(
        name.clone(),
        s(&socket),
        args,
        logs.join(format!("{name}.log")),
    );
    let mut env: Vec<(String, String)> = ["PATH", "RUST_LOG"]
        .into_iter()
        .filter_map(|k| std::env::var(k).ok().map(|v| (k.to_owned(), v)))
        .collect();
    env.push(("TMPDIR".into(), s(&tmp)));
    server.env = Some(env);
    Ok((server, socket))
}

fn gateway_args(pki: &Pki, args: &UpArgs, control: SocketAddr) -> Vec<String> {
    let mut v = vec![
        "gateway".into(),
        "--exit-with-parent".into(),
        "--https-listen".into(),
        args.gateway_addr.clone(),
        "--tls-cert".into(),
        s(&pki.tls.gateway_cert),
        "--tls-key".into(),
        s(&pki.tls.gateway_key),
        "--control-plane".into(),
        control.to_string(),
        "--internal-ca".into(),
        s(&pki.tls.internal_ca),
        "--client-cert".into(),
        s(&pki.tls.gateway_client_cert),
        "--client-key".into(),
        s(&pki.tls.gateway_client_key),
        "--max-in-flight".into(),
        args.max_in_flight.to_string(),
        "--threads".into(),
        args.gateway_threads.to_string(),
        "--access-log".into(),
        args.gateway_access_log.to_string(),
    ];
    match &args.kubeconfig {
        Some(kubeconfig) => v.extend([
            "--auth".into(),
            "kubernetes".into(),
            "--kubeconfig".into(),
            s(kubeconfig),
        ]),
        None => v.extend([
            "--auth".into(),
            "jwt".into(),
            "--jwt-public-key".into(),
            s(&pki.jwt_public),
            "--policy".into(),
            s(&pki.policy),
        ]),
    }
    if let Some(h) = &args.gateway_http_addr {
        v.push("--http-listen".into());
        v.push(h.clone());
    }
    v.extend(args.gateway_flags.iter().cloned());
    v
}

/// How `c` ended, once it has (never, if it was not started).
async fn exited(c: &mut Supervised) -> String {
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
fn failure_of(log: &str) -> &str {
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
fn last_lines(text: &str, n: usize) -> &str {
    if n == 0 {
        return "";
    }
    let text = text.trim_end_matches('\n');
    match text.rmatch_indices('\n').nth(n - 1) {
        Some((i, _)) => &text[i + 1..],
        None => text,
    }
}

async fn wait_ready(client: &reqwest::Client, url: &str, deadline: Duration) -> anyhow::Result<()> {
    let start = Instant::now();
    loop {
        if let Ok(r) = client.get(url).send().await
            && r.status().is_success()
        {
            return Ok(());
        }
        if start.elapsed() > deadline {
            anyhow::bail!("gateway did not become ready at {url} within {deadline:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Runs the stack until SIGINT/SIGTERM.
pub async fn up(state_dir: &Path, args: UpArgs) -> anyhow::Result<()> {
    let exe = std::env::current_exe().context("locate the krt executable")?;
    std::fs::create_dir_all(state_dir)?;
    let state_dir = state_dir.canonicalize()?;
    let runs_dir = args.runs.clone().unwrap_or_else(|| state_dir.join("runs"));
    std::fs::create_dir_all(&runs_dir)?;
    let runs_dir = runs_dir.canonicalize()?;
    let logs = state_dir.join("logs");
    std::fs::create_dir_all(&logs)?;
    let pki = pki::generate(&state_dir.join("pki"))?;
    let token = pki::issue_token(
        &pki.jwt_private,
        "krt-admin",
        &[pki::ADMIN_GROUP.to_owned()],
        Duration::from_secs(args.token_ttl_hours * 3600),
    )?;

    let control_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let control_addr = control_listener.local_addr()?;
    let gateway_url = format!(
        "https://{}",
        args.gateway_addr.replace("0.0.0.0", "127.0.0.1")
    );

    let mut children = Vec::new();
    let mut pods = Vec::new();
    for i in 0..args.runtimed {
        let name = format!("runtimed-{i}");
        // Bound here and handed over: never free for another process to
        // take between this pick and runtimed's start.
        let (addr, listener) = bind_port(args.runtimed_ip)?;
        pods.push(PodConfig {
            name: name.clone(),
            address: addr.to_string(),
            capacity: args.capacity,
        });
        let (server, socket) = runtime_server(&state_dir, &logs, &name)?;
        children.push(server);
        let mut d = runtimed(&pki, &name, addr, &socket, logs.join(format!("{name}.log")));
        d.args.extend(args.runtimed_flags.iter().cloned());
        d.hand_over(listener);
        children.push(d);
    }
    let metrics_addr = free_port(std::net::Ipv4Addr::LOCALHOST.into())?;
    let mut gateway = Supervised::new(
        "gateway".into(),
        args.gateway_addr.clone(),
        gateway_args(&pki, &args, control_addr),
        logs.join("gateway.log"),
    );
    gateway.set_metrics(metrics_addr);
    children.push(gateway);
    let gateway_at = children.len() - 1;
    for c in &mut children {
        c.spawn(&exe)?;
    }

    let client_cfg = ClientConfig {
        gateway: gateway_url.clone(),
        ca_file: pki.tls.public_ca.clone(),
        token,
        internal_ca_file: Some(pki.tls.internal_ca.clone()),
        control_plane: Some(control_addr.to_string()),
        runs_dir: Some(runs_dir.clone()),
    };
    write_private_json(&state_dir.join("client.json"), &client_cfg)?;

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let cp_cfg = EmbeddedConfig {
        runs_dir: runs_dir.clone(),
        state_dir: state_dir.clone(),
        pods,
        gateway_url: gateway_url.clone(),
        tls: TlsFiles {
            ca: pki.tls.internal_ca.clone(),
            cert: pki.tls.control_cert.clone(),
            key: pki.tls.control_key.clone(),
        },
        runtimed_server_name: pki::RUNTIMED_SERVER_NAME.into(),
        owner_grace: Duration::from_secs(args.owner_grace_secs),
    };
    let mut cp_stop = stop_rx.clone();
    let mut control = tokio::spawn(async move {
        embedded::run(cp_cfg, control_listener, async move {
            let _ = cp_stop.wait_for(|s| *s).await;
        })
        .await
    });

    let http = crate::client::http_client(&client_cfg)?;
    let readyz = format!("{gateway_url}/readyz");
    // The metrics port was free when picked, but another process may bind
    // it before the gateway does: a port of krt's own choosing is picked
    // again, a few times.
    let mut metrics_picks = 1;
    loop {
        tokio::select! {
            r = wait_ready(&http, &readyz, Duration::from_secs(60)) => {
                r?;
                break;
            }
            r = &mut control => {
                anyhow::bail!("control plane stopped during start-up: {:?}", r);
            }
            // A gateway that cannot start (an address taken, a bad flag) is
            // reported at once, in its own words, not after the wait.
            status = exited(&mut children[gateway_at]) => {
                let gateway = &mut children[gateway_at];
                let text = gateway.log_of_this_run();
                let failure = failure_of(&text);
                if metrics_picks < METRICS_PICKS && metrics_address_taken(failure) {
                    metrics_picks += 1;
                    tracing::warn!(taken = ?gateway.metrics, "the gateway's metrics port was taken; picking another");
                    gateway.set_metrics(free_port(std::net::Ipv4Addr::LOCALHOST.into())?);
                    gateway.spawn(&exe)?;
                    continue;
                }
                anyhow::bail!(
                    "the gateway exited during start-up ({status}); from {}:\n{}",
                    gateway.log.display(),
                    failure
                );
            }
        }
    }
    write_processes(&state_dir, &children)?;
    println!(
        "kruntimes ready: gateway {gateway_url}, runs from {}, state in {} (Ctrl-C to stop)",
        runs_dir.display(),
        state_dir.display()
    );

    let parent = crate::parent_pid();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut poll = tokio::time::interval(Duration::from_millis(200));
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break,
            _ = term.recv() => break,
            r = &mut control => {
                tracing::error!(result = ?r, "control plane stopped");
                break;
            }
            _ = poll.tick() => {
                if args.exit_with_parent && crate::parent_pid() != parent {
                    break;
                }
                if supervise(&exe, &mut children)? {
                    write_processes(&state_dir, &children)?;
                }
            }
        }
    }
    println!("kruntimes stopping");
    let _ = stop_tx.send(true);
    for c in &mut children {
        if let Some(pid) = c.pid() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
    }
    for c in &mut children {
        if let Some(child) = c.child.as_mut()
            && tokio::time::timeout(Duration::from_secs(5), child.wait())
                .await
                .is_err()
        {
            let _ = child.kill().await;
        }
    }
    let _ = tokio::time::timeout(Duration::from_secs(3), control).await;
    Ok(())
}

/// Restarts children that exited, with exponential backoff. Returns whether
/// any pid changed.
fn supervise(exe: &Path, children: &mut [Supervised]) -> anyhow::Result<bool> {
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

/// `STATE_DIR/processes.json`: each child's pid and listen address.
fn write_processes(state_dir: &Path, children: &[Supervised]) -> anyhow::Result<()> {
    let map: BTreeMap<&str, serde_json::Value> = children
        .iter()
        .map(|c| {
            (
                c.name.as_str(),
                match &c.metrics {
                    Some(m) => {
                        serde_json::json!({"pid": c.pid(), "address": c.address, "metrics": m})
                    }
                    None => serde_json::json!({"pid": c.pid(), "address": c.address}),
                },
            )
        })
        .collect();
    write_json(&state_dir.join("processes.json"), &map)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::{Supervised, failure_of, last_lines, metrics_address_taken};

    #[test]
    fn a_failure_is_the_last_error_report_without_its_backtrace() {
        let log = "{\"level\":\"INFO\"}\nError: first\nError: bind 127.0.0.1:1 (https): Address in use\n\nCaused by:\n    x\n\nStack backtrace:\n   0: main\n";
        assert_eq!(
            failure_of(log),
            "Error: bind 127.0.0.1:1 (https): Address in use\n\nCaused by:\n    x"
        );
        assert_eq!(failure_of("Error: at once\n"), "Error: at once");
        // A panic or a kill leaves no report: the end of the log.
        let panicked = "line 1\nthread 'main' panicked at src/x.rs:1:1:\nboom\n";
        assert_eq!(failure_of(panicked), panicked.trim_end());
        assert_eq!(failure_of(""), "");
    }

    #[test]
    fn only_a_taken_metrics_address_is_picked_again() {
        // As the gateway reports it (anyhow's context, then the cause).
        let taken = "Error: cannot listen for metrics on 127.0.0.1:9091\n\nCaused by:\n    Address already in use (os error 98)";
        assert!(metrics_address_taken(taken));
        // The public address is the user's choice: reported, not replaced.
        assert!(!metrics_address_taken(
            "Error: bind 127.0.0.1:8443 (https): Address already in use (os error 98)"
        ));
        // A metrics address that is bad for another reason stays an error.
        assert!(!metrics_address_taken(
            "Error: cannot listen for metrics on 10.9.9.9:1\n\nCaused by:\n    Cannot assign requested address (os error 99)"
        ));
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
