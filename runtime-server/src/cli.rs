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
use crate::service::{Service, Sockets};
use crate::session::Sessions;
use crate::{direct, lease};

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
    /// Unix socket to serve on (an old socket there is replaced).
    #[arg(long, env = "KRUNTIMES_RUNTIME_SERVER_SOCKET")]
    pub socket: Option<PathBuf>,
    /// Mode of the sockets, octal: `600` (this user only) or `660` (also
    /// the group: runtimed runs as another user of the same group in a
    /// Runtime Pod).
    #[arg(long, env = "KRUNTIMES_RUNTIME_SERVER_SOCKET_MODE", default_value = "600", value_parser = parse_socket_mode)]
    pub socket_mode: u32,
    /// Root of the Runs' working directories and session workspaces.
    #[arg(long, env = "KRUNTIMES_RUNTIME_SERVER_WORK_ROOT")]
    pub work_root: Option<PathBuf>,
    /// Python interpreter.
    #[arg(long, env = "KRUNTIMES_PYTHON", default_value = "python3")]
    pub python: PathBuf,
    /// Pre-started Python interpreters kept ready for registrations.
    #[arg(long, default_value_t = 2)]
    pub python_spares: usize,
    /// Do not confine the server (no Landlock allowlist, capabilities kept):
    /// only for a server whose container confines it already.
    #[arg(long, env = "KRUNTIMES_RUNTIME_SERVER_NO_CONFINE")]
    pub no_confine: bool,
    /// A further tree user code may read (repeatable).
    #[arg(long = "allow-read", value_name = "PATH")]
    pub allow_read: Vec<PathBuf>,
    /// Directory of the per-Run logs of handler output (`<uid>.log`);
    /// default `WORK_ROOT/.logs`.
    #[arg(long, env = "KRUNTIMES_RUNTIME_SERVER_RUN_LOGS")]
    pub run_logs: Option<PathBuf>,
    /// A path no allowlisted tree may contain or lie beneath (repeatable):
    /// the state directory of the stack that starts this server.
    #[arg(long = "protect", value_name = "PATH")]
    pub protect: Vec<PathBuf>,
}

fn parse_socket_mode(s: &str) -> Result<u32, String> {
    match s {
        "600" | "0600" => Ok(0o600),
        "660" | "0660" => Ok(0o660),
        _ => Err(format!("{s:?}: the socket mode is 600 or 660")),
    }
}

pub use kruntimes_process::{init_logging, shutdown_signal};

/// Runs `args`: the shim (exits with its child's status) or the server.
/// `shim_prefix` is what the executable needs before `shim` to reach this
/// mode again (`[]` for `runtime-server`, `["runtime-server"]` for `krt`).
pub fn main(args: Args, shim_prefix: &[&str]) -> anyhow::Result<()> {
    if let Some(Mode::Shim(a)) = args.mode {
        std::process::exit(shim::run(a));
    }
    init_logging();
    let shim = Shim::current(shim_prefix).context("locate this executable")?;
    if !args.serve.no_confine {
        confine(&args.serve)?;
    }
    tokio::runtime::Runtime::new()?.block_on(serve(args.serve, shim, shutdown_signal()))
}

/// Confines this process — still single-threaded — to the allowlist of
/// [`crate::confine::plan`], with no capabilities and `no_new_privs`.
fn confine(args: &ServeArgs) -> anyhow::Result<()> {
    use crate::confine::{Inputs, path_dirs, plan, python_trees};
    let socket = args.socket.as_deref().context("--socket is required")?;
    let work_root = args.work_root.clone().context("--work-root is required")?;
    let tmp_dir = crate::env::tmp_dir();
    for dir in [&work_root, &tmp_dir] {
        std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    }
    let absolute = |p: &std::path::Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
    let socket_dir = socket
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    let inputs = Inputs {
        path_dirs: path_dirs(&crate::env::path()),
        python_trees: python_trees(&args.python),
        exe: std::env::current_exe().ok(),
        allow_read: args.allow_read.iter().map(|p| absolute(p)).collect(),
        work_root: absolute(&work_root),
        socket_dir: absolute(socket_dir),
        tmp_dir: absolute(&tmp_dir),
        protect: args.protect.iter().map(|p| absolute(p)).collect(),
    };
    let plan = plan(&inputs);
    for (tree, protected) in &plan.refused {
        tracing::warn!(tree = %tree.display(), protected = %protected.display(), "not allowlisted: it would reach a protected path");
    }
    let c = kruntimes_process::confine::Confinement::with_system(&plan.read_only, &plan.read_write);
    let done = kruntimes_process::confine::confine(&c).context("confine the runtime server")?;
    if done.landlock_full {
        tracing::info!(
            read_only = plan.read_only.len(),
            read_write = plan.read_write.len(),
            capabilities_dropped = done.capabilities_dropped,
            "confined"
        );
    } else {
        tracing::warn!(
            landlock = done.landlock,
            capabilities_dropped = done.capabilities_dropped,
            "this kernel enforces the file-system allowlist only in part (or not at all)"
        );
    }
    Ok(())
}

/// Binds `path` with permissions `mode` (0600 or 0660).
pub fn bind(path: &std::path::Path, mode: u32) -> anyhow::Result<tokio::net::UnixListener> {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    if let Ok(md) = std::fs::symlink_metadata(path) {
        if !md.file_type().is_socket() {
            anyhow::bail!("{} exists and is not a socket", path.display());
        }
        std::fs::remove_file(path)?;
    }
    let listener =
        tokio::net::UnixListener::bind(path).with_context(|| format!("bind {}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
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
    let run_logs = args
        .run_logs
        .clone()
        .unwrap_or_else(|| work_root.join(".logs"));
    std::fs::create_dir_all(&run_logs).with_context(|| format!("create {}", run_logs.display()))?;
    crate::logs::set_run_logs(run_logs);
    let listener = bind(&socket, args.socket_mode)?;
    let socket_name = socket
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .context("--socket names no file")?;
    let worker_name = lease::socket_name(&socket_name);
    let worker_socket = socket.with_file_name(&worker_name);
    let workers = bind(&worker_socket, args.socket_mode)?;
    let invoke_name = direct::socket_name(&socket_name);
    let invoke_socket = socket.with_file_name(&invoke_name);
    let invokes = bind(&invoke_socket, args.socket_mode)?;
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
        Sockets {
            workers: worker_name,
            invoke: invoke_name,
        },
    );
    tracing::info!(socket = %socket.display(), work_root = %work_root.display(), "runtime server serving");
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let until_stopped = |mut stopped: tokio::sync::watch::Receiver<bool>| async move {
        let _ = stopped.wait_for(|s| *s).await;
    };
    let leases = tokio::spawn(lease::serve(
        workers,
        functions.clone(),
        until_stopped(stopped.clone()),
    ));
    let direct_calls = tokio::spawn(direct::serve(
        invokes,
        functions,
        until_stopped(stopped.clone()),
    ));
    let serving = tonic::transport::Server::builder().serve_with_incoming_shutdown(
        service.routes(),
        UnixListenerStream::new(listener),
        until_stopped(stopped.clone()),
    );
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
    let _ = direct_calls.await;
    let _ = std::fs::remove_file(&socket);
    let _ = std::fs::remove_file(&worker_socket);
    let _ = std::fs::remove_file(&invoke_socket);
    tracing::info!("runtime server stopped");
    Ok(served?)
}
