//! `krt invoke NAME`: one call of a function Run through the gateway.

use anyhow::Context as _;

use kruntimes_client::gateway;
use kruntimes_client::{self as client, Target};

/// Invokes `namespace/name` with `body` and prints its output.
pub async fn invoke(
    t: &Target,
    namespace: &str,
    name: &str,
    body: Vec<u8>,
    invocation_id: Option<&str>,
) -> anyhow::Result<()> {
    let run = t.run_of_mode(namespace, name, "function").await?;
    let url = client::endpoint(&run)?;
    let gw = t.gateway(&run).await?;
    let mut req = gw
        .http()
        .post(url)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(body);
    if let Some(id) = invocation_id {
        req = req.header(kruntimes_proto::api::HEADER_INVOCATION_ID, id);
    }
    let resp = req.send().await.context("send the invoke request")?;
    let resp = gateway::check(resp).await?;
    let served_by = resp
        .headers()
        .get(kruntimes_proto::api::HEADER_SERVED_BY)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let out = resp.bytes().await?;
    println!("{}", String::from_utf8_lossy(&out));
    if let Some(s) = served_by {
        tracing::debug!(served_by = %s, "invoke served");
    }
    Ok(())
}
