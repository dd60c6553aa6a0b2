//! `krt up`: the embedded stack on one machine — the control plane in this
//! process, a pool of runtimed instances (each with its own Runtime Server,
//! which runs its user code) that follows demand, and the gateway as
//! supervised child processes, all on loopback with real TLS.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use kruntimes_operator::embedded::artifacts::ArtifactMaintenance;
use kruntimes_operator::embedded::{self, EmbeddedConfig, Instances, PodConfig, TlsFiles};

use crate::client::ClientConfig;

mod args;
mod instances;
mod ready;
mod supervised;

pub use args::UpArgs;

use crate::pki::{self, Pki};
use supervised::{Supervised, exited, failure_of, supervise};

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

/// The state directory's folders, created and resolved.
struct Dirs {
    state: PathBuf,
    /// `STATE_DIR/runs`: the manifests clients write.
    runs: PathBuf,
    /// `--runs`, when it is another directory: the user's own.
    manifests: Option<PathBuf>,
    logs: PathBuf,
    /// Where task Runs' artifacts go (`None`: `--artifacts off`).
    artifacts: Option<kruntimes_artifacts::StoreConfig>,
}

impl Dirs {
    fn create(state_dir: &Path, args: &UpArgs) -> anyhow::Result<Self> {
        std::fs::create_dir_all(state_dir)?;
        let state = state_dir.canonicalize()?;
        let runs = state.join("runs");
        std::fs::create_dir_all(&runs)?;
        let manifests = match &args.runs {
            Some(dir) => {
                std::fs::create_dir_all(dir)?;
                Some(dir.canonicalize()?).filter(|d| *d != runs)
            }
            None => None,
        };
        let logs = state.join("logs");
        std::fs::create_dir_all(&logs)?;
        let artifacts = args.artifact_store(&state)?;
        Ok(Self {
            state,
            runs,
            manifests,
            logs,
            artifacts,
        })
    }

    /// The watched directories: the user's first, then the clients'.
    fn watched(&self) -> Vec<PathBuf> {
        self.manifests
            .iter()
            .chain(std::iter::once(&self.runs))
            .cloned()
            .collect()
    }
}

/// The stack's processes, not yet started: the first instances (each a
/// Runtime Server and its runtimed), then the gateway.
struct Processes {
    children: Vec<Supervised>,
    pods: Vec<PodConfig>,
    gateway_at: usize,
}

impl Processes {
    fn plan(pki: &Pki, args: &UpArgs, dirs: &Dirs, control: SocketAddr) -> anyhow::Result<Self> {
        let mut children = Vec::new();
        let mut pods = Vec::new();
        for i in 0..args.runtimed {
            let (pod, processes) = instances::plan(pki, args, dirs, &format!("runtimed-{i}"))?;
            pods.push(pod);
            children.extend(processes);
        }
        let mut gateway = Supervised::new(
            "gateway".into(),
            args.gateway_addr.clone(),
            gateway_args(pki, args, control),
            dirs.logs.join("gateway.log"),
        );
        gateway.set_metrics(free_port(std::net::Ipv4Addr::LOCALHOST.into())?);
        children.push(gateway);
        Ok(Self {
            gateway_at: children.len() - 1,
            children,
            pods,
        })
    }
}

/// Runs the stack until SIGINT/SIGTERM.
pub async fn up(state_dir: &Path, args: UpArgs) -> anyhow::Result<()> {
    let exe = std::env::current_exe().context("locate the krt executable")?;
    let pool = args.pool()?;
    let dirs = Dirs::create(state_dir, &args)?;
    let gateway_url = format!(
        "https://{}",
        args.gateway_addr.replace("0.0.0.0", "127.0.0.1")
    );
    // Before anything of the state directory is written: one stack each.
    let _lock = kruntimes_client::stack_lock::StackLock::acquire(&dirs.state, &gateway_url)?;
    let pki = pki::generate(&dirs.state.join("pki"))?;
    let token = pki::issue_token(
        &pki.jwt_private,
        "krt-admin",
        &[pki::ADMIN_GROUP.to_owned()],
        Duration::from_secs(args.token_ttl_hours * 3600),
    )?;

    let control_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let control_addr = control_listener.local_addr()?;
    let Processes {
        mut children,
        pods,
        gateway_at,
    } = Processes::plan(&pki, &args, &dirs, control_addr)?;
    for c in &mut children {
        c.spawn(&exe)?;
    }

    let client_cfg = ClientConfig {
        gateway: gateway_url.clone(),
        ca_file: pki.tls.public_ca.clone(),
        token,
        internal_ca_file: Some(pki.tls.internal_ca.clone()),
        control_plane: Some(control_addr.to_string()),
        runs_dir: Some(dirs.runs.clone()),
        manifests_dir: dirs.manifests.clone(),
    };
    write_private_json(&dirs.state.join("client.json"), &client_cfg)?;

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let cp_cfg = EmbeddedConfig {
        runs_dirs: dirs.watched(),
        state_dir: dirs.state.clone(),
        pods,
        gateway_url: gateway_url.clone(),
        tls: TlsFiles {
            ca: pki.tls.internal_ca.clone(),
            cert: pki.tls.control_cert.clone(),
            key: pki.tls.control_key.clone(),
        },
        runtimed_server_name: pki::RUNTIMED_SERVER_NAME.into(),
        owner_grace: Duration::from_secs(args.owner_grace_secs),
        artifacts: match &dirs.artifacts {
            Some(store) => Some(ArtifactMaintenance {
                store: kruntimes_artifacts::Store::open(
                    store,
                    kruntimes_artifacts::Credentials::from_env().map_err(anyhow::Error::msg)?,
                )
                .context("open the artifact store")?,
                retain: args.artifacts_retain_secs.map(Duration::from_secs),
                every: Duration::from_secs(args.artifacts_sweep_secs),
                grace: Duration::from_secs(args.artifacts_orphan_grace_secs),
            }),
            None => None,
        },
    };
    let (instances, mut launcher) = match pool {
        Some(pool) => {
            let (requests, requests_rx) = tokio::sync::mpsc::unbounded_channel();
            let (reports_tx, reports) = tokio::sync::mpsc::unbounded_channel();
            (
                Some(Instances {
                    pool,
                    requests,
                    reports,
                }),
                Some(instances::Launcher::new(requests_rx, reports_tx)),
            )
        }
        None => (None, None),
    };
    let mut cp_stop = stop_rx.clone();
    let mut control = tokio::spawn(async move {
        embedded::run(
            cp_cfg,
            control_listener,
            async move {
                let _ = cp_stop.wait_for(|s| *s).await;
            },
            instances,
        )
        .await
    });

    let http = crate::client::http_client(&client_cfg)?;
    let readyz = format!("{gateway_url}/readyz");
    gateway_started(
        &exe,
        &http,
        &readyz,
        &mut children[gateway_at],
        &mut control,
    )
    .await?;
    write_processes(&dirs.state, &children)?;
    // Ready means ready: the Runs it starts with are Ready and routed (or
    // ended, or named as still waiting). Meanwhile the stack is supervised
    // and its pool served: those Runs may need instances it starts.
    let first: std::collections::BTreeSet<String> = embedded::store::scan_all(&dirs.watched())
        .runs
        .into_keys()
        .collect();
    let announce = {
        let state = dirs.state.clone();
        let runs_from = dirs
            .watched()
            .iter()
            .map(|d| d.display().to_string())
            .collect::<Vec<_>>()
            .join(" and ");
        let (http, token) = (http.clone(), client_cfg.token.clone());
        let gateway_url = gateway_url.clone();
        // With --kubeconfig the gateway takes the cluster's tokens, not
        // krt's own: it cannot be asked, and `Ready` is the control plane's.
        let probe = args.kubeconfig.is_none();
        tokio::spawn(async move {
            let settled = ready::settle(&state, &first, ready::WAIT, |endpoint, session| {
                let (http, token) = (http.clone(), token.clone());
                async move {
                    !probe
                        || kruntimes_client::gateway::routes(
                            &http,
                            Some(&token),
                            &endpoint,
                            session,
                        )
                        .await
                }
            })
            .await;
            println!(
                "kruntimes ready: gateway {gateway_url}, runs from {runs_from}, state in {}; {} (Ctrl-C to stop)",
                state.display(),
                settled.summary()
            );
        })
    };

    let stack = StackRef {
        exe: &exe,
        pki: &pki,
        args: &args,
        dirs: &dirs,
    };
    supervise_until_stopped(&stack, &mut children, launcher.as_mut(), &mut control).await?;
    announce.abort();
    println!("kruntimes stopping");
    let _ = stop_tx.send(true);
    stop_within(&mut children, Duration::from_secs(5)).await;
    let _ = tokio::time::timeout(Duration::from_secs(3), control).await;
    Ok(())
}

/// Waits until the gateway answers `readyz`. A gateway that cannot start
/// (an address taken, a bad flag) is reported at once, in its own words,
/// not after the wait — except a taken metrics port: it was free when
/// picked, but another process may bind it before the gateway does, so a
/// port of krt's own choosing is picked again, a few times.
async fn gateway_started<R: std::fmt::Debug>(
    exe: &Path,
    http: &reqwest::Client,
    readyz: &str,
    gateway: &mut Supervised,
    control: &mut tokio::task::JoinHandle<R>,
) -> anyhow::Result<()> {
    let mut metrics_picks = 1;
    loop {
        tokio::select! {
            r = wait_ready(http, readyz, Duration::from_secs(60)) => return r,
            r = &mut *control => {
                anyhow::bail!("control plane stopped during start-up: {:?}", r);
            }
            status = exited(gateway) => {
                let text = gateway.log_of_this_run();
                let failure = failure_of(&text);
                if metrics_picks < METRICS_PICKS && metrics_address_taken(failure) {
                    metrics_picks += 1;
                    tracing::warn!(taken = ?gateway.metrics, "the gateway's metrics port was taken; picking another");
                    gateway.set_metrics(free_port(std::net::Ipv4Addr::LOCALHOST.into())?);
                    gateway.spawn(exe)?;
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
}

/// What starting an instance needs of the stack.
struct StackRef<'a> {
    exe: &'a Path,
    pki: &'a Pki,
    args: &'a UpArgs,
    dirs: &'a Dirs,
}

/// Restarts children that exit, and starts and stops instances as the
/// control plane asks, until SIGINT/SIGTERM, the control plane stopping,
/// or (with `--exit-with-parent`) the parent going away.
async fn supervise_until_stopped<R: std::fmt::Debug>(
    stack: &StackRef<'_>,
    children: &mut Vec<Supervised>,
    mut launcher: Option<&mut instances::Launcher>,
    control: &mut tokio::task::JoinHandle<R>,
) -> anyhow::Result<()> {
    let parent = crate::parent_pid();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut poll = tokio::time::interval(Duration::from_millis(200));
    loop {
        let next_instance_event = async {
            match launcher.as_deref_mut() {
                Some(l) => l.next().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => return Ok(()),
            _ = term.recv() => return Ok(()),
            r = &mut *control => {
                tracing::error!(result = ?r, "control plane stopped");
                return Ok(());
            }
            event = next_instance_event => {
                if let Some(l) = launcher.as_deref_mut()
                    && l.handle(event, stack.exe, stack.pki, stack.args, stack.dirs, children)
                {
                    write_processes(&stack.dirs.state, children)?;
                }
            }
            _ = poll.tick() => {
                if stack.args.exit_with_parent && crate::parent_pid() != parent {
                    return Ok(());
                }
                if supervise(stack.exe, children)? {
                    write_processes(&stack.dirs.state, children)?;
                }
            }
        }
    }
}

/// SIGTERM to every child, then SIGKILL to those still running `grace`
/// later.
async fn stop_within(children: &mut [Supervised], grace: Duration) {
    for c in children.iter() {
        if let Some(pid) = c.pid() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
    }
    for c in children.iter_mut() {
        if let Some(child) = c.child.as_mut()
            && tokio::time::timeout(grace, child.wait()).await.is_err()
        {
            let _ = child.kill().await;
        }
    }
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
    use super::metrics_address_taken;

    #[test]
    fn only_a_taken_metrics_address_is_picked_again() {
        // As the gateway reports it (anyhow's context, then the cause).
        let taken = "Error: cannot listen for metrics on 127.0.0.1:9091\n\nCaused by:\n    Address already in use (os error 98)";
        assert!(metrics_address_taken(taken));
        // The public address is the user's choice: reported, not replaced.
        assert!(!metrics_address_taken(
            "Error: cannot listen for https on 127.0.0.1:8443: Address already in use (os error 98)"
        ));
        // A metrics address that is bad for another reason stays an error.
        assert!(!metrics_address_taken(
            "Error: cannot listen for metrics on 10.9.9.9:1\n\nCaused by:\n    Cannot assign requested address (os error 99)"
        ));
    }
}
