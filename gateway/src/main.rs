//! `kruntimes-gateway` binary: parse flags, run the proxy.

use clap::Parser;

/// The allocator of the production build ([`kruntimes_alloc`]).
#[global_allocator]
static ALLOCATOR: kruntimes_alloc::Allocator = kruntimes_alloc::Allocator;

fn main() -> anyhow::Result<()> {
    kruntimes_alloc::tune();
    let config = kruntimes_gateway::Args::parse().into_config()?;
    Ok(kruntimes_gateway::run(config)?)
}
