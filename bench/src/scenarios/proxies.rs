//! The nginx, HAProxy and bare Pingora baselines in front of the owner
//! runtimed, started and probed once; a proxy that is missing or does not answer 200 is
//! reported as skipped.

use std::net::SocketAddr;

use super::BODY;
use super::context::Ctx;
use super::local::Local;
use crate::baselines::{self, Baseline};
use crate::paths::{self, Fence, HttpTarget};

/// Workers / threads of nginx and HAProxy (bare Pingora runs as many as
/// the gateway, `--gateway-threads`, 2 by default).
const THREADS: usize = 2;

/// The upstream protocol of bare Pingora: the gateway's (HTTP/1.1 over
/// pooled mTLS connections, docs/benchmarks.md).
const UPSTREAM_PROTOCOL: &str = "h1";

/// The baselines, in the order they are reported.
pub(super) const NAMES: [&str; 3] = ["nginx", "haproxy", "pingora"];

/// A baseline that answered its probe.
pub(super) struct Proxy {
    /// `nginx`, `haproxy` or `pingora`.
    pub(super) name: &'static str,
    /// The Python echo through it.
    pub(super) target: HttpTarget,
    /// The process (stopped on drop).
    pub(super) baseline: Baseline,
}

/// Starts the baselines in front of the Python echo Run's owner, keeping
/// those that answer.
pub(super) async fn start(ctx: &mut Ctx, local: &Local, install: bool) -> Vec<Proxy> {
    start_for(ctx, local, local.owner, &local.py, install, |t| t).await
}

/// Starts the baselines in front of `owner`, adding `fence`'s headers; each
/// proxy's target is `path` of its invoke path (the probe calls it).
pub(super) async fn start_for(
    ctx: &mut Ctx,
    local: &Local,
    owner: SocketAddr,
    fence: &Fence,
    install: bool,
    path: impl Fn(HttpTarget) -> HttpTarget,
) -> Vec<Proxy> {
    let started = NAMES.map(|name| (name, launch(local, name, owner, fence, install)));
    let mut proxies = Vec::new();
    // Each proxy gets the gateway's request, bearer token included: the
    // token is bytes every caller sends, whatever stands in front of the
    // owner (HTTP/2 clients never index it in HPACK, so each request
    // carries it whole and each proxy decodes it). The baselines drop it
    // before the owner, as the gateway does; only the gateway checks it.
    let token = Some(local.stack.token.as_str());
    for (name, b) in started {
        let probed = b.and_then(|b| {
            Ok((
                path(paths::via_proxy(&local.pki, &b.url, fence, token, BODY)?),
                b,
            ))
        });
        match probed {
            Ok((target, baseline)) => match target.call().await {
                Ok(200) => proxies.push(Proxy {
                    name,
                    target,
                    baseline,
                }),
                other => ctx.skip(name, format!("probe answered {other:?}")),
            },
            Err(e) => ctx.skip(name, e.to_string()),
        }
    }
    proxies
}

/// Finds (or installs) and starts baseline `name` on a free port.
fn launch(
    local: &Local,
    name: &str,
    owner: SocketAddr,
    py: &Fence,
    install: bool,
) -> anyhow::Result<Baseline> {
    let port = kruntimes_testkit::free_port();
    let dir = local.tmp.path().join(format!("{name}-{port}"));
    let pki = &local.pki;
    if name == "pingora" {
        let bin = super::sibling("kruntimes-pingora-baseline");
        anyhow::ensure!(
            bin.exists(),
            "{} not found: build it with `cargo build --release -p kruntimes-bench`",
            bin.display()
        );
        return baselines::pingora(
            &bin,
            pki,
            port,
            owner,
            py,
            UPSTREAM_PROTOCOL,
            local.gateway_threads,
        );
    }
    let b = baselines::ensure(name, name, install)?;
    match name {
        "nginx" => baselines::nginx(&b, &dir, pki, port, owner, py, THREADS),
        _ => baselines::haproxy(&b, &dir, pki, port, owner, py, THREADS),
    }
}
