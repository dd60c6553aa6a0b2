//! `kruntimes-gateway` binary: parse flags, run the proxy.

use clap::Parser;

fn main() -> anyhow::Result<()> {
    kruntimes_gateway::run(kruntimes_gateway::Args::parse())
}
