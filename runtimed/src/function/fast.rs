//! The worker fast path of an invocation: the exchange runs on the Python
//! function's leased worker pipes ([`crate::runtime::lease`]), frames
//! matched by sequence number, under the deadline kept here. A worker whose
//! pipes may be out of step — a deadline, a crash, oversized output, a
//! reply to another request, a caller that went away mid-exchange — is
//! given up, and the server kills its tree; the next invocation leases a
//! fresh one.

use std::path::Path;
use std::time::Duration;

use kruntimes_proto::runtime::InvokeError;
use kruntimes_proto::runtime::worker::{Answer, ExchangeError};
use tokio::sync::MutexGuard;

use super::error::EngineError;
use super::registered::Registered;
use crate::runtime::lease::{Lease, LeaseError};

/// What went wrong on the fast path.
enum Failure {
    Lease(LeaseError),
    Exchange(ExchangeError),
}

/// The lease as one exchange holds it. Dropped before the exchange is done
/// — its caller went away — it gives the lease up, which closes its
/// connection: the server kills the worker, whose pipes may hold half a
/// frame or a reply nobody will read.
struct Held<'a> {
    slot: MutexGuard<'a, Option<Lease>>,
    done: bool,
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.slot.take();
        }
    }
}

/// One invocation on `f`'s leased worker (leasing one first when none is
/// held), from the server's worker socket at `socket`: the output, and
/// whether the call left anything in its artifacts directory.
pub async fn call(
    f: &Registered,
    socket: &Path,
    input: &[u8],
    timeout: Duration,
) -> Result<(Vec<u8>, bool), EngineError> {
    let deadline = tokio::time::Instant::now() + timeout;
    let max_output = f.bounds.max_output;
    let mut held = Held {
        slot: f.lease.lock().await,
        done: false,
    };
    let slot = &mut held.slot;
    let work = async {
        if slot.is_none() {
            let lease = Lease::acquire(socket, &f.run.uid, &f.handle()).await;
            **slot = Some(lease.map_err(Failure::Lease)?);
        }
        match slot.as_mut() {
            Some(lease) => lease
                .exchange(input, max_output)
                .await
                .map_err(Failure::Exchange),
            None => Err(Failure::Exchange(ExchangeError::Unexpected)),
        }
    };
    let outcome = tokio::time::timeout_at(deadline, work).await;
    let result = match outcome {
        Ok(Ok(Answer::Output {
            body,
            artifacts_left,
        })) => Ok((body, artifacts_left)),
        Ok(Ok(Answer::Raised { kind, message })) => {
            Err(InvokeError::function(kind, message).into())
        }
        Ok(Ok(Answer::Unserializable(why))) => Err(InvokeError::InvalidOutput(why).into()),
        Err(_) => {
            held.slot.take();
            Err(InvokeError::timeout(timeout).into())
        }
        Ok(Err(Failure::Lease(LeaseError::Refused(e)))) => Err(e.into()),
        Ok(Err(Failure::Lease(LeaseError::Io(e)))) => Err(EngineError::Unavailable(e.to_string())),
        Ok(Err(Failure::Exchange(e))) => {
            let lease = held.slot.take();
            Err(match e {
                ExchangeError::Pipe(_) => match lease {
                    Some(l) => match l.release().await {
                        Some(exit) => {
                            InvokeError::Crashed(format!("worker exited ({exit})")).into()
                        }
                        None => EngineError::Unavailable("it went away during the call".into()),
                    },
                    None => InvokeError::Crashed("worker pipes lost".into()).into(),
                },
                e @ ExchangeError::TooLarge(..) => InvokeError::InvalidOutput(e.to_string()).into(),
                e => InvokeError::Crashed(format!("{e}; worker replaced")).into(),
            })
        }
    };
    held.done = true;
    result
}
