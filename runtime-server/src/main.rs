//! `runtime-server` binary: parse flags, serve (or run as a shim).

use clap::Parser;

fn main() -> anyhow::Result<()> {
    kruntimes_runtime_server::cli::main(kruntimes_runtime_server::cli::Args::parse(), &[])
}
