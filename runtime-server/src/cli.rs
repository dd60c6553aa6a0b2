//! Command-line configuration and the server's main loop, shared by the
//! `runtime-server` binary and `krt runtime-server`: serve the contract on a
//! Unix socket (created 0600, removed on exit) until SIGTERM, or — hidden —
//! run as the [`shim`](crate::contain::shim) of one user process.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use clap::Parser;
use tokio_stream::wrappers::UnixListenerStream;

use crate::contain::Shim;
use crate::contain::shim::{self, ShimArgs};
use crate::function::python::spare::SparePool;
use crate::function::{Functions, Interpreter};
use crate::lease;
use crate::service::Service;
use crate::session::Sessions;

/// `runtime-server` flags.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "runtime-server",
    about = "kruntimes Runtime Server: runs user code for runtimed",
    subcommand_negates_reqs = true,
    args_conflicts_with_subcommands = true
)]
pub struct Args {
    /// Hidden modes.
    #[command(subcommand)]
    pub mode: Option<Mode>,
    /// Serving flags.
    #[command(flatten)]
    pub serve: ServeArgs,
}

/// The hidden modes.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum Mode {
    /// Run one user process in a process tree killed whole.
    #[command(hide = true)]
    Shim(ShimArgs),
}

/// Where and how to serve.
#[derive(Debug, Clone, clap::Args)]
pub struct ServeArgs {
    /// Unix socket to serve on (created 0600; an old socket there is
    /// replaced).
    #[arg(long, env = "KRUNTIMES_RUNTIME_SERVER_SOCKET")]
    pub socket: Option<PathBuf>,
    /// Root of the Runs' working directories and session workspaces.
    #[arg(long, env = "KRUNTIMES_RUNTIME_SERVER_WORK_ROOT")]
    pub work_root: Option<PathBuf>,
    /// Python interpreter.
    #[arg(long, env = "KRUNTIMES_PYTHON", default_value = "python3")]
    pub python: PathBuf,
    /// Pre-started Python interpreters kept ready for registrations.
    #[arg(long, default_value_t = 2)]
    pub python_spares: usize,
}

pub use kruntimes_support::{init_logging, shutdown_signal};

/// Runs `args`: the shim (exits with its child's status) or the server.
/// `shim_prefix` is what the executable needs before `shim` to reach this
/// mode again (`[]` for `runtime-server`, `["runtime-server"]` for `krt`).
pub fn main(args: Args, shim_prefix: &[&str]) -> anyhow::Result<()> {
    if let Some(Mode::Shim(a)) = args.mode {
        std::process::exit(shim::run(a));
    }
    init_logging();
    let shim = Shim::current(shim_prefix).context("locate this executable")?;
    tokio::runtime::Runtime::new()?.block_on(serve(args.serve, shim, shutdown_signal()))
}

/// Binds `path` readable and writable by this user only.
pub fn bind(path: &std::path::Path) -> anyhow::Result<tokio::net::UnixListener> {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    if let Ok(md) = std::fs::symlink_metadata(path) {
        if !md.file_type().is_socket() {
            anyhow::bail!("{} exists and is not a socket", path.display());
        }
        std::fs::remove_file(path)?;
    }
    let listener =
        tokio::net::UnixListener::bind(path).with_context(|| format!("bind {}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(listener)
}

/// Serves until `shutdown` resolves, then stops every user process and
/// removes the sockets.
pub async fn serve(
    args: ServeArgs,
    shim: Shim,
    shutdown: impl std::future::Future<Output = ()>,
) -> anyhow::Result<()> {
    let socket = args.socket.context("--socket is required")?;
    let work_root = args.work_root.context("--work-root is required")?;
    std::fs::create_dir_all(&work_root)?;
    let work_root = work_root.canonicalize()?;
    let listener = bind(&socket)?;
    let worker_name = socket
        .file_name()
        .map(|n| lease::socket_name(&n.to_string_lossy()))
        .context("--socket names no file")?;
    let worker_socket = socket.with_file_name(&worker_name);
    let workers = bind(&worker_socket)?;
    let spares = (args.python_spares > 0).then(|| {
        SparePool::new(
            shim.clone(),
            args.python.clone(),
            work_root.clone(),
            args.python_spares,
        )
    });
    let interpreter = Interpreter {
        shim: shim.clone(),
        python: args.python,
        spares,
    };
    let functions = Arc::new(Functions::new(work_root.clone(), interpreter));
    let service = Service::new(
        functions.clone(),
        Sessions::new(work_root.clone(), shim),
        worker_name,
    );
    tracing::info!(socket = %socket.display(), work_root = %work_root.display(), "runtime server serving");
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let leases = tokio::spawn(lease::serve(workers, functions, {
        let mut stopped = stopped.clone();
        async move {
            let _ = stopped.wait_for(|s| *s).await;
        }
    }));
    let serving = tonic::transport::Server::builder()
        .add_service(service.server())
        .serve_with_incoming_shutdown(UnixListenerStream::new(listener), {
            let mut stopped = stopped.clone();
            async move {
                let _ = stopped.wait_for(|s| *s).await;
            }
        });
    tokio::pin!(serving);
    let ended = tokio::select! {
        r = &mut serving => Some(r),
        _ = shutdown => None,
    };
    // User processes go first: that ends the calls and command streams
    // still open, so the graceful stop below does not wait on them.
    service.shutdown().await;
    let _ = stop.send(true);
    let served = match ended {
        Some(r) => r,
        None => serving.await,
    };
    let _ = leases.await;
    let _ = std::fs::remove_file(&socket);
    let _ = std::fs::remove_file(&worker_socket);
    tracing::info!("runtime server stopped");
    Ok(served?)
}
