//! `kruntimes-gateway` binary: parse flags, run the proxy.

use clap::Parser;

/// The allocator of the production build (docs/benchmarks.md: measured
/// cheaper per request than glibc's on the request path).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<()> {
    kruntimes_gateway::run(kruntimes_gateway::Args::parse())
}
