//! `runtime-server` binary: parse flags, serve (or run as a shim).

use clap::Parser;

fn main() -> anyhow::Result<()> {
    kruntimes_runtime_server::main(kruntimes_runtime_server::Args::parse(), &[])?;
    Ok(())
}
