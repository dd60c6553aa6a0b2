//! Background passes (idle expiry) that live exactly as long as their owner.

use std::sync::Arc;
use std::time::Duration;

/// Runs `f` every `period` for as long as `owner` is alive: the task holds
/// only a weak reference, so dropping the owner ends it.
pub fn spawn_periodic<T, F, Fut>(owner: &Arc<T>, period: Duration, f: F)
where
    T: Send + Sync + 'static,
    F: Fn(Arc<T>) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let weak = Arc::downgrade(owner);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(period);
        loop {
            tick.tick().await;
            let Some(owner) = weak.upgrade() else { return };
            f(owner).await;
        }
    });
}
