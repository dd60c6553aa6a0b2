//! `kruntimes-gateway` binary: parse flags, run the proxy.

use clap::Parser;

/// mimalloc: the proxy allocates per request (headers, buffers); glibc's
/// allocator was a sixth of its CPU time (docs/benchmarks.md).
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<()> {
    kruntimes_gateway::run(kruntimes_gateway::Args::parse())
}
