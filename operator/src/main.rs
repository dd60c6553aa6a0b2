//! `kruntimes-operator`: the Kubernetes-mode control plane (see
//! [`kruntimes_operator::cluster`]).

use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    kruntimes_operator::cli::run(kruntimes_operator::cli::Args::parse()).await
}
