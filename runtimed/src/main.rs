//! `runtimed` binary: parse flags, run the daemon.

use clap::Parser;

fn main() -> anyhow::Result<()> {
    let config = kruntimes_runtimed::Args::parse().into_config()?;
    // Before the runtime's threads: it edits the environment.
    let handed_over = kruntimes_runtimed::handed_over_listener()?;
    kruntimes_runtimed::init_logging();
    let runtime = tokio::runtime::Runtime::new()?;
    Ok(runtime.block_on(kruntimes_runtimed::run(config, handed_over))?)
}
