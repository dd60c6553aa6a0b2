//! `runtimed` binary: parse flags, run the daemon.

use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = runtimed::cli::Args::parse();
    runtimed::cli::init_logging();
    runtimed::cli::run(args).await
}
