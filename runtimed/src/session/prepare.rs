//! Turning a session assignment into a started session: its bounds, the
//! session opened on the Runtime Server, and the queue worker.

use std::sync::Arc;
use std::time::Duration;

use kruntimes_proto::agent::v1::SessionAssignment;
use kruntimes_proto::runtime::v1 as rt;

use super::queue::{Session, SessionLimits};
use crate::registration::{Assignment, RegisterError};
use crate::runtime::{self, Link};

/// Default number of operations waiting behind the running one.
const DEFAULT_QUEUE_SIZE: usize = 16;
/// Largest queue a session may ask for.
const MAX_QUEUE_SIZE: u32 = 1024;
/// Command timeout when neither the session nor the request sets one.
const DEFAULT_OPERATION_TIMEOUT: Duration = Duration::from_secs(300);
/// Largest command timeout.
const MAX_OPERATION_TIMEOUT: Duration = Duration::from_secs(3600);

/// The bounds a session asks for, defaulted and clamped.
pub fn limits(req: &SessionAssignment) -> SessionLimits {
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

/// Opens the session on the Runtime Server (a fresh workspace with the
/// inline source, `main.sh` unless `inlinePath` says otherwise, and the
/// Run's environment; with the Runtime's `artifacts` store, an artifacts
/// directory and the Run's staged inputs) and starts its queue.
pub async fn prepare(
    a: &Assignment,
    link: &Arc<Link>,
    s: &SessionAssignment,
    artifacts: Option<&crate::artifacts::Artifacts>,
) -> Result<Arc<Session>, RegisterError> {
    let inputs = !a.inputs.is_empty();
    if inputs {
        let Some(store) = artifacts else {
            return Err(RegisterError::Load(
                "the Run has spec.inputs, but its Runtime has no artifact store".into(),
            ));
        };
        store
            .stage(link, &a.run, a.attempt, &a.inputs)
            .await
            .map_err(RegisterError::Load)?;
    }
    let open = rt::OpenSessionRequest {
        run: Some(a.run.clone()),
        attempt: a.attempt,
        source: a.source.clone(),
        env: a.env.clone(),
        artifacts: artifacts.is_some(),
        inputs,
    };
    let mut client = link.ready().await.map_err(RegisterError::Unavailable)?;
    client
        .sessions
        .open_session(open)
        .await
        .map_err(|s| runtime::refused(s.into()))?;
    Ok(Session::open(&a.run.uid, link.clone(), limits(s)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_default_and_clamp_the_request() {
        let mut req = SessionAssignment::default();
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
}
