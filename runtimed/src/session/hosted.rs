//! The sessions a runtimed hosts: open/close semantics keyed by Run UID and
//! attempt, idle expiry and their ownership entries.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use kruntimes_proto::function::v1 as fpb;
use kruntimes_proto::ownership::v1 as own;
use kruntimes_proto::session::v1 as pb;
use tonic::Status;

use super::{CloseMode, Session, SessionLimits};
use crate::local::{LocalPod, Published};
use crate::registry::{self, Record, RegisterDecision};

/// A hosted session.
pub struct Hosted {
    /// The Run.
    pub run: fpb::RunRef,
    /// Attempt.
    pub attempt: u64,
    /// The session.
    pub session: Arc<Session>,
    idle_timeout: Option<Duration>,
    expired: std::sync::atomic::AtomicBool,
}

impl Hosted {
    /// What `SessionRuntime` reports about it.
    pub fn info(&self) -> pb::SessionInfo {
        let st = self.session.status();
        pb::SessionInfo {
            run: Some(self.run.clone()),
            attempt: self.attempt,
            pending_operations: st.pending_operations as u32,
            idle_ms: st.idle_ms,
            closing: st.closing,
        }
    }
}

/// Every session of this runtimed.
pub struct Sessions {
    pod: Arc<LocalPod>,
    map: RwLock<HashMap<String, Arc<Hosted>>>,
    serial: tokio::sync::Mutex<()>,
}

impl Sessions {
    /// An empty set publishing into `pod`'s ownership table.
    pub fn new(pod: Arc<LocalPod>) -> Arc<Self> {
        Arc::new(Self {
            pod,
            map: RwLock::new(HashMap::new()),
            serial: tokio::sync::Mutex::new(()),
        })
    }

    /// A hosted session.
    pub fn get(&self, uid: &str) -> Option<Arc<Hosted>> {
        self.map
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(uid)
            .cloned()
    }

    fn publish(&self, h: &Hosted, phase: own::Phase, reason: &str) {
        self.pod.publish(
            &h.run,
            h.attempt,
            Published {
                mode: own::Mode::Session,
                phase,
                reason,
                limits: None,
            },
        );
    }

    /// Opens (idempotently) a session.
    pub async fn open(&self, req: pb::OpenSessionRequest) -> Result<pb::SessionInfo, Status> {
        let run = req
            .run
            .clone()
            .ok_or_else(|| Status::invalid_argument("run is required"))?;
        if kruntimes_proto::api::parse_path(&format!(
            "/v1/namespaces/{}/runtimes/{}/sessions/{}",
            run.namespace, run.runtime, run.uid
        ))
        .is_err()
        {
            return Err(Status::invalid_argument(
                "namespace, runtime or uid is malformed",
            ));
        }
        let _serial = self.serial.lock().await;
        let current = self.get(&run.uid);
        let record = current.as_ref().map(|h| Record {
            attempt: h.attempt,
            digest: String::new(),
            registration_id: String::new(),
        });
        match registry::decide_register(record.as_ref(), req.attempt, "") {
            RegisterDecision::Idempotent => {
                if let Some(h) = current {
                    return Ok(h.info());
                }
            }
            RegisterDecision::Stale => {
                return Err(Status::failed_precondition(format!(
                    "attempt {} is older than the open session's",
                    req.attempt
                )));
            }
            RegisterDecision::Supersede => {
                if let Some(old) = current {
                    self.remove(&old, CloseMode::Cancel).await;
                }
            }
            RegisterDecision::Create | RegisterDecision::Conflict => {}
        }
        let workspace = self.pod.workdir(&run.uid);
        if workspace.exists() {
            std::fs::remove_dir_all(&workspace).map_err(|e| Status::internal(e.to_string()))?;
        }
        let mut env: BTreeMap<String, String> = BTreeMap::from([
            (
                "PATH".to_owned(),
                std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".into()),
            ),
            ("LANG".to_owned(), "C.UTF-8".to_owned()),
            ("KRUNTIMES_RUN_UID".to_owned(), run.uid.clone()),
        ]);
        env.extend(req.env.clone());
        let limits = SessionLimits {
            queue_size: if req.queue_size == 0 {
                16
            } else {
                req.queue_size.min(1024) as usize
            },
            operation_timeout: if req.operation_timeout_seconds == 0 {
                Duration::from_secs(300)
            } else {
                Duration::from_secs(req.operation_timeout_seconds.into())
                    .min(Duration::from_secs(3600))
            },
            max_operation_timeout: Duration::from_secs(3600),
        };
        let session = Session::open(&run.uid, &workspace, env, limits)
            .map_err(|e| Status::internal(e.to_string()))?;
        if let Some(src) = req.source.as_ref().filter(|s| !s.inline.is_empty()) {
            let path = if src.inline_path.is_empty() {
                "main.sh"
            } else {
                src.inline_path.as_str()
            };
            crate::source::write_inline(session.root(), path, src.inline.as_bytes()).map_err(
                |e| match e {
                    crate::source::WriteError::Path(p) => Status::invalid_argument(p.to_string()),
                    crate::source::WriteError::Io(io) => Status::internal(io.to_string()),
                },
            )?;
        }
        let hosted = Arc::new(Hosted {
            run: run.clone(),
            attempt: req.attempt,
            session,
            idle_timeout: (req.idle_timeout_seconds > 0)
                .then(|| Duration::from_secs(req.idle_timeout_seconds.into())),
            expired: std::sync::atomic::AtomicBool::new(false),
        });
        self.publish(&hosted, own::Phase::Ready, "");
        self.map
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(run.uid.clone(), hosted.clone());
        tracing::info!(run_uid = %run.uid, attempt = req.attempt, "session opened");
        Ok(hosted.info())
    }

    async fn remove(&self, h: &Arc<Hosted>, mode: CloseMode) {
        self.publish(h, own::Phase::Draining, "Closing");
        h.session.close(mode).await;
        {
            let mut map = self.map.write().unwrap_or_else(|p| p.into_inner());
            if map.get(&h.run.uid).is_some_and(|cur| Arc::ptr_eq(cur, h)) {
                map.remove(&h.run.uid);
            }
        }
        self.pod.withdraw(&h.run.uid);
    }

    /// Closes a session; absent sessions succeed with `false`.
    pub async fn close(&self, uid: &str, mode: CloseMode) -> bool {
        let _serial = self.serial.lock().await;
        match self.get(uid) {
            Some(h) => {
                self.remove(&h, mode).await;
                true
            }
            None => false,
        }
    }

    /// Marks idle sessions `FAILED`/`IdleTimeout`; the control plane ends
    /// the Run and closes them.
    pub fn expire_idle(&self) {
        let all: Vec<_> = self
            .map
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect();
        for h in all {
            if let (Some(limit), Some(idle)) = (h.idle_timeout, h.session.idle_for())
                && idle >= limit
                && !h.expired.swap(true, std::sync::atomic::Ordering::AcqRel)
            {
                tracing::info!(run_uid = %h.run.uid, "session idle timeout");
                self.publish(&h, own::Phase::Failed, "IdleTimeout");
            }
        }
    }

    /// Runs [`Sessions::expire_idle`] every `period`.
    pub fn spawn_idle_reaper(self: &Arc<Self>, period: Duration) {
        crate::periodic::spawn_periodic(self, period, |s| async move { s.expire_idle() });
    }

    /// Cancels every session (shutdown).
    pub async fn shutdown(&self) {
        let all: Vec<_> = self
            .map
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect();
        for h in all {
            h.session.close(CloseMode::Cancel).await;
        }
    }
}
