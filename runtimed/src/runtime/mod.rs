//! The Runtime Server beside runtimed: the process that runs user code,
//! reached over a Unix socket (`kruntimes.runtime.v1.RuntimeServer`).
//! runtimed runs no user process itself.
//!
//! A [`Link`] knows whether the server answers and which instance of it:
//! on first contact it resets the server (whatever it holds belongs to a
//! runtimed that is gone); later, a new instance id means the server
//! restarted and lost everything. [`Link::check`] reports such a
//! [`Change`], and function and session mode react to it (republish their
//! readiness, register again, or give up a lost session).

pub mod direct;
#[cfg(test)]
pub mod fake;
pub mod lease;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use kruntimes_proto::function::v1 as fpb;
use kruntimes_proto::runtime::v1 as pb;
use kruntimes_proto::runtime::v1::runtime_server_client::RuntimeServerClient;
use tonic::transport::Channel;

pub use self::direct::Direct;
use crate::registration::RegisterError;

/// A client of the Runtime Server.
pub type Client = RuntimeServerClient<Channel>;

/// Reason published for Runs while the Runtime Server does not answer.
pub const UNAVAILABLE_REASON: &str = "RuntimeServerUnavailable";
/// Reason of a session whose Runtime Server restarted (its workspace and
/// processes are gone).
pub const LOST_REASON: &str = "RuntimeServerLost";

/// Bound on an `Info` or `Reset` round trip.
const CHECK_TIMEOUT: Duration = Duration::from_secs(2);

/// What a check of the server found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// As before.
    Unchanged,
    /// It stopped answering.
    Lost,
    /// The same instance answers again (or answered for the first time).
    Back,
    /// Another instance answers: the server restarted and holds nothing.
    Restarted,
}

/// runtimed's view of its Runtime Server.
pub struct Link {
    client: Client,
    socket: PathBuf,
    /// The worker fast path's socket, when the server offers one.
    workers: std::sync::Mutex<Option<PathBuf>>,
    /// The direct invoke path, when the server offers one; replaced (its
    /// connections closed) when the server restarts.
    direct: std::sync::Mutex<Option<Arc<Direct>>>,
    up: AtomicBool,
    /// The instance in step with this runtimed (reset on first contact).
    instance: tokio::sync::Mutex<Option<String>>,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link")
            .field("up", &self.available())
            .finish_non_exhaustive()
    }
}

/// Whether a failed call means the server could not be reached (rather
/// than an answer).
pub fn unreachable(s: &tonic::Status) -> bool {
    matches!(s.code(), tonic::Code::Unavailable | tonic::Code::Unknown)
}

/// A refused `RegisterFunction` or `OpenSession`, classified.
pub fn refused(s: tonic::Status) -> RegisterError {
    match s.code() {
        tonic::Code::InvalidArgument => RegisterError::Invalid(s.message().to_owned()),
        _ if unreachable(&s) => RegisterError::Unavailable(s.message().to_owned()),
        _ => RegisterError::Load(s.message().to_owned()),
    }
}

/// A Run as the server's requests name it.
pub fn run_ref(run: &fpb::RunRef) -> pb::RunRef {
    pb::RunRef {
        namespace: run.namespace.clone(),
        name: run.name.clone(),
        uid: run.uid.clone(),
        runtime: run.runtime.clone(),
    }
}

/// Inline source as the server's requests carry it.
pub fn source(src: &fpb::Source) -> pb::Source {
    pb::Source {
        inline: src.inline.clone(),
        path: src.inline_path.clone(),
    }
}

impl Link {
    /// A link to the server on `socket` (connected lazily).
    pub fn new(socket: &Path) -> Arc<Self> {
        Arc::new(Self {
            client: kruntimes_proto::runtime::client(socket),
            socket: socket.to_path_buf(),
            workers: std::sync::Mutex::new(None),
            direct: std::sync::Mutex::new(None),
            up: AtomicBool::new(false),
            instance: tokio::sync::Mutex::new(None),
        })
    }

    /// A client for one call.
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// The worker fast path's socket, when the server offers one.
    pub fn worker_socket(&self) -> Option<PathBuf> {
        self.workers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The direct invoke path, when the server offers one.
    pub fn direct(&self) -> Option<Arc<Direct>> {
        self.direct
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Whether the server answered its last check.
    pub fn available(&self) -> bool {
        self.up.load(Ordering::Acquire)
    }

    /// Asks the server who it is; on first contact, resets it.
    pub async fn check(&self) -> Change {
        let mut instance = self.instance.lock().await;
        let mut c = self.client();
        let info = match tokio::time::timeout(CHECK_TIMEOUT, c.info(pb::InfoRequest {})).await {
            Ok(Ok(r)) => r.into_inner(),
            Ok(Err(_)) | Err(_) => return self.lost(),
        };
        let change = match instance.as_deref() {
            Some(id) if id == info.instance_id => {
                if self.up.swap(true, Ordering::AcqRel) {
                    Change::Unchanged
                } else {
                    Change::Back
                }
            }
            Some(_) => {
                tracing::warn!(instance = %info.instance_id, "the runtime server restarted");
                Change::Restarted
            }
            None => {
                let reset = tokio::time::timeout(CHECK_TIMEOUT, c.reset(pb::ResetRequest {})).await;
                match reset {
                    Ok(Ok(r)) => {
                        tracing::info!(
                            name = %info.name,
                            version = %info.version,
                            runtimes = ?info.runtimes,
                            dropped = r.into_inner().dropped,
                            "runtime server connected"
                        );
                    }
                    Ok(Err(_)) | Err(_) => return self.lost(),
                }
                Change::Back
            }
        };
        *self.workers.lock().unwrap_or_else(|p| p.into_inner()) = self.beside(&info.worker_socket);
        let invoke = self.beside(&info.invoke_socket);
        let mut direct = self.direct.lock().unwrap_or_else(|p| p.into_inner());
        let same = match (direct.as_deref(), &invoke) {
            (Some(d), Some(path)) => change != Change::Restarted && d.socket() == path,
            _ => false,
        };
        if !same {
            *direct = invoke.map(|path| Arc::new(Direct::new(path)));
        }
        drop(direct);
        *instance = Some(info.instance_id);
        self.up.store(true, Ordering::Release);
        change
    }

    /// A socket the server announced by `name`: a file name beside the
    /// socket dialled (the directory may be mounted elsewhere in the
    /// server's container); `None` when it announced none or something else.
    fn beside(&self, name: &str) -> Option<PathBuf> {
        let name = Path::new(name);
        (name.components().count() == 1 && name.file_name().is_some())
            .then(|| self.socket.with_file_name(name))
    }

    fn lost(&self) -> Change {
        if self.up.swap(false, Ordering::AcqRel) {
            tracing::warn!("the runtime server does not answer");
            Change::Lost
        } else {
            Change::Unchanged
        }
    }

    /// Waits until the server answers for the first time (or `within`
    /// passes); returns whether it did.
    pub async fn connect(&self, within: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            self.check().await;
            if self.available() || tokio::time::Instant::now() >= deadline {
                return self.available();
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// A client, once the server has been reached and reset; a call made
    /// before that would be dropped by the reset.
    pub async fn ready(&self) -> Result<Client, String> {
        if !self.available() {
            self.check().await;
        }
        if self.available() {
            Ok(self.client())
        } else {
            Err("the runtime server does not answer".into())
        }
    }
}

/// Checks the server every `period` for as long as the process runs and
/// hands every change to `on_change`.
pub fn spawn_monitor<F, Fut>(link: Arc<Link>, period: Duration, on_change: F)
where
    F: Fn(Change) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(period);
        loop {
            tick.tick().await;
            let change = link.check().await;
            if change != Change::Unchanged {
                on_change(change).await;
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_announced_socket_is_a_file_name_beside_the_one_dialled() {
        let link = Link::new(Path::new("/run/kruntimes/runtime.sock"));
        assert_eq!(
            link.beside("runtime.sock.invoke"),
            Some(PathBuf::from("/run/kruntimes/runtime.sock.invoke"))
        );
        for refused in ["", "..", ".", "/tmp/x.sock", "sub/x.sock", "../x.sock"] {
            assert_eq!(link.beside(refused), None, "{refused:?}");
        }
    }
}
