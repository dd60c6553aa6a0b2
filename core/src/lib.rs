//! Kube-free decisions of kruntimes, written once.
//!
//! - [`lifecycle`]: every rule about a Run's phases, reasons, attempts,
//!   retries, termination, timeouts and owner loss — what the control plane
//!   decides about one Run ([`lifecycle::control`]) and what its owner does
//!   ([`lifecycle::owner`]).
//! - [`scheduler`]: the framework that places Runs on Runtime Pods
//!   (PreFilter, Filter, Score, Reserve), with resources, affinity and
//!   priority.
//! - [`pass`]: the one decision pass both control planes run, from an
//!   immutable snapshot to operations.
//!
//! Nothing here performs I/O or knows Kubernetes: the embedded control plane
//! of `krt up`, the Kubernetes operator and runtimed are adapters that build
//! the inputs and carry the outputs out.
#![forbid(unsafe_code)]

pub mod lifecycle;
mod mode;
pub mod pass;
pub mod pool;
pub mod scheduler;

pub use lifecycle::{Phase, Reason};
pub use mode::{ModeKind, TerminationMode};
pub use scheduler::Resources;

/// Longest `status.message` in bytes.
pub const MAX_MESSAGE_BYTES: usize = 1024;

/// `message` cut to [`MAX_MESSAGE_BYTES`] on a character boundary; `None`
/// when empty.
pub fn bounded_message(message: &str) -> Option<String> {
    if message.is_empty() {
        return None;
    }
    let mut cut = message.len().min(MAX_MESSAGE_BYTES);
    while !message.is_char_boundary(cut) {
        cut -= 1;
    }
    Some(message[..cut].to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_bounded_on_char_boundaries() {
        assert_eq!(bounded_message(""), None);
        assert_eq!(bounded_message("ok").as_deref(), Some("ok"));
        let long = "é".repeat(MAX_MESSAGE_BYTES);
        let cut = bounded_message(&long).unwrap();
        assert!(cut.len() <= MAX_MESSAGE_BYTES);
        assert!(cut.chars().all(|c| c == 'é'));
    }
}
