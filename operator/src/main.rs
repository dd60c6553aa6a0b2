//! `kruntimes-operator`: the Kubernetes-mode control plane (see
//! [`kruntimes_operator::cluster`]).

use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config = kruntimes_operator::Args::parse().into_config()?;
    Ok(kruntimes_operator::run(config).await?)
}
