//! The allocator of the binaries on the request path (`krt`, the gateway,
//! the bench's bare Pingora): mimalloc, measured cheaper per request than
//! glibc's (docs/benchmarks.md, "Build profile and allocator"), and the one
//! option they change.
//!
//! ```ignore
//! #[global_allocator]
//! static ALLOCATOR: kruntimes_alloc::Allocator = kruntimes_alloc::Allocator;
//!
//! fn main() {
//!     kruntimes_alloc::tune();
//!     // ...
//! }
//! ```
//!
//! **Purge delay.** mimalloc returns freed pages to the OS only a delay
//! after they empty, and only when the allocator runs again on a thread
//! that can purge them. Its default delay (1 s in mimalloc 3) left the
//! memory of a burst — a 100,000-Run table arriving — resident when the
//! burst's threads went quiet: 790–1,021 bytes of RSS per Run instead of
//! ~650 with 10 ms, mimalloc 2's default, at no CPU cost measurable per
//! request.
//!
//! **Heap profiling.** Valgrind's DHAT and heaptrack see only the system
//! allocator's calls; mimalloc takes its memory from the OS directly. Built
//! with the feature `system` (`cargo build -p krt --features
//! kruntimes-alloc/system`), the binaries allocate with the system
//! allocator instead and [`tune`] does nothing, for counting allocations per
//! request (docs/benchmarks.md, "Allocations per request"); never for
//! figures of time or memory.

/// The global allocator (type and value).
#[cfg(not(feature = "system"))]
pub use mimalloc::MiMalloc as Allocator;
/// The global allocator (type and value): the system's, for heap profilers.
#[cfg(feature = "system")]
pub use std::alloc::System as Allocator;

/// The delay, in milliseconds, before emptied pages go back to the OS.
pub const PURGE_DELAY_MS: i64 = 10;

/// `mi_option_purge_delay` of `mimalloc.h`, which the Rust bindings leave
/// unnamed ("not exposed as constants for stability reasons"): the option
/// just before `mi_option_use_numa_nodes` in mimalloc 2 and 3. A test checks
/// it is the one mimalloc reads from `MIMALLOC_PURGE_DELAY`, so an upgrade
/// that reorders the enum fails the tests instead of setting another option.
#[cfg_attr(feature = "system", allow(dead_code))] // only the tests read it then
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t =
    libmimalloc_sys::mi_option_use_numa_nodes - 1;

/// Applies the options above. Call it first thing in `main`, while the
/// process has one thread (setting an option is not thread-safe).
pub fn tune() {
    // SAFETY: `mi_option_set` takes plain integers and touches no memory of
    // ours; the only hazard, a concurrent option write, is excluded by the
    // contract above (called once, before any thread is started).
    #[cfg(not(feature = "system"))]
    #[allow(unsafe_code)]
    unsafe {
        libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS as _);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The purge delay mimalloc runs with now.
    fn purge_delay_ms() -> i64 {
        // SAFETY: reads an integer option; no memory of ours is involved.
        #[allow(unsafe_code)]
        let v = unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) };
        v as i64
    }

    /// The option index is mimalloc's purge delay: a child started with
    /// `MIMALLOC_PURGE_DELAY` set reads that value back through it.
    #[test]
    fn the_option_is_the_purge_delay_mimalloc_reads() {
        if let Ok(want) = std::env::var("KRUNTIMES_ALLOC_CHILD") {
            assert_eq!(purge_delay_ms().to_string(), want);
            return;
        }
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "tests::the_option_is_the_purge_delay_mimalloc_reads",
                "--test-threads=1",
            ])
            .env("MIMALLOC_PURGE_DELAY", "123")
            .env("KRUNTIMES_ALLOC_CHILD", "123")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("1 passed"),
            "child: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    #[cfg(not(feature = "system"))]
    #[test]
    fn tune_sets_the_purge_delay() {
        tune();
        assert_eq!(purge_delay_ms(), PURGE_DELAY_MS);
    }
}
