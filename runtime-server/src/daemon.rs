//! The server's main loop, shared by the `runtime-server` binary and
//! `krt runtime-server`: serve the contract on a Unix socket (created with
//! the configured mode, removed on exit) until SIGTERM, or — hidden — run
//! as the [`shim`](crate::contain::shim) of one user process.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio_stream::wrappers::UnixListenerStream;

use crate::config::{Args, Config, ConfigError, Mode};
use crate::contain::Shim;
use crate::contain::shim;
use crate::function::python::spare::SparePool;
use crate::function::{Functions, Interpreter};
use crate::inputs::Inputs;
use crate::service::{Service, Sockets};
use crate::session::Sessions;
use crate::task::Tasks;
use crate::{direct, lease};

pub use kruntimes_process::{init_logging, shutdown_signal};

/// Why the server could not start, or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The flags do not make a server.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The executable (for the shims) could not be located.
    #[error("locate this executable: {0}")]
    Executable(std::io::Error),
    /// A directory the server needs could not be created or resolved.
    #[error("{}: {source}", path.display())]
    Directory {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A socket could not be bound.
    #[error("bind {}: {source}", path.display())]
    Bind {
        /// The socket's path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Something that is not a socket is where a socket goes.
    #[error("{} exists and is not a socket", .0.display())]
    NotASocket(PathBuf),
    /// The process could not be confined.
    #[error("confine the runtime server: {0}")]
    Confine(#[from] kruntimes_process::confine::ConfineError),
    /// The async runtime could not start.
    #[error("start the async runtime: {0}")]
    Runtime(std::io::Error),
    /// Serving the contract failed.
    #[error("serve: {0}")]
    Serve(#[from] tonic::transport::Error),
}

/// Runs `args`: the shim (exits with its child's status) or the server.
/// `shim_prefix` is what the executable needs before `shim` to reach this
/// mode again (`[]` for `runtime-server`, `["runtime-server"]` for `krt`).
pub fn main(args: Args, shim_prefix: &[&str]) -> Result<(), ServeError> {
    if let Some(Mode::Shim(a)) = args.mode {
        std::process::exit(shim::run(a));
    }
    let config = args.serve.into_config()?;
    init_logging();
    let shim = Shim::current(shim_prefix).map_err(ServeError::Executable)?;
    if config.confine {
        confine(&config)?;
    }
    tokio::runtime::Runtime::new()
        .map_err(ServeError::Runtime)?
        .block_on(serve(config, shim, shutdown_signal()))
}

fn create_dir(path: &Path) -> Result<(), ServeError> {
    std::fs::create_dir_all(path).map_err(|source| ServeError::Directory {
        path: path.to_path_buf(),
        source,
    })
}

/// Confines this process — still single-threaded — to the allowlist of
/// [`crate::confine::plan`], with no capabilities and `no_new_privs`.
fn confine(config: &Config) -> Result<(), ServeError> {
    use crate::confine::{Inputs, path_dirs, plan, python_trees};
    let tmp_dir = crate::env::tmp_dir();
    for dir in [&config.work_root, &tmp_dir] {
        create_dir(dir)?;
    }
    let absolute = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
    let socket_dir = config
        .socket
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let inputs = Inputs {
        path_dirs: path_dirs(&crate::env::path()),
        python_trees: python_trees(&config.python),
        exe: std::env::current_exe().ok(),
        allow_read: config.allow_read.iter().map(|p| absolute(p)).collect(),
        work_root: absolute(&config.work_root),
        socket_dir: absolute(socket_dir),
        tmp_dir: absolute(&tmp_dir),
        protect: config.protect.iter().map(|p| absolute(p)).collect(),
    };
    let plan = plan(&inputs);
    for (tree, protected) in &plan.refused {
        tracing::warn!(tree = %tree.display(), protected = %protected.display(), "not allowlisted: it would reach a protected path");
    }
    let c = kruntimes_process::confine::Confinement::with_system(&plan.read_only, &plan.read_write);
    let done = kruntimes_process::confine::confine(&c)?;
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

/// Binds `path` with permissions `mode` (0600 or 0660), replacing an old
/// socket there.
///
/// The socket is bound and listening under a temporary name first and then
/// renamed into place, so whoever sees `path` can connect to it: between a
/// `bind` and its `listen` a connect is refused, and a client that waits
/// for the file (runtimed, the tests) would otherwise race that window.
fn bind(path: &Path, mode: u32) -> Result<tokio::net::UnixListener, ServeError> {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    let failed = |source| ServeError::Bind {
        path: path.to_path_buf(),
        source,
    };
    if let Ok(md) = std::fs::symlink_metadata(path)
        && !md.file_type().is_socket()
    {
        return Err(ServeError::NotASocket(path.to_path_buf()));
    }
    let mut staged = path.as_os_str().to_owned();
    staged.push(".new");
    let staged = std::path::PathBuf::from(staged);
    if std::fs::symlink_metadata(&staged).is_ok_and(|md| md.file_type().is_socket()) {
        std::fs::remove_file(&staged).map_err(failed)?;
    }
    let listener = tokio::net::UnixListener::bind(&staged).map_err(failed)?;
    let placed = std::fs::set_permissions(&staged, std::fs::Permissions::from_mode(mode))
        .and_then(|()| std::fs::rename(&staged, path));
    if let Err(e) = placed {
        let _ = std::fs::remove_file(&staged);
        return Err(failed(e));
    }
    Ok(listener)
}

/// Serves until `shutdown` resolves, then stops every user process and
/// removes the sockets.
pub async fn serve(
    config: Config,
    shim: Shim,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), ServeError> {
    create_dir(&config.work_root)?;
    let work_root = config
        .work_root
        .canonicalize()
        .map_err(|source| ServeError::Directory {
            path: config.work_root.clone(),
            source,
        })?;
    create_dir(&config.run_logs)?;
    crate::logs::set_run_logs(config.run_logs.clone());
    let socket = config.socket;
    let listener = bind(&socket, config.socket_mode)?;
    let worker_name = lease::socket_name(&config.socket_name);
    let worker_socket = socket.with_file_name(&worker_name);
    let workers = bind(&worker_socket, config.socket_mode)?;
    let invoke_name = direct::socket_name(&config.socket_name);
    let invoke_socket = socket.with_file_name(&invoke_name);
    let invokes = bind(&invoke_socket, config.socket_mode)?;
    let spares = (config.python_spares > 0).then(|| {
        SparePool::new(
            shim.clone(),
            config.python.clone(),
            work_root.clone(),
            config.python_spares,
        )
    });
    let inputs = Arc::new(Inputs::new(work_root.clone()));
    let tasks = Tasks::new(
        work_root.clone(),
        config.run_logs.clone(),
        shim.clone(),
        config.python.clone(),
        inputs.clone(),
    );
    let interpreter = Interpreter {
        shim: shim.clone(),
        python: config.python,
        spares,
    };
    let functions = Arc::new(Functions::new(work_root.clone(), interpreter));
    let service = Service::new(
        functions.clone(),
        Sessions::new(work_root.clone(), shim, inputs.clone()),
        tasks,
        inputs,
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[tokio::test]
    async fn a_bound_socket_is_listening_once_its_path_exists_and_leaves_no_staged_name() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rs.sock");
        let _listener = bind(&path, 0o600).unwrap();
        std::os::unix::net::UnixStream::connect(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["rs.sock"]);
    }

    #[tokio::test]
    async fn an_old_socket_and_an_old_staged_one_are_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rs.sock");
        let old = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let _staged = std::os::unix::net::UnixListener::bind(dir.path().join("rs.sock.new"));
        drop(old);
        let listener = bind(&path, 0o660).unwrap();
        let _client = std::os::unix::net::UnixStream::connect(&path).unwrap();
        listener.accept().await.unwrap();
        assert!(!dir.path().join("rs.sock.new").exists());
    }

    #[test]
    fn a_path_that_is_not_a_socket_is_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rs.sock");
        std::fs::write(&path, b"keep").unwrap();
        assert!(matches!(bind(&path, 0o600), Err(ServeError::NotASocket(_))));
        assert_eq!(std::fs::read(&path).unwrap(), b"keep");
    }
}
