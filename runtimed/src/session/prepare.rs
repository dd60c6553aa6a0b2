//! Turning an `OpenSession` request into a started session: its bounds, the
//! clean environment of its commands, a fresh workspace with the inline
//! source, and the queue worker.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use kruntimes_proto::session::v1 as pb;

use super::queue::{Session, SessionLimits};
use crate::registration::RegisterError;
use crate::source;

/// Default number of operations waiting behind the running one.
const DEFAULT_QUEUE_SIZE: usize = 16;
/// Largest queue a session may ask for.
const MAX_QUEUE_SIZE: u32 = 1024;
/// Command timeout when neither the session nor the request sets one.
const DEFAULT_OPERATION_TIMEOUT: Duration = Duration::from_secs(300);
/// Largest command timeout.
const MAX_OPERATION_TIMEOUT: Duration = Duration::from_secs(3600);

/// The bounds a session asks for, defaulted and clamped.
pub fn limits(req: &pb::OpenSessionRequest) -> SessionLimits {
    SessionLimits {
        queue_size: if req.queue_size == 0 {
            DEFAULT_QUEUE_SIZE
        } else {
            req.queue_size.min(MAX_QUEUE_SIZE) as usize
        },
        operation_timeout: if req.operation_timeout_seconds == 0 {
            DEFAULT_OPERATION_TIMEOUT
        } else {
            Duration::from_secs(req.operation_timeout_seconds.into()).min(MAX_OPERATION_TIMEOUT)
        },
        max_operation_timeout: MAX_OPERATION_TIMEOUT,
    }
}

/// The environment of the session's commands: a clean base (never the
/// daemon's own environment) plus the Run's `spec.env`.
pub fn environment(
    run_uid: &str,
    overrides: impl IntoIterator<Item = (String, String)>,
) -> BTreeMap<String, String> {
    let mut env = BTreeMap::from([
        (
            "PATH".to_owned(),
            std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".into()),
        ),
        ("LANG".to_owned(), "C.UTF-8".to_owned()),
        ("KRUNTIMES_RUN_UID".to_owned(), run_uid.to_owned()),
    ]);
    env.extend(overrides);
    env
}

/// Replaces `workspace` with a fresh one, starts the session's queue and
/// writes the inline source (`main.sh` unless `inlinePath` says otherwise).
pub fn prepare(
    run_uid: &str,
    workspace: &Path,
    req: &pb::OpenSessionRequest,
) -> Result<Arc<Session>, RegisterError> {
    if workspace.exists() {
        std::fs::remove_dir_all(workspace)?;
    }
    let env = environment(run_uid, req.env.clone());
    let session = Session::open(run_uid, workspace, env, limits(req))?;
    if let Some(src) = req.source.as_ref().filter(|s| !s.inline.is_empty()) {
        let path = if src.inline_path.is_empty() {
            "main.sh"
        } else {
            src.inline_path.as_str()
        };
        source::write_inline(session.root(), path, src.inline.as_bytes())?;
    }
    Ok(session)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_default_and_clamp_the_request() {
        let mut req = pb::OpenSessionRequest::default();
        assert_eq!(limits(&req), SessionLimits::default());
        req.queue_size = 5000;
        req.operation_timeout_seconds = 7200;
        let l = limits(&req);
        assert_eq!(l.queue_size, 1024);
        assert_eq!(l.operation_timeout, MAX_OPERATION_TIMEOUT);
        req.queue_size = 4;
        req.operation_timeout_seconds = 30;
        let l = limits(&req);
        assert_eq!(
            (l.queue_size, l.operation_timeout),
            (4, Duration::from_secs(30))
        );
    }

    #[test]
    fn commands_get_a_clean_environment_with_the_runs_overrides() {
        let overrides = BTreeMap::from([
            ("LANG".to_owned(), "de_DE.UTF-8".to_owned()),
            ("GREETING".to_owned(), "hi".to_owned()),
        ]);
        let env = environment("uid-1", overrides);
        assert_eq!(env["KRUNTIMES_RUN_UID"], "uid-1");
        assert_eq!(env["LANG"], "de_DE.UTF-8", "the Run's env wins");
        assert_eq!(env["GREETING"], "hi");
        assert!(env.contains_key("PATH"));
        assert!(
            !env.contains_key("CARGO"),
            "the daemon's environment is not inherited"
        );
    }
}
