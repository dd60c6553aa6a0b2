//! Cluster mode: the gateway path of an existing deployment (sequential and
//! open loop), reached by its URL or at another address (`--resolve`, a
//! NodePort); with `--direct`, the owner runtimed too, as the gateway calls
//! it (its internal identity and fencing headers), so the summary has the
//! latency the gateway adds on that cluster. With `--kubeconfig`, task
//! Runs through the cluster's API server beside Jobs and Pods
//! (`super::tasks`).

use std::net::SocketAddr;

use anyhow::{Context as _, bail};
use kruntimes_proto::api::{ApiPath, parse_path};

use super::{BODY, INPUT, MAX_OUTSTANDING};
use crate::load::{self, Outcome};
use crate::paths::{self, Fence};
use crate::report::Report;
use crate::{Args, Sizes};

/// Records `gateway` and `open-gateway` against `--gateway` (and `direct`,
/// `open-direct` with `--direct`) unless `--only` leaves out both
/// `sequential` and `open-loop`, and the tasks with `--kubeconfig` unless
/// it leaves out `tasks`; then the derived summary.
pub(super) async fn run(args: &Args, sizes: &Sizes) -> anyhow::Result<Report> {
    let mut report = Report::default();
    if let Some(gateway) = &args.gateway
        && (args.runs("sequential") || args.runs("open-loop"))
    {
        gateway_paths(&mut report, args, sizes, gateway).await?;
    }
    if let Some(kubeconfig) = &args.kubeconfig
        && args.runs("tasks")
    {
        let cluster = super::tasks::ClusterArgs {
            kubeconfig: kubeconfig.clone(),
            image: args.task_image.clone(),
            baseline_max: args.task_baseline_max as usize,
        };
        super::tasks::run_cluster(&mut report, &cluster, sizes).await;
    }
    super::summary::derive(&report.scenarios, &mut report.summary);
    // Only what a cluster run measures (no baselines, no interpreter paths).
    report.summary.retain(|_, v| !v.is_null());
    Ok(report)
}

/// The gateway path, and the direct one with `--direct`.
async fn gateway_paths(
    report: &mut Report,
    args: &Args,
    sizes: &Sizes,
    gateway: &str,
) -> anyhow::Result<()> {
    let ca = args.ca.as_ref().context("--ca")?;
    let token = args.token.as_ref().context("--token")?;
    let endpoint = args.endpoint.as_ref().context("--endpoint")?;
    let mut builder = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(&std::fs::read(ca)?)?)
        .tcp_nodelay(true);
    if args.client_http1 {
        builder = builder.http1_only();
    }
    if let Some(spec) = &args.resolve {
        let (host, addr) = resolve(spec)?;
        builder = builder.resolve(&host, addr);
    }
    let client = builder.build()?;
    let url = format!("{gateway}{endpoint}");
    let token = token.clone();
    let call = move || invoke(client.clone(), url.clone(), token.clone());
    measure(report, "gateway", sizes, call).await;
    if let Some(owner) = args.direct {
        let fence = fence(endpoint, args)?;
        let pki = args.internal_pki.as_ref().context("--internal-pki")?;
        let target = paths::direct_with(
            &pki.join("ca.crt"),
            (&pki.join("tls.crt"), &pki.join("tls.key")),
            owner,
            &fence,
            BODY,
            args.client_http1,
        )?;
        let call = move || {
            let t = target.clone();
            async move { t.call().await }
        };
        measure(report, "direct", sizes, call).await;
    }
    Ok(())
}

/// Records `name` (sequential) and `open-name` (open loop) of `call`.
async fn measure<F, Fut>(report: &mut Report, name: &str, sizes: &Sizes, call: F)
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Outcome> + Send + 'static,
{
    let (rec, el) = load::sequential(sizes.warmup, sizes.requests, &call, || {}).await;
    report.scenarios.insert(name.into(), rec.summary(el));
    let (rec, el) = load::open_loop(
        sizes.rate,
        sizes.open_requests,
        MAX_OUTSTANDING,
        call,
        |_, _, _| {},
    )
    .await;
    report
        .scenarios
        .insert(format!("open-{name}"), rec.summary(el));
}

/// `HOST:PORT:ADDR` → (`HOST`, `ADDR:PORT`).
fn resolve(spec: &str) -> anyhow::Result<(String, SocketAddr)> {
    let mut parts = spec.splitn(3, ':');
    let (Some(host), Some(port), Some(addr)) = (parts.next(), parts.next(), parts.next()) else {
        bail!("--resolve {spec:?}: expected HOST:PORT:ADDR");
    };
    let port: u16 = port
        .parse()
        .with_context(|| format!("--resolve {spec:?}: port"))?;
    let ip: std::net::IpAddr = addr
        .trim_matches(|c| c == '[' || c == ']')
        .parse()
        .with_context(|| format!("--resolve {spec:?}: address"))?;
    Ok((host.to_owned(), SocketAddr::new(ip, port)))
}

/// The fencing values of `--endpoint`'s Run on its owner.
fn fence(endpoint: &str, args: &Args) -> anyhow::Result<Fence> {
    let Ok(ApiPath::Invoke {
        namespace,
        runtime,
        uid,
    }) = parse_path(endpoint)
    else {
        bail!(
            "--endpoint {endpoint:?} is not an invoke path (/v1/namespaces/NS/runtimes/RT/runs/UID:invoke)"
        );
    };
    Ok(Fence {
        uid: uid.to_owned(),
        pod_uid: args.owner_pod_uid.clone().context("--owner-pod-uid")?,
        attempt: args.attempt.context("--attempt")?,
        namespace: namespace.to_owned(),
        runtime: runtime.to_owned(),
    })
}

/// One invoke with the echo input.
async fn invoke(client: reqwest::Client, url: String, token: String) -> Outcome {
    paths::send(client.post(url).bearer_auth(token).body(INPUT)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolve_takes_curls_form() {
        let (host, addr) = resolve("gw.ns.svc:30443:10.213.0.2").unwrap();
        assert_eq!(host, "gw.ns.svc");
        assert_eq!(addr, "10.213.0.2:30443".parse().unwrap());
        let (_, v6) = resolve("gw:443:[::1]").unwrap();
        assert_eq!(v6, "[::1]:443".parse().unwrap());
        for bad in ["gw", "gw:443", "gw:x:10.0.0.1", "gw:443:nowhere"] {
            assert!(resolve(bad).is_err(), "{bad}");
        }
    }
}
