//! The decision cache of the embedded gateway: cache hits (one token),
//! misses (a fresh token per request), and the same invoke through a second
//! gateway with authentication disabled.

use std::time::{SystemTime, UNIX_EPOCH};

use super::BODY;
use super::context::Ctx;
use super::extra_gateway::{self, GatewayAuth};
use super::local::Local;
use super::support::{round_robin, wait_routed};
use crate::Sizes;
use crate::paths::{self, Pki};

/// Records `auth-hit`, `auth-miss` and `auth-disabled` (or skips the last).
pub(super) async fn run(ctx: &mut Ctx, local: &Local, sizes: &Sizes) -> anyhow::Result<()> {
    ctx.bar.set_message("auth");
    let gateway = &local.gateway;
    ctx.sequential("auth-hit", sizes.warmup, sizes.requests, || gateway.call())
        .await;

    let targets: Vec<_> = mint_tokens(&local.pki, sizes.auth_misses)?
        .iter()
        .map(|t| gateway.with_token(t))
        .collect();
    let (rec, el) = round_robin(&targets, targets.len() as u64, ctx.tick()).await;
    ctx.put("auth-miss", &rec, el);

    disabled(ctx, local, sizes).await
}

/// `auth-disabled`: a gateway with `--auth none` on the same table; skipped
/// when it does not start or never routes.
async fn disabled(ctx: &mut Ctx, local: &Local, sizes: &Sizes) -> anyhow::Result<()> {
    let started = extra_gateway::start(
        &local.krt,
        &local.pki,
        &local.control_plane,
        GatewayAuth::None,
        &local.tmp.path().join("gateway-noauth.log"),
        local.gateway_threads,
    );
    let g = match started {
        Ok(g) => g,
        Err(e) => {
            ctx.skip("auth-disabled", e.to_string());
            return Ok(());
        }
    };
    let t = paths::via_proxy(&local.pki, &g.url, &local.py, None, BODY)?;
    if wait_routed(&t).await.is_err() {
        ctx.skip("auth-disabled", "gateway without auth never routed");
        return Ok(());
    }
    ctx.sequential("auth-disabled", sizes.warmup, sizes.requests, || t.call())
        .await;
    Ok(())
}

#[derive(serde::Serialize)]
struct Claims<'a> {
    sub: String,
    groups: [&'a str; 1],
    iss: &'a str,
    aud: &'a str,
    exp: u64,
    nbf: u64,
    iat: u64,
}

/// Mints `n` distinct admin tokens with the stack's signing key.
fn mint_tokens(pki: &Pki, n: u64) -> anyhow::Result<Vec<String>> {
    let key =
        jsonwebtoken::EncodingKey::from_ec_pem(&std::fs::read(pki.file("token-signing.key"))?)?;
    let now = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs();
    let header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::ES256);
    (0..n)
        .map(|i| {
            let c = Claims {
                sub: format!("bench-{i}"),
                groups: ["kruntimes:admins"],
                iss: "kruntimes-embedded",
                aud: "kruntimes-gateway",
                exp: now + 3600,
                nbf: now - 60,
                iat: now,
            };
            Ok(jsonwebtoken::encode(&header, &c, &key)?)
        })
        .collect()
}
