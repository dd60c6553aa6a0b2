//! Process plumbing of every kruntimes process — the daemons (operator,
//! runtimed, gateway, `krt up`) and the untrusted Runtime Server alike: JSON
//! logging ([`init_logging`], and [`logbuf`] for a process that logs on its
//! request path, [`quiet`] for the client faults it counts instead), the
//! shutdown signal, process confinement ([`confine`]: Landlock,
//! capabilities, `no_new_privs`, non-dumpable), the bounded accept loop of
//! every TCP listener ([`listen`]) and the rule every daemon's flags follow
//! ([`config`]: each also an environment variable).
//!
//! Nothing here knows Kubernetes, a Run or a credential: the Runtime
//! Server links this crate and nothing of the cluster side
//! (`kruntimes-support` holds the kube client and reflectors the daemons
//! use).
#![forbid(unsafe_code)]

pub mod config;
pub mod confine;
pub mod listen;
pub mod logbuf;
pub mod quiet;

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

/// [`init_logging`] for a process that logs on its request path (the
/// gateway's access log): lines go through a [`logbuf::LogBuffer`],
/// written to stderr in batches by a thread of their own, so a request
/// never waits on a write or makes a system call to log (an idle process
/// does not wake that thread at all). The WARN and ERROR events `quiet`
/// names as client faults are not written ([`quiet`]). Returns the buffer:
/// lines formatted elsewhere ([`logbuf::LogBuffer::push`]) join the same
/// stream, and its counter of lines dropped when full feeds a metric.
pub fn init_buffered_logging(quiet: impl quiet::Quiet) -> logbuf::LogBuffer {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let buf = logbuf::LogBuffer::new(logbuf::MAX_PENDING);
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Already installed (a second call): the lines pushed directly still
    // need a writer, so the buffer is drained either way.
    let _ = tracing_subscriber::registry()
        .with(filter)
        .with(quiet::QuietLayer::new(quiet))
        .with(
            tracing_subscriber::fmt::layer()
                .json()
                .with_writer(buf.clone()),
        )
        .try_init();
    if buf
        .drain_to(std::io::stderr(), logbuf::FLUSH_EVERY)
        .is_err()
    {
        // No thread to write with: nothing will be logged. Say so once.
        eprintln!("kruntimes: cannot start the log writer thread; logs are lost");
    }
    buf
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
