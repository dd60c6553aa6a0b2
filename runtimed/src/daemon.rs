//! The daemon: built from its [`Config`] in a few steps — the listener, the
//! link to the Runtime Server, the function engine and the sessions, TLS,
//! in Kubernetes mode the Run watch — then served until SIGTERM or Ctrl-C.

use std::sync::Arc;
use std::time::Duration;

use kruntimes_process::shutdown_signal;

use crate::config::{Config, KubernetesConfig};
use crate::dataplane::{ServeConfig, serve};
use crate::error::{Error, Result};
use crate::function::Engine;
use crate::host::Host;
use crate::listener::listen;
use crate::local::LocalPod;
use crate::runtime::{self, Link};
use crate::session::Sessions;
use crate::task::Tasks;

/// How long runtimed waits for its Runtime Server at start before it
/// serves anyway (readiness says the server is missing meanwhile).
const SERVER_WAIT: Duration = Duration::from_secs(10);
/// How often the Runtime Server is checked.
const SERVER_CHECK: Duration = Duration::from_millis(500);
/// How often idle registrations and sessions are expired.
const IDLE_CHECK: Duration = Duration::from_secs(1);

/// The modes' state on the link to the Runtime Server, with their
/// background passes (idle expiry, the server's restarts) started.
fn modes(config: &Config, pod: &Arc<LocalPod>, link: &Arc<Link>) -> Host {
    let engine = Engine::new(
        pod.clone(),
        config.engine.clone(),
        link.clone(),
        config.artifacts.clone(),
    );
    engine.spawn_idle_reaper(IDLE_CHECK);
    let sessions = Sessions::new(pod.clone(), link.clone(), config.artifacts.clone());
    sessions.spawn_idle_reaper(IDLE_CHECK);
    let tasks = Tasks::new(
        pod.clone(),
        link.clone(),
        config.engine.backend,
        config.artifacts.clone(),
    );
    let (e, s, t) = (engine.clone(), sessions.clone(), tasks.clone());
    runtime::spawn_monitor(link.clone(), SERVER_CHECK, move |change| {
        let (e, s, t) = (e.clone(), s.clone(), t.clone());
        async move {
            e.server_changed(change).await;
            s.server_changed(change).await;
            t.server_changed(change).await;
        }
    });
    Host {
        engine,
        sessions,
        tasks,
    }
}

/// The TLS port's server configuration: the serving pair (reloaded when
/// rotated), client certificates required from the internal CA.
fn tls(config: &Config) -> Result<rustls::ServerConfig> {
    let t = &config.tls;
    let serving = kruntimes_certs::ReloadingCert::new(&t.cert, &t.key)
        .map_err(|e| Error::Tls(format!("load {}: {e}", t.cert.display())))?;
    serving.watch(t.reload);
    kruntimes_certs::server_config_reloading(serving, Some(&t.client_ca), &[b"h2", b"http/1.1"])
        .map_err(|e| Error::Tls(e.to_string()))
}

/// The Kubernetes loop, started; resolves once its first lists are in
/// (`None`: a signal came first).
async fn watch_runs(
    kube: &KubernetesConfig,
    config: &Config,
    pod_uid: &str,
    host: Host,
    stop: tokio::sync::watch::Receiver<bool>,
) -> Result<Option<tokio::task::JoinHandle<Result<(), crate::cluster::Error>>>> {
    let client = kruntimes_support::kube::client(kube.kubeconfig.as_deref()).await?;
    let pod = crate::cluster::PodIdentity {
        namespace: kube.pod_namespace.clone(),
        name: config.name.clone(),
        uid: pod_uid.to_owned(),
    };
    if let (Some(artifacts), Some(runtime)) = (&config.artifacts, &kube.runtime) {
        let sweeper = crate::cluster::sweep::Sweeper {
            client: client.clone(),
            namespace: kube.pod_namespace.clone(),
            pod: config.name.clone(),
            runtime: runtime.clone(),
            artifacts: artifacts.clone(),
            system_namespace: kube.system_namespace.clone(),
        };
        tokio::spawn(sweeper.run(stop.clone()));
    } else if config.artifacts.is_some() {
        tracing::warn!(
            "no --runtime-name: this runtimed never sweeps the artifact store (retention and orphans)"
        );
    }
    let (synced_tx, synced_rx) = tokio::sync::oneshot::channel();
    let mut stop = stop;
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
                return match (&mut task).await {
                    Ok(Err(e)) => Err(e.into()),
                    _ => Err(crate::cluster::Error::Ended.into()),
                };
            }
        }
        _ = shutdown_signal() => return Ok(None),
    }
    Ok(Some(task))
}

/// Runs the daemon until SIGTERM or Ctrl-C, on `handed_over` if given
/// ([`crate::handed_over_listener`]).
pub async fn run(config: Config, handed_over: Option<std::net::TcpListener>) -> Result<()> {
    // runtimed holds the keys and (in Kubernetes) the ServiceAccount token:
    // no process of its uid without CAP_SYS_PTRACE may read its memory or
    // environment.
    kruntimes_process::confine::forbid_inspection()?;
    kruntimes_process::listen::check_bound_against_limit(
        "runtimed",
        config.limits.max_connections,
        1,
        128,
        kruntimes_process::listen::raise_open_file_limit(),
    );
    // In Kubernetes mode the port opens only once the Run watch has synced:
    // the Pod's readiness probe (a TCP check) then means "can take Runs".
    // Otherwise it is taken first of all (handed over by `krt up`, or bound
    // here, as when `krt up` restarts it): waiting for the runtime server
    // first would leave the port to others for that long. Connections wait
    // in the backlog until it serves.
    let early = match (&config.kubernetes, handed_over) {
        // An open port must keep meaning "can take Runs" to the probe.
        (Some(_), Some(_)) => {
            return Err(Error::HandedOver(
                "--kubernetes opens its port once the Run watch has synced: it takes no listener handed over (LISTEN_FDS)".into(),
            ));
        }
        (Some(_), None) => None,
        (None, handed_over) => Some(listen(config.listen, handed_over).await?),
    };
    // The server answers before anything is registered on it (the first
    // contact resets whatever an earlier runtimed left there); if it is
    // late, the monitor keeps trying and readiness says so.
    let link = Link::new(&config.runtime_server);
    if !link.connect(SERVER_WAIT).await {
        tracing::warn!(socket = %config.runtime_server.display(), "the runtime server does not answer yet");
    }
    let address = match (&config.advertise, &early) {
        (Some(a), _) => a.clone(),
        (None, Some(l)) => l.local_addr()?.to_string(),
        (None, None) => config.listen.to_string(),
    };
    let pod_uid = config
        .pod_uid
        .clone()
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    let pod = LocalPod::new(&config.name, &pod_uid, &address);
    let host = modes(&config, &pod, &link);
    let tls = tls(&config)?;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let (listener, mut cluster) = match (&config.kubernetes, early) {
        (Some(kube), _) => {
            match watch_runs(kube, &config, &pod_uid, host.clone(), stop_rx).await? {
                Some(task) => (listen(config.listen, None).await?, Some(task)),
                None => return Ok(()),
            }
        }
        (None, Some(l)) => (l, None),
        // Outside Kubernetes the listener was had above.
        (None, None) => (listen(config.listen, None).await?, None),
    };
    tracing::info!(name = %config.name, pod_uid = %pod_uid, address = %address, "runtimed serving");
    let stats = Arc::new(kruntimes_process::listen::Stats::default());
    if let Some(addr) = config.metrics_listen {
        let l = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| Error::Listen { addr, source })?;
        tokio::spawn(crate::metrics::serve(
            l,
            stats.clone(),
            host.sessions.clone(),
        ));
    }
    let serve_config = ServeConfig {
        listener,
        limits: config.limits,
        header_timeout: config.header_timeout,
        stats,
        tls,
        policy: config.peers.clone(),
    };
    let serving = serve(pod, host.clone(), serve_config, shutdown_signal());
    // A Kubernetes loop that dies takes the daemon down (the kubelet restarts
    // it) rather than leaving a Ready Pod that acts on nothing.
    let loop_died = async {
        match cluster.as_mut() {
            Some(task) => match task.await {
                Ok(Ok(())) => std::future::pending::<Error>().await,
                Ok(Err(e)) => e.into(),
                Err(e) => crate::cluster::Error::Panicked(e.to_string()).into(),
            },
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        r = serving => r?,
        e = loop_died => {
            host.tasks.shutdown();
            host.tasks.shutdown();
    host.sessions.shutdown().await;
            host.engine.shutdown().await;
            return Err(e);
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
    host.tasks.shutdown();
    host.sessions.shutdown().await;
    host.engine.shutdown().await;
    tracing::info!("runtimed stopped");
    Ok(())
}
