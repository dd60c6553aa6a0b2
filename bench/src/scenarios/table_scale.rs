//! Ownership table memory: a second gateway watches a synthetic control
//! plane that publishes many Runs, and its RSS growth per Run is measured.

use std::time::Duration;

use anyhow::Context as _;
use kruntimes_proto::ownership::v1 as own;
use kruntimes_proto::watch::Publisher;
use serde_json::json;
use tonic::transport::{Certificate, Identity, Server, ServerTlsConfig};

use super::context::Ctx;
use super::extra_gateway::{self, GatewayAuth};
use super::local::Local;
use super::procfs::proc_usage;
use super::support::{https_client, wait_until};
use crate::Sizes;

/// RSS of the gateway before and after it holds the table.
struct TableMemory {
    bytes_per_run: u64,
    rss_empty_mb: f64,
    rss_full_mb: f64,
}

/// Sets the `table_*` figures, or skips `table` with the reason.
pub(super) async fn run(ctx: &mut Ctx, local: &Local, sizes: &Sizes) {
    ctx.bar.set_message("table");
    match measure(local, sizes.table_entries).await {
        Ok(m) => {
            ctx.figure("table_bytes_per_run", json!(m.bytes_per_run));
            ctx.figure("table_entries", json!(sizes.table_entries));
            ctx.figure("table_gateway_rss_empty_mb", json!(m.rss_empty_mb));
            ctx.figure("table_gateway_rss_full_mb", json!(m.rss_full_mb));
        }
        Err(e) => ctx.skip("table", e.to_string()),
    }
}

/// Memory of a gateway holding `n` synthetic Runs.
async fn measure(local: &Local, n: u64) -> anyhow::Result<TableMemory> {
    let pki = &local.pki;
    let publisher = Publisher::new(own::SourceKind::ControlPlane, "synthetic", 1 << 20);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let tls = ServerTlsConfig::new()
        .identity(Identity::from_pem(
            std::fs::read(pki.file("control-plane.crt"))?,
            std::fs::read(pki.file("control-plane.key"))?,
        ))
        .client_ca_root(Certificate::from_pem(std::fs::read(
            pki.file("internal-ca.crt"),
        )?));
    let server = Server::builder()
        .tls_config(tls)?
        .add_service(publisher.service());
    let serve = tokio::spawn(server.serve_with_incoming(incoming(listener)));
    let g = extra_gateway::start(
        &local.krt,
        pki,
        &addr.to_string(),
        GatewayAuth::None,
        &local.tmp.path().join("gateway-table.log"),
        local.gateway_threads,
    )?;
    let client = https_client(&pki.file("public-ca.crt"))?;
    let ready = format!("{}/readyz", g.url);
    wait_until(Duration::from_secs(30), || async {
        client
            .get(&ready)
            .send()
            .await
            .is_ok_and(|r| r.status() == 200)
    })
    .await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss0 = proc_usage(g.pid()).context("read gateway memory")?.1;
    for i in 0..n {
        publisher.upsert(entry(i));
    }
    let metrics = g.metrics_url.clone();
    let want = format!("kruntimes_gateway_ownership_table_entries{{source=\"control-plane\"}} {n}");
    wait_until(Duration::from_secs(120), || async {
        match client.get(&metrics).send().await {
            Ok(r) => r.text().await.is_ok_and(|t| t.contains(&want)),
            Err(_) => false,
        }
    })
    .await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss1 = proc_usage(g.pid()).context("read gateway memory")?.1;
    serve.abort();
    Ok(TableMemory {
        bytes_per_run: rss1.saturating_sub(rss0) * 1024 / n.max(1),
        rss_empty_mb: rss0 as f64 / 1024.0,
        rss_full_mb: rss1 as f64 / 1024.0,
    })
}

/// Synthetic Run `i`: 50 namespaces, 100 owner Pods, all Ready.
fn entry(i: u64) -> own::OwnershipEntry {
    own::OwnershipEntry {
        namespace: format!("team-{}", i % 50),
        run_name: format!("run-{i}"),
        run_uid: uuid::Uuid::new_v4().to_string(),
        runtime: "python".into(),
        mode: own::Mode::Function as i32,
        owner: Some(own::Owner {
            pod_name: format!("runtime-python-{}", i % 100),
            pod_uid: format!("00000000-0000-4000-8000-{:012}", i % 100),
            dataplane_address: "127.0.0.1:9".into(),
        }),
        attempt: 1,
        phase: own::Phase::Ready as i32,
        limits: None,
        reason: String::new(),
        ..Default::default()
    }
}

/// The accepted connections of `l`, as tonic's incoming stream.
fn incoming(
    l: tokio::net::TcpListener,
) -> impl futures::Stream<Item = std::io::Result<tokio::net::TcpStream>> {
    futures::stream::unfold(l, |l| async move {
        let r = l.accept().await.map(|(s, _)| s);
        Some((r, l))
    })
}
