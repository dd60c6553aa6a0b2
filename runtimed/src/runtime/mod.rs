//! The Runtime Server beside runtimed: the process that runs user code,
//! reached over a Unix socket (the `kruntimes.runtime.v1` contract: its
//! `RuntimeServer`, `FunctionRuntime` and `SessionRuntime` services).
//! runtimed runs no user process itself. This module is runtimed's gRPC
//! edge towards the server: a status the server answers with becomes the
//! contract's [`ServerError`] here, and nothing past it sees a status.
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

use kruntimes_proto::runtime::v1 as pb;
use kruntimes_proto::runtime::{self as contract, ErrorKind, ServerError};

pub use self::direct::Direct;
use crate::registration::RegisterError;

/// Clients of the Runtime Server's services.
pub type Client = contract::Clients;

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

/// A refused `RegisterFunction` or `OpenSession`, classified.
pub fn refused(e: ServerError) -> RegisterError {
    match e.kind {
        ErrorKind::Invalid => RegisterError::Invalid(e.message),
        ErrorKind::Unavailable => RegisterError::Unavailable(e.message),
        _ => RegisterError::Load(e.message),
    }
}

/// Why a server that answers `Info` is not one runtimed can use.
fn incompatible(info: &pb::InfoResponse) -> Option<String> {
    // A server from before the contract named itself speaks v1.
    if !info.contract.is_empty() && info.contract != contract::CONTRACT {
        return Some(format!(
            "the runtime server speaks {}; this runtimed speaks {}",
            info.contract,
            contract::CONTRACT
        ));
    }
    None
}

impl Link {
    /// A link to the server on `socket` (connected lazily).
    pub fn new(socket: &Path) -> Arc<Self> {
        Arc::new(Self {
            client: contract::Clients::connect_lazy(socket),
            socket: socket.to_path_buf(),
            workers: std::sync::Mutex::new(None),
            direct: std::sync::Mutex::new(None),
            up: AtomicBool::new(false),
            instance: tokio::sync::Mutex::new(None),
        })
    }

    /// Clients for one call.
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
        let info =
            match tokio::time::timeout(CHECK_TIMEOUT, c.server.info(pb::InfoRequest {})).await {
                Ok(Ok(r)) => r.into_inner(),
                Ok(Err(_)) | Err(_) => return self.lost(),
            };
        if let Some(why) = incompatible(&info) {
            // Registering on it would fail in ways nobody could read:
            // treat it as absent, loudly.
            tracing::error!(reason = %why, "incompatible runtime server");
            return self.lost();
        }
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
                let reset =
                    tokio::time::timeout(CHECK_TIMEOUT, c.server.reset(pb::ResetRequest {})).await;
                match reset {
                    Ok(Ok(r)) => {
                        tracing::info!(
                            name = %info.name,
                            version = %info.version,
                            runtimes = ?info.runtimes,
                            services = ?info.services,
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

    #[test]
    fn a_server_of_another_contract_is_incompatible() {
        let info = |contract: &str| pb::InfoResponse {
            contract: contract.into(),
            ..Default::default()
        };
        assert_eq!(incompatible(&info("kruntimes.runtime.v1")), None);
        assert_eq!(incompatible(&info("")), None);
        let why = incompatible(&info("kruntimes.runtime.v2")).unwrap();
        assert!(why.contains("v2") && why.contains("v1"), "{why}");
    }

    #[test]
    fn refusals_are_final_unless_the_server_is_unreachable() {
        let e = |kind| refused(ServerError::new(kind, "why"));
        assert!(matches!(e(ErrorKind::Invalid), RegisterError::Invalid(_)));
        assert!(matches!(
            e(ErrorKind::Unavailable),
            RegisterError::Unavailable(_)
        ));
        for kind in [ErrorKind::Refused, ErrorKind::NotFound, ErrorKind::Internal] {
            assert!(matches!(e(kind), RegisterError::Load(_)), "{kind:?}");
        }
    }

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
