//! Command-line configuration and the daemon's main loop, shared by the
//! `runtimed` binary and `krt runtimed`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;

use crate::dataplane::{PeerPolicy, ServeConfig, serve};
use crate::function::{Engine, EngineConfig};
use crate::local::LocalPod;
use crate::runtime::{self, Link};
use crate::session::Sessions;

/// runtimed flags (also readable from `KRUNTIMES_RUNTIMED_*` variables).
#[derive(Debug, Clone, Parser)]
#[command(name = "runtimed", about = "kruntimes per-Pod daemon")]
pub struct Args {
    /// Instance (Pod) name, reported as X-Kruntimes-Served-By.
    #[arg(long, env = "KRUNTIMES_RUNTIMED_NAME")]
    pub name: String,
    /// Instance UID; a new random one per process start when omitted.
    #[arg(long, env = "KRUNTIMES_RUNTIMED_POD_UID")]
    pub pod_uid: Option<String>,
    /// Listen address for gRPC and the dataplane (one TLS port). Outside
    /// Kubernetes, a listening socket handed over by systemd's socket
    /// activation (`LISTEN_FDS=1`, descriptor 3; `krt up` starts runtimed
    /// so) is served instead, and must be bound to this address (any port
    /// when it names port 0).
    #[arg(
        long,
        env = "KRUNTIMES_RUNTIMED_LISTEN",
        default_value = "127.0.0.1:7443"
    )]
    pub listen: SocketAddr,
    /// Address published to the gateway (defaults to --listen).
    #[arg(long, env = "KRUNTIMES_RUNTIMED_ADVERTISE")]
    pub advertise: Option<String>,
    /// Serving certificate (PEM).
    #[arg(long, env = "KRUNTIMES_RUNTIMED_TLS_CERT")]
    pub tls_cert: PathBuf,
    /// Serving key (PEM).
    #[arg(long, env = "KRUNTIMES_RUNTIMED_TLS_KEY")]
    pub tls_key: PathBuf,
    /// Internal CA that client certificates must chain to.
    #[arg(long, env = "KRUNTIMES_RUNTIMED_CLIENT_CA")]
    pub client_ca: PathBuf,
    /// The serving certificate files are re-read when their directory
    /// changes (inotify) and at least this often, seconds: the backstop for
    /// file systems without change notifications. New handshakes get a
    /// rotated pair; connections are kept.
    #[arg(long, env = "KRUNTIMES_RUNTIMED_TLS_RELOAD_SECS", default_value_t = 60)]
    pub tls_reload_secs: u64,
    /// Client CNs allowed on the dataplane.
    #[arg(long, value_delimiter = ',', default_value = "kruntimes-gateway")]
    pub dataplane_clients: Vec<String>,
    /// Client CNs allowed to call the `Agent` service (the control plane).
    #[arg(long, value_delimiter = ',', default_value = "kruntimes-control-plane")]
    pub control_clients: Vec<String>,
    /// Unix socket of this Pod's Runtime Server, which runs the user code.
    #[arg(long, env = "KRUNTIMES_RUNTIMED_RUNTIME_SERVER")]
    pub runtime_server: PathBuf,
    /// Ignored: the Runtime Server owns the Runs' working directories
    /// (accepted so older Pod specs keep starting).
    #[arg(long, env = "KRUNTIMES_RUNTIMED_WORK_ROOT", hide = true)]
    pub work_root: Option<PathBuf>,
    /// Default invocation timeout, seconds.
    #[arg(long, default_value_t = 30)]
    pub default_timeout_secs: u64,
    /// Maximum invocation timeout, seconds.
    #[arg(long, default_value_t = 300)]
    pub max_timeout_secs: u64,
    /// Open connections to the TLS port at most; one more is closed at once.
    #[arg(
        long,
        env = "KRUNTIMES_RUNTIMED_MAX_CONNECTIONS",
        default_value_t = 1024
    )]
    pub max_connections: usize,
    /// Bound on a connection's TLS handshake, milliseconds.
    #[arg(
        long,
        env = "KRUNTIMES_RUNTIMED_HANDSHAKE_TIMEOUT_MS",
        default_value_t = 10_000
    )]
    pub handshake_timeout_ms: u64,
    /// Listen address of `GET /metrics` (plain HTTP; keep it off the
    /// public network).
    #[arg(long, env = "KRUNTIMES_RUNTIMED_METRICS_LISTEN")]
    pub metrics_listen: Option<SocketAddr>,
    /// Bound on reading an HTTP/1 request's headers, milliseconds.
    #[arg(
        long,
        env = "KRUNTIMES_RUNTIMED_HEADER_TIMEOUT_MS",
        default_value_t = 10_000
    )]
    pub header_timeout_ms: u64,
    /// The built-in backend of this Pod's Runtime (`Runtime.spec.backend`);
    /// by default chosen from each Run's runtime name.
    #[arg(long, env = "KRUNTIMES_RUNTIMED_BACKEND")]
    pub backend: Option<kruntimes_proto::runtime::Backend>,
    /// Kubernetes mode: watch the Runs assigned to this Pod (by
    /// `--pod-uid`), register them and report their status.
    #[arg(long, env = "KRUNTIMES_RUNTIMED_KUBERNETES")]
    pub kubernetes: bool,
    /// Namespace of this Pod (Kubernetes mode).
    #[arg(long, env = "KRUNTIMES_RUNTIMED_POD_NAMESPACE")]
    pub pod_namespace: Option<String>,
    /// Kubeconfig (Kubernetes mode); in-cluster configuration when omitted.
    #[arg(long, env = "KRUNTIMES_RUNTIMED_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
}

pub use kruntimes_process::{init_logging, shutdown_signal};

/// The dataplane and gRPC listener on `addr`: the one handed over, or a
/// new one.
async fn listen(
    addr: SocketAddr,
    handed_over: Option<std::net::TcpListener>,
) -> anyhow::Result<tokio::net::TcpListener> {
    let Some(l) = handed_over else {
        return tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("cannot listen on {addr}"));
    };
    let bound = l.local_addr()?;
    if !serves(addr, bound) {
        anyhow::bail!(
            "the listener handed over (LISTEN_FDS) is bound to {bound}, not --listen {addr}"
        );
    }
    l.set_nonblocking(true)?;
    Ok(tokio::net::TcpListener::from_std(l)?)
}

/// Whether a listener bound to `bound` is the one `--listen addr` asks for
/// (any port when it names port 0). Pure.
fn serves(addr: SocketAddr, bound: SocketAddr) -> bool {
    addr.ip() == bound.ip() && (addr.port() == 0 || addr.port() == bound.port())
}

/// The listener whoever started runtimed bound for it, if any, by systemd's
/// socket-activation protocol: `LISTEN_FDS=1` (and `LISTEN_PID`, when set,
/// naming this process), the listening TCP socket as descriptor 3. `krt up`
/// starts runtimed so: the port it picked is never free between its pick
/// and runtimed's start.
///
/// Call it before any thread is started: it removes the protocol's
/// variables from the environment (so a child started later does not
/// take them for its own).
pub fn handed_over_listener() -> anyhow::Result<Option<std::net::TcpListener>> {
    let mut fds = listenfd::ListenFd::from_env();
    match fds.len() {
        0 => return Ok(None),
        1 => {}
        n => anyhow::bail!("runtimed takes one listener, but LISTEN_FDS={n}"),
    }
    let listener = fds
        .take_tcp_listener(0)
        .context("the descriptor handed over (LISTEN_FDS) is not a TCP socket")?
        .context("LISTEN_FDS names no descriptor")?;
    let listening = nix::sys::socket::getsockopt(&listener, nix::sys::socket::sockopt::AcceptConn)
        .context("the descriptor handed over (LISTEN_FDS)")?;
    if !listening {
        anyhow::bail!("the socket handed over (LISTEN_FDS) is not listening");
    }
    Ok(Some(listener))
}

/// Runs the daemon until SIGTERM or Ctrl-C, on `handed_over` if given
/// ([`handed_over_listener`]).
pub async fn run(args: Args, handed_over: Option<std::net::TcpListener>) -> anyhow::Result<()> {
    // runtimed holds the keys and (in Kubernetes) the ServiceAccount token:
    // no process of its uid without CAP_SYS_PTRACE may read its memory or
    // environment.
    kruntimes_process::confine::forbid_inspection()?;
    kruntimes_process::listen::check_bound_against_limit(
        "runtimed",
        args.max_connections,
        1,
        128,
        kruntimes_process::listen::raise_open_file_limit(),
    );
    if args.kubernetes && (args.pod_uid.is_none() || args.pod_namespace.is_none()) {
        anyhow::bail!("--kubernetes needs --pod-uid and --pod-namespace (from the downward API)");
    }
    if args.kubernetes && args.advertise.is_none() && args.listen.port() == 0 {
        anyhow::bail!("--kubernetes needs --advertise or a fixed --listen port");
    }
    // In Kubernetes mode the port opens only once the Run watch has synced:
    // the Pod's readiness probe (a TCP check) then means "can take Runs".
    // Otherwise it is taken first of all (handed over by `krt up`, or bound
    // here, as when `krt up` restarts it): waiting for the runtime server
    // first would leave the port to others for that long. Connections wait
    // in the backlog until it serves.
    if args.kubernetes && handed_over.is_some() {
        // An open port must keep meaning "can take Runs" to the probe.
        anyhow::bail!(
            "--kubernetes opens its port once the Run watch has synced: it takes no listener handed over (LISTEN_FDS)"
        );
    }
    let mut listener = if args.kubernetes {
        None
    } else {
        Some(listen(args.listen, handed_over).await?)
    };
    // The server answers before anything is registered on it (the first
    // contact resets whatever an earlier runtimed left there); if it is
    // late, the monitor below keeps trying and readiness says so.
    let link = Link::new(&args.runtime_server);
    if !link.connect(Duration::from_secs(10)).await {
        tracing::warn!(socket = %args.runtime_server.display(), "the runtime server does not answer yet");
    }
    let address = match (&args.advertise, &listener) {
        (Some(a), _) => advertised(a)?,
        (None, Some(l)) => l.local_addr()?.to_string(),
        (None, None) => args.listen.to_string(),
    };
    let pod_uid = args
        .pod_uid
        .clone()
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    let pod = LocalPod::new(&args.name, &pod_uid, &address);
    let engine = Engine::new(
        pod.clone(),
        EngineConfig {
            default_timeout: Duration::from_secs(args.default_timeout_secs),
            max_timeout: Duration::from_secs(args.max_timeout_secs),
            start_timeout: Duration::from_secs(30),
            backend: args.backend,
        },
        link.clone(),
    );
    engine.spawn_idle_reaper(Duration::from_secs(1));
    let sessions = Sessions::new(pod.clone(), link.clone());
    sessions.spawn_idle_reaper(Duration::from_secs(1));
    let (e, s) = (engine.clone(), sessions.clone());
    runtime::spawn_monitor(link, Duration::from_millis(500), move |change| {
        let (e, s) = (e.clone(), s.clone());
        async move {
            e.server_changed(change).await;
            s.server_changed(change).await;
        }
    });
    let serving = kruntimes_certs::ReloadingCert::new(&args.tls_cert, &args.tls_key)
        .map_err(|e| anyhow::anyhow!("load {}: {e}", args.tls_cert.display()))?;
    serving.watch(Duration::from_secs(args.tls_reload_secs.max(1)));
    let tls = kruntimes_certs::server_config_reloading(
        serving,
        Some(&args.client_ca),
        &[b"h2", b"http/1.1"],
    )?;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut cluster = if args.kubernetes {
        let client = kruntimes_support::kube::client(args.kubeconfig.as_deref()).await?;
        let pod = crate::cluster::PodIdentity {
            namespace: args.pod_namespace.clone().unwrap_or_default(),
            name: args.name.clone(),
            uid: pod_uid.clone(),
        };
        let mut stop = stop_rx.clone();
        let (synced_tx, synced_rx) = tokio::sync::oneshot::channel();
        let host = crate::host::Host {
            engine: engine.clone(),
            sessions: sessions.clone(),
        };
        let mut task = tokio::spawn(crate::cluster::run(
            client,
            host,
            pod,
            synced_tx,
            async move {
                let _ = stop.wait_for(|s| *s).await;
            },
        ));
        tracing::info!("waiting for the Run watch to sync before opening the port");
        tokio::select! {
            r = synced_rx => {
                if r.is_err() {
                    // The loop ended before syncing: report why.
                    match (&mut task).await {
                        Ok(Err(e)) => return Err(e.context("kubernetes loop")),
                        _ => anyhow::bail!("kubernetes loop ended before syncing"),
                    }
                }
            }
            _ = shutdown_signal() => return Ok(()),
        }
        listener = Some(listen(args.listen, None).await?);
        Some(task)
    } else {
        None
    };
    let Some(listener) = listener else {
        anyhow::bail!("no listener");
    };
    tracing::info!(name = %args.name, pod_uid = %pod_uid, address = %address, "runtimed serving");
    let stats = std::sync::Arc::new(kruntimes_process::listen::Stats::default());
    if let Some(addr) = args.metrics_listen {
        let l = tokio::net::TcpListener::bind(addr).await?;
        tokio::spawn(crate::metrics::serve(l, stats.clone(), sessions.clone()));
    }
    let cfg = ServeConfig {
        listener,
        limits: kruntimes_process::listen::Limits {
            max_connections: args.max_connections,
            handshake: Duration::from_millis(args.handshake_timeout_ms),
        },
        header_timeout: Duration::from_millis(args.header_timeout_ms),
        stats: stats.clone(),
        tls,
        policy: PeerPolicy {
            dataplane_clients: args.dataplane_clients.clone(),
            control_clients: args.control_clients.clone(),
        },
    };
    let serving = serve(
        pod,
        engine.clone(),
        sessions.clone(),
        cfg,
        shutdown_signal(),
    );
    // A Kubernetes loop that dies takes the daemon down (the kubelet restarts
    // it) rather than leaving a Ready Pod that acts on nothing.
    let loop_died = async {
        match cluster.as_mut() {
            Some(task) => match task.await {
                Ok(Ok(())) => std::future::pending::<anyhow::Error>().await,
                Ok(Err(e)) => e,
                Err(e) => anyhow::anyhow!("kubernetes loop panicked: {e}"),
            },
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        r = serving => r?,
        e = loop_died => {
            sessions.shutdown().await;
            engine.shutdown().await;
            return Err(e.context("kubernetes loop failed"));
        }
    }
    let _ = stop_tx.send(true);
    if let Some(task) = cluster {
        match task.await {
            Ok(Err(e)) => tracing::warn!(error = %e, "kubernetes loop failed"),
            Err(e) => tracing::warn!(error = %e, "kubernetes loop panicked"),
            Ok(Ok(())) => {}
        }
    }
    sessions.shutdown().await;
    engine.shutdown().await;
    tracing::info!("runtimed stopped");
    Ok(())
}

/// The address to publish for `--advertise`: `HOST:PORT` or `[IPV6]:PORT`
/// as given, and a bare `IPV6:PORT` — what `$(POD_IP):7443` expands to on
/// an IPv6 cluster — with the brackets it needs.
pub fn advertised(raw: &str) -> anyhow::Result<String> {
    if raw.parse::<SocketAddr>().is_ok() {
        return Ok(raw.to_owned());
    }
    if let Some((host, port)) = raw.rsplit_once(':')
        && let (Ok(ip), Ok(port)) = (host.parse::<std::net::Ipv6Addr>(), port.parse::<u16>())
    {
        return Ok(SocketAddr::from((ip, port)).to_string());
    }
    match raw.rsplit_once(':') {
        Some((host, port))
            if !host.is_empty() && !host.contains(':') && port.parse::<u16>().is_ok() =>
        {
            Ok(raw.to_owned())
        }
        _ => anyhow::bail!("--advertise {raw:?} is not HOST:PORT or [IPV6]:PORT"),
    }
}

#[cfg(test)]
mod tests {
    use super::{advertised, serves};

    #[test]
    fn a_handed_over_listener_must_be_where_listen_says() {
        let at = |s: &str| s.parse::<std::net::SocketAddr>().unwrap();
        assert!(serves(at("127.0.0.1:7443"), at("127.0.0.1:7443")));
        // Port 0: whatever port the listener has.
        assert!(serves(at("127.0.0.1:0"), at("127.0.0.1:40001")));
        assert!(!serves(at("127.0.0.1:7443"), at("127.0.0.1:7444")));
        // The address counts, whatever the port.
        assert!(!serves(at("127.0.0.1:0"), at("127.0.0.2:40001")));
        assert!(!serves(at("0.0.0.0:7443"), at("127.0.0.1:7443")));
        assert!(!serves(at("[::1]:7443"), at("127.0.0.1:7443")));
        assert!(serves(at("[::1]:0"), at("[::1]:7443")));
    }

    #[test]
    fn advertised_addresses_get_brackets_when_ipv6_needs_them() {
        for (raw, want) in [
            ("10.0.0.5:7443", "10.0.0.5:7443"),
            ("[fd00::5]:7443", "[fd00::5]:7443"),
            ("fd00::5:7443", "[fd00::5]:7443"),
            ("::1:7443", "[::1]:7443"),
            ("runtimed-0.pods.local:7443", "runtimed-0.pods.local:7443"),
        ] {
            assert_eq!(advertised(raw).unwrap(), want, "{raw}");
        }
        for bad in ["", "7443", "host", "host:port", "[fd00::5]", "a:b:c"] {
            assert!(advertised(bad).is_err(), "{bad:?}");
        }
    }
}
