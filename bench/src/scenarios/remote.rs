//! Cluster mode: only the gateway path of an existing deployment, since the
//! harness cannot reach its Pods (sequential and open loop).

use anyhow::Context as _;

use super::support::https_client;
use super::{INPUT, MAX_OUTSTANDING};
use crate::load::{self, Outcome};
use crate::paths;
use crate::report::Report;
use crate::{Args, Sizes};

/// Records `gateway` and `open-gateway` against `gateway`.
pub(super) async fn run(args: &Args, sizes: &Sizes, gateway: &str) -> anyhow::Result<Report> {
    let ca = args.ca.as_ref().context("--ca")?;
    let token = args.token.as_ref().context("--token")?;
    let endpoint = args.endpoint.as_ref().context("--endpoint")?;
    let client = https_client(ca)?;
    let url = format!("{gateway}{endpoint}");
    let token = token.clone();
    let call = move || invoke(client.clone(), url.clone(), token.clone());
    let mut report = Report::default();
    let (rec, el) = load::sequential(sizes.warmup, sizes.requests, &call, || {}).await;
    report.scenarios.insert("gateway".into(), rec.summary(el));
    let (rec, el) = load::open_loop(
        sizes.rate,
        sizes.open_requests,
        MAX_OUTSTANDING,
        call,
        || {},
    )
    .await;
    report
        .scenarios
        .insert("open-gateway".into(), rec.summary(el));
    Ok(report)
}

/// One invoke with the echo input.
async fn invoke(client: reqwest::Client, url: String, token: String) -> Outcome {
    paths::send(client.post(url).bearer_auth(token).body(INPUT)).await
}
