//! The nginx and HAProxy baselines in front of the owner runtimed, started
//! and probed once; a proxy that is missing or does not answer 200 is
//! reported as skipped.

use super::BODY;
use super::context::Ctx;
use super::local::Local;
use crate::baselines::{self, Baseline};
use crate::paths::{self, HttpTarget};

/// Workers / threads of each baseline.
const THREADS: usize = 2;

/// A baseline that answered its probe.
pub(super) struct Proxy {
    /// `nginx` or `haproxy`.
    pub(super) name: &'static str,
    /// The Python echo through it.
    pub(super) target: HttpTarget,
    /// The process (stopped on drop).
    pub(super) baseline: Baseline,
}

/// Starts both baselines, keeping those that answer.
pub(super) async fn start(ctx: &mut Ctx, local: &Local, install: bool) -> Vec<Proxy> {
    let started = ["nginx", "haproxy"].map(|name| (name, launch(local, name, install)));
    let mut proxies = Vec::new();
    for (name, b) in started {
        let probed = b.and_then(|b| {
            Ok((
                paths::via_proxy(&local.pki, &b.url, &local.py, None, BODY)?,
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
fn launch(local: &Local, name: &str, install: bool) -> anyhow::Result<Baseline> {
    let port = kruntimes_testkit::free_port();
    let dir = local.tmp.path().join(name);
    let (pki, owner, py) = (&local.pki, local.owner, &local.py);
    let b = baselines::ensure(name, name, install)?;
    match name {
        "nginx" => baselines::nginx(&b, &dir, pki, port, owner, py, THREADS),
        _ => baselines::haproxy(&b, &dir, pki, port, owner, py, THREADS),
    }
}
