//! `runtimed` binary: parse flags, run the daemon.

use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = kruntimes_runtimed::cli::Args::parse();
    kruntimes_runtimed::cli::init_logging();
    kruntimes_runtimed::cli::run(args).await
}
