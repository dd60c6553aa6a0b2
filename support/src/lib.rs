//! Process plumbing shared by the kruntimes daemons (operator, runtimed,
//! gateway, `krt up`, the Runtime Server): JSON logging, the shutdown
//! signal, process confinement ([`confine`]: Landlock, capabilities,
//! `no_new_privs`, non-dumpable), the bounded accept loop of every TCP
//! listener ([`listen`]), and the Kubernetes client, reflector
//! caches and finalizer patch that the operator and runtimed's cluster
//! adapter both use. Nothing here decides anything about a Run.
#![forbid(unsafe_code)]

pub mod confine;
pub mod kube;
pub mod listen;
pub mod metrics;

/// JSON logs to stderr, filtered by `RUST_LOG` (default `info`). Calling it
/// twice is harmless.
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .json()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

/// Resolves on SIGTERM or Ctrl-C.
pub async fn shutdown_signal() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}
