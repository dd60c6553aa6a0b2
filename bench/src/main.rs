//! `kruntimes-bench` binary.

use clap::Parser;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    kruntimes_bench::run(kruntimes_bench::Args::parse()).await?;
    Ok(())
}
