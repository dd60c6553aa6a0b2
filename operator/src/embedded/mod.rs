//! The embedded control plane of `krt up`: the pure [`Controller`] driven by
//! a directory of Run manifests ([`store`]) and the runtimed instances'
//! ownership watches, performing register/release over mTLS gRPC ([`rpc`]),
//! serving the control plane's ownership table to gateways, and writing Run
//! status to `STATE_DIR/runs.json`.

pub mod artifacts;
pub mod controller;
mod rpc;
pub mod store;

use kruntimes_process::listen::{self, Limits, Listener};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use kruntimes_certs::TlsFiles;
use kruntimes_proto::ownership::v1::SourceKind;
use kruntimes_proto::watch::{DEFAULT_LAG_CAPACITY, Publisher, SourceUpdate, watch_source};
use serde::Serialize;
use tokio::sync::mpsc;
use tonic::transport::{Certificate, Identity, Server, ServerTlsConfig};

use controller::{Action, RegisterOutcome};
pub use controller::{Controller, InstancePool, PodConfig, RunStatus};
pub use kruntimes_core::pool::PoolSpec;
pub use kruntimes_core::scheduler::{Capacity, Resources};
pub use rpc::internal_endpoint;
use store::{FileError, Scan};

/// Errors of starting the embedded control plane.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading certificate material failed.
    #[error("read {path}: {source}")]
    Read {
        /// File.
        path: String,
        /// Cause.
        source: std::io::Error,
    },
    /// I/O failed.
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    /// gRPC transport setup failed.
    #[error("grpc transport: {0}")]
    Transport(#[from] tonic::transport::Error),
    /// Invalid address.
    #[error("invalid endpoint {0}")]
    Endpoint(String),
    /// Watching the runs directory failed.
    #[error("watch runs directory: {0}")]
    Notify(#[from] notify::Error),
}

/// Result alias.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Configuration of the embedded control plane.
#[derive(Debug, Clone)]
pub struct EmbeddedConfig {
    /// Directories of Run manifests, watched together (a Run is named in
    /// one of them).
    pub runs_dirs: Vec<PathBuf>,
    /// Where `runs.json` is written.
    pub state_dir: PathBuf,
    /// The runtimed instances.
    pub pods: Vec<PodConfig>,
    /// Public gateway URL, for Run endpoints.
    pub gateway_url: String,
    /// Identity used to call runtimed and to serve the ownership watch
    /// (the certificate carries both server and client usages).
    pub tls: TlsFiles,
    /// TLS server name of runtimed certificates.
    pub runtimed_server_name: String,
    /// How long a lost runtimed may stay away before its Runs move.
    pub owner_grace: Duration,
    /// The artifact store to keep (retention, orphans), if any.
    pub artifacts: Option<artifacts::ArtifactMaintenance>,
}

/// The runtimed instances of a pool that follows demand: the control plane
/// asks its launcher (`krt up`) to start and stop them and hears back what
/// it did.
#[derive(Debug)]
pub struct Instances {
    /// The pool's rules.
    pub pool: InstancePool,
    /// What the control plane asks for.
    pub requests: mpsc::UnboundedSender<InstanceRequest>,
    /// What the launcher did.
    pub reports: mpsc::UnboundedReceiver<InstanceReport>,
}

/// A request to the launcher of runtimed instances.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InstanceRequest {
    /// Start this many instances, each reported once started.
    Start {
        /// How many.
        count: u32,
    },
    /// Stop this idle instance (it takes no new Run), reported once gone.
    Stop {
        /// Instance name.
        name: String,
    },
}

/// What the launcher of runtimed instances did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InstanceReport {
    /// An instance started, listening at its address.
    Started(PodConfig),
    /// An instance asked for could not be started.
    StartFailed {
        /// Why.
        error: String,
    },
    /// A stopped instance is gone.
    Stopped {
        /// Instance name.
        name: String,
    },
}

/// What `STATE_DIR/runs.json` holds.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct StatusFile<'a> {
    gateway: &'a str,
    runs: Vec<RunStatus>,
    pods: Vec<controller::PodStatus>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pool: Option<controller::PoolStatus>,
    errors: &'a [FileError],
}

/// An input of the control loop.
enum Msg {
    Store(Scan),
    Pod(String, SourceUpdate),
    Registered {
        uid: String,
        attempt: u64,
        outcome: RegisterOutcome,
    },
    Released {
        pod: String,
        uid: String,
        ok: bool,
    },
    Instance(InstanceReport),
}

/// The control loop's connections to the runtimed instances: a client and
/// an ownership watch per instance, added and removed with them.
struct Connections {
    tls: TlsFiles,
    server_name: String,
    clients: std::collections::HashMap<String, rpc::PodClients>,
    watches: std::collections::HashMap<String, tokio::task::JoinHandle<()>>,
    tx: mpsc::UnboundedSender<Msg>,
    stop: tokio::sync::watch::Receiver<bool>,
}

impl Connections {
    /// Connects to `pod` (lazily) and follows its ownership table.
    fn add(&mut self, pod: &PodConfig) -> Result<()> {
        let endpoint = internal_endpoint(&pod.address, &self.server_name, &self.tls)?;
        self.clients.insert(
            pod.name.clone(),
            rpc::PodClients::new(endpoint.connect_lazy()),
        );
        let tx = self.tx.clone();
        let name = pod.name.clone();
        let stop = self.stop.clone();
        let watch = tokio::spawn(async move {
            watch_source(endpoint, "kruntimes-control-plane".into(), move |u| {
                !*stop.borrow() && tx.send(Msg::Pod(name.clone(), u)).is_ok()
            })
            .await;
        });
        if let Some(old) = self.watches.insert(pod.name.clone(), watch) {
            old.abort();
        }
        Ok(())
    }

    /// Forgets a stopped instance.
    fn remove(&mut self, name: &str) {
        self.clients.remove(name);
        if let Some(watch) = self.watches.remove(name) {
            watch.abort();
        }
    }
}

fn read(path: &std::path::Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|source| Error::Read {
        path: path.display().to_string(),
        source,
    })
}

/// Deletes a Run whose `ttlSecondsAfterFinished` passed: the file a client
/// wrote it into (the last of `dirs`, the one clients write) is removed,
/// and the store's watch takes the Run away. A Run of the user's own
/// manifests stays: krt up never edits them.
fn delete_expired(dirs: &[PathBuf], namespace: &str, name: &str) {
    let Some(dir) = dirs.last() else {
        return;
    };
    for writer in kruntimes_api::ManifestWriter::ALL {
        let path = dir.join(writer.file_name(namespace, name));
        match std::fs::remove_file(&path) {
            Ok(()) => {
                tracing::info!(
                    namespace,
                    run = name,
                    "run deleted: its ttlSecondsAfterFinished passed"
                );
                return;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!(namespace, run = name, file = %path.display(), error = %e, "cannot delete a Run whose ttlSecondsAfterFinished passed");
                return;
            }
        }
    }
    tracing::warn!(
        namespace,
        run = name,
        "ttlSecondsAfterFinished passed, but the Run comes from a manifest of yours, which krt up does not edit: remove it there"
    );
}

/// Runs the embedded control plane until `shutdown` resolves. The ownership
/// watch is served on `listener`. With `instances`, the set of runtimed
/// instances follows demand (`cfg.pods` are the first ones); without, it is
/// `cfg.pods`, fixed.
pub async fn run(
    cfg: EmbeddedConfig,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    instances: Option<Instances>,
) -> Result<()> {
    for dir in &cfg.runs_dirs {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::create_dir_all(&cfg.state_dir)?;
    let publisher = Publisher::new(
        SourceKind::ControlPlane,
        uuid::Uuid::new_v4().to_string(),
        DEFAULT_LAG_CAPACITY,
    );
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop_tx.send(true);
    });

    // Ownership watch server for gateways.
    let server_tls = ServerTlsConfig::new()
        .identity(Identity::from_pem(
            read(&cfg.tls.cert)?,
            read(&cfg.tls.key)?,
        ))
        .client_ca_root(Certificate::from_pem(read(&cfg.tls.ca)?))
        .timeout(Limits::default().handshake);
    let server = Server::builder()
        .tls_config(server_tls)?
        .add_service(publisher.service());
    let mut server_stop = stop_rx.clone();
    // Bounded connections; accept errors never end the server.
    let incoming = listen::incoming(Listener::new(listener, "control-plane", Limits::default()));
    let server_task = tokio::spawn(async move {
        let stop = async move {
            let _ = server_stop.wait_for(|s| *s).await;
        };
        if let Err(e) = server.serve_with_incoming_shutdown(incoming, stop).await {
            tracing::error!(error = %e, "ownership watch server failed");
        }
    });

    // Event sources. Per-Pod event volume is bounded by that Pod's
    // registrations, so an unbounded queue into the single loop is safe.
    let (tx, mut rx) = mpsc::unbounded_channel::<Msg>();
    let mut conns = Connections {
        tls: cfg.tls.clone(),
        server_name: cfg.runtimed_server_name.clone(),
        clients: Default::default(),
        watches: Default::default(),
        tx: tx.clone(),
        stop: stop_rx.clone(),
    };
    for pod in &cfg.pods {
        conns.add(pod)?;
    }
    let _watcher = spawn_store_watcher(cfg.runs_dirs.clone(), tx.clone())?;

    let mut ctl = Controller::new(
        cfg.pods.clone(),
        cfg.owner_grace,
        Duration::from_millis(200),
    )
    .with_startup_hold(Instant::now() + Duration::from_secs(5));
    let launcher = match instances {
        Some(Instances {
            pool,
            requests,
            mut reports,
        }) => {
            ctl = ctl.with_pool(pool);
            let tx = tx.clone();
            tokio::spawn(async move {
                while let Some(r) = reports.recv().await {
                    if tx.send(Msg::Instance(r)).is_err() {
                        return;
                    }
                }
            });
            Some(requests)
        }
        None => None,
    };
    let (artifact_view, artifact_view_rx) = tokio::sync::watch::channel(artifacts::RunsView::new());
    if let Some(m) = cfg.artifacts.clone() {
        artifacts::spawn(m, artifact_view_rx, stop_rx.clone());
    }
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    let mut errors: Vec<FileError> = Vec::new();
    let mut last_status = Vec::new();
    let mut stop = stop_rx.clone();
    loop {
        let now = Instant::now();
        let actions = tokio::select! {
            msg = rx.recv() => match msg {
                Some(Msg::Store(scan)) => {
                    for e in &scan.errors {
                        tracing::warn!(file = %e.file, error = %e.message, "skipping run manifest");
                    }
                    errors = scan.errors;
                    ctl.apply_store(scan.runs, now)
                }
                Some(Msg::Pod(pod, update)) => ctl.apply_pod(&pod, update, now),
                Some(Msg::Registered { uid, attempt, outcome }) => ctl.register_result(&uid, attempt, outcome, now),
                Some(Msg::Released { pod, uid, ok }) => ctl.release_result(&pod, &uid, ok, now),
                Some(Msg::Instance(InstanceReport::Started(pod))) => match conns.add(&pod) {
                    Ok(()) => ctl.instance_started(pod, now),
                    Err(e) => {
                        tracing::error!(pod = %pod.name, error = %e, "cannot connect to a new runtimed instance");
                        ctl.instance_start_failed(now)
                    }
                },
                Some(Msg::Instance(InstanceReport::StartFailed { error })) => {
                    tracing::error!(%error, "a runtimed instance could not be started");
                    ctl.instance_start_failed(now)
                }
                Some(Msg::Instance(InstanceReport::Stopped { name })) => {
                    conns.remove(&name);
                    ctl.instance_stopped(&name, now)
                }
                None => break,
            },
            _ = tick.tick() => ctl.tick(now),
            _ = stop.wait_for(|s| *s) => break,
        };
        for action in actions {
            match action {
                Action::StartInstances { count } => {
                    if let Some(l) = &launcher {
                        let _ = l.send(InstanceRequest::Start { count });
                    }
                }
                Action::StopInstance { pod } => {
                    if let Some(l) = &launcher {
                        let _ = l.send(InstanceRequest::Stop { name: pod });
                    }
                }
                Action::Delete { namespace, name } => {
                    delete_expired(&cfg.runs_dirs, &namespace, &name);
                }
                action => rpc::perform(action, &conns.clients, &tx),
            }
        }
        publisher.replace_all(ctl.ownership_entries());
        if cfg.artifacts.is_some() {
            artifact_view.send_if_modified(|v| {
                let next = ctl.artifact_view();
                let changed = *v != next;
                *v = next;
                changed
            });
        }
        let status = serde_json::to_vec_pretty(&StatusFile {
            gateway: &cfg.gateway_url,
            runs: ctl.status(&cfg.gateway_url),
            pods: ctl.pod_status(),
            pool: ctl.pool_status(),
            errors: &errors,
        })
        .unwrap_or_default();
        if status != last_status {
            write_atomic(&cfg.state_dir.join("runs.json"), &status)?;
            last_status = status;
        }
    }
    let _ = server_task.await;
    Ok(())
}

fn write_atomic(path: &std::path::Path, data: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, data)?;
    std::fs::rename(tmp, path)
}

/// Rescans on every change notification (and every 2 s as a backstop) and
/// sends the scan when it differs from the previous one. Access events
/// (an open, a read, a close without a write) are no change: the scan
/// itself makes them, and counting them made the watch rescan every 20 ms
/// for as long as the process lived.
fn spawn_store_watcher(
    dirs: Vec<PathBuf>,
    tx: mpsc::UnboundedSender<Msg>,
) -> Result<notify::RecommendedWatcher> {
    use notify::Watcher;
    let wake = Arc::new(tokio::sync::Notify::new());
    let w = wake.clone();
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        if !matches!(&event, Ok(e) if e.kind.is_access()) {
            w.notify_one();
        }
    })?;
    for dir in &dirs {
        watcher.watch(dir, notify::RecursiveMode::NonRecursive)?;
    }
    tokio::spawn(async move {
        let mut last: Option<Scan> = None;
        let mut backstop = tokio::time::interval(Duration::from_secs(2));
        loop {
            let d = dirs.clone();
            let scan = match tokio::task::spawn_blocking(move || store::scan_all(&d)).await {
                Ok(s) => s,
                Err(_) => return,
            };
            if last.as_ref() != Some(&scan) {
                if tx.send(Msg::Store(scan.clone())).is_err() {
                    return;
                }
                last = Some(scan);
            }
            tokio::select! {
                _ = wake.notified() => {
                    // Let a burst of writes settle before rescanning.
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                _ = backstop.tick() => {}
            }
        }
    });
    Ok(watcher)
}

/// Binds a loopback listener for the ownership watch.
pub async fn bind(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr).await
}
