//! The bounds of one session: its queue and its operations' timeouts.

use std::time::Duration;

/// Per-session bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionLimits {
    /// Operations waiting in the FIFO queue (429 beyond).
    pub queue_size: usize,
    /// Command timeout when the request sets none.
    pub operation_timeout: Duration,
    /// Largest command timeout a request may ask for.
    pub max_operation_timeout: Duration,
}

impl Default for SessionLimits {
    fn default() -> Self {
        Self {
            queue_size: 16,
            operation_timeout: Duration::from_secs(300),
            max_operation_timeout: Duration::from_secs(3600),
        }
    }
}
