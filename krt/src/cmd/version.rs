//! `krt version`: this build, and the components it can reach.

use kruntimes_client::Target;

/// This build's version, git commit and date (set by `build.rs`).
pub fn this_build() -> String {
    format!(
        "krt {} (commit {}, built {})",
        env!("CARGO_PKG_VERSION"),
        env!("KRT_GIT_COMMIT"),
        env!("KRT_BUILD_DATE")
    )
}

/// Prints this build, then the gateway's `/version` and (on a cluster) the
/// API server's, when they answer.
pub async fn version(t: Option<&Target>) -> anyhow::Result<()> {
    println!("{}", this_build());
    let Some(t) = t else {
        return Ok(());
    };
    match gateway_version(t).await {
        Ok(v) => println!("gateway {v}"),
        Err(e) => println!("gateway: not reachable ({e:#})"),
    }
    if let Target::Cluster(c) = t {
        match c.client().apiserver_version().await {
            Ok(v) => println!("kubernetes {}", v.git_version),
            Err(e) => println!("kubernetes: not reachable ({e})"),
        }
    }
    Ok(())
}

async fn gateway_version(t: &Target) -> anyhow::Result<String> {
    let runs = t.runs(None).await?;
    let (base, gw) = match t {
        Target::Embedded(e) => (e.client().gateway.clone(), e.gateway()?),
        Target::Cluster(_) => {
            let run = runs
                .iter()
                .find(|r| r.endpoint.is_some())
                .ok_or_else(|| anyhow::anyhow!("no Run names the gateway yet"))?;
            let url = run.endpoint.clone().unwrap_or_default();
            let base = url.split("/v1/").next().unwrap_or_default().to_owned();
            (base, t.gateway(run).await?)
        }
    };
    let v: serde_json::Value = gw
        .http()
        .get(format!("{base}/version"))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    Ok(format!(
        "{} (commit {})",
        v["version"].as_str().unwrap_or("?"),
        v["commit"].as_str().unwrap_or("?")
    ))
}
