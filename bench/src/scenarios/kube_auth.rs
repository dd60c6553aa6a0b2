//! Kubernetes authentication: TokenReview + SubjectAccessReview against a
//! real kube-apiserver (kubetest), RBAC from `examples/rbac/`, through a
//! third gateway with `--auth kubernetes` on the same table. Cache hits
//! versus auth disabled, and the API calls 10 tokens cost over many
//! requests, counted by the API server itself.

use anyhow::Context as _;
use kruntimes_kubetest::{ApiServer, Subject, User};
use serde_json::json;

use super::BODY;
use super::context::Ctx;
use super::extra_gateway::{self, GatewayAuth};
use super::local::Local;
use super::support::{round_robin, wait_routed};
use crate::Sizes;
use crate::paths::{self, HttpTarget};

/// Service-account tokens the round-robin part spreads its requests over.
const TOKENS: usize = 10;

/// Records `kube-auth-hit` and `kube-auth-10-tokens` and the `kube_*_10_tokens`
/// figures; any failure (such as missing API server binaries) skips
/// `kube-auth-hit` with the reason.
pub(super) async fn run(ctx: &mut Ctx, local: &Local, sizes: &Sizes) {
    ctx.bar.set_message("kubernetes auth");
    if let Err(e) = measure(ctx, local, sizes).await {
        ctx.skip("kube-auth-hit", format!("{e:#}"));
    }
}

async fn measure(ctx: &mut Ctx, local: &Local, sizes: &Sizes) -> anyhow::Result<()> {
    let server = ApiServer::start().await?;
    let tokens = grant(&server).await?;
    let kubeconfig = server.write_kubeconfig(User::Gateway)?;
    let g = extra_gateway::start(
        &local.krt,
        &local.pki,
        &local.control_plane,
        GatewayAuth::Kubernetes(&kubeconfig),
        &local.tmp.path().join("gateway-kube.log"),
        local.gateway_threads,
    )?;
    let alice = paths::via_proxy(
        &local.pki,
        &g.url,
        &local.py,
        Some(server.token(User::Alice)),
        BODY,
    )?;
    wait_routed(&alice)
        .await
        .context("the Kubernetes-auth gateway never answered 200")?;
    ctx.sequential("kube-auth-hit", sizes.warmup, sizes.requests, || {
        alice.call()
    })
    .await;
    let targets: Vec<HttpTarget> = tokens.iter().map(|t| alice.with_token(t)).collect();
    ten_tokens(ctx, &server, &targets, sizes.kube_requests).await
}

/// Sets up RBAC: the gateway may review tokens and access; alice and
/// ServiceAccount `default/bench` may invoke Runs in `default`. Returns
/// [`TOKENS`] TokenRequest tokens of `default/bench`.
async fn grant(server: &ApiServer) -> anyhow::Result<Vec<String>> {
    let role = server
        .apply_role_yaml(
            None,
            include_bytes!("../../../examples/rbac/gateway-clusterrole.yaml"),
        )
        .await?;
    server
        .bind(None, "gateway", &role, Subject::User(User::Gateway))
        .await?;
    let invoker = server
        .apply_role_yaml(
            Some("default"),
            include_bytes!("../../../examples/rbac/run-invoker-role.yaml"),
        )
        .await?;
    server
        .bind(
            Some("default"),
            "alice",
            &invoker,
            Subject::User(User::Alice),
        )
        .await?;
    server.create_service_account("default", "bench").await?;
    server
        .bind(
            Some("default"),
            "bench",
            &invoker,
            Subject::ServiceAccount("default".into(), "bench".into()),
        )
        .await?;
    let mut tokens = Vec::new();
    for _ in 0..TOKENS {
        tokens.push(
            server
                .service_account_token("default", "bench", 3600)
                .await?,
        );
    }
    Ok(tokens)
}

/// `kube-auth-10-tokens`: `n` sequential requests round robin over
/// `targets`, with the TokenReviews and SubjectAccessReviews they caused.
async fn ten_tokens(
    ctx: &mut Ctx,
    server: &ApiServer,
    targets: &[HttpTarget],
    n: u64,
) -> anyhow::Result<()> {
    let reviews = || async {
        anyhow::Ok((
            server.request_count("tokenreviews", "POST").await?,
            server.request_count("subjectaccessreviews", "POST").await?,
        ))
    };
    let (tr0, sar0) = reviews().await?;
    let (rec, el) = round_robin(targets, n, ctx.tick()).await;
    ctx.put("kube-auth-10-tokens", &rec, el);
    let (tr1, sar1) = reviews().await?;
    // Absolute counts: with 10 tokens the cost is per token and TTL, not
    // per request (the full run sends 10,000 requests).
    ctx.figure("kube_requests_10_tokens", json!(n));
    ctx.figure("kube_tokenreviews_10_tokens", json!(tr1 - tr0));
    ctx.figure("kube_subjectaccessreviews_10_tokens", json!(sar1 - sar0));
    ctx.figure(
        "kube_10_tokens_duration_s",
        json!((el.as_secs_f64() * 10.0).round() / 10.0),
    );
    Ok(())
}
