//! The static configuration of the function engine and its hard bounds.

use std::time::Duration;

use kruntimes_proto::runtime::Backend;

/// Hard bound of a function's input and output.
pub const MAX_IO_BYTES: u64 = 1024 * 1024;

/// Static configuration of an engine.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Invocation timeout when the registration sets none.
    pub default_timeout: Duration,
    /// Largest invocation timeout a registration may ask for.
    pub max_timeout: Duration,
    /// Bound on handler loading at registration.
    pub start_timeout: Duration,
    /// The built-in backend of this Pod's Runtime; `None` picks it by the
    /// Run's runtime name (`python`, `bash`).
    pub backend: Option<Backend>,
}
