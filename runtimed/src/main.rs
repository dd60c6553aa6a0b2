//! `runtimed` binary: parse flags, run the daemon.

use clap::Parser;

fn main() -> anyhow::Result<()> {
    let args = kruntimes_runtimed::cli::Args::parse();
    // Before the runtime's threads: it edits the environment.
    let handed_over = kruntimes_runtimed::cli::handed_over_listener()?;
    kruntimes_runtimed::cli::init_logging();
    tokio::runtime::Runtime::new()?.block_on(kruntimes_runtimed::cli::run(args, handed_over))
}
