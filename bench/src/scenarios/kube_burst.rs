//! A burst of Runs bound on a real kube-apiserver: the operator (with
//! leader election, as the chart runs it) binds 1,000 function Runs (100
//! with `--quick`) onto 10 Runtime Pods with a slot for each. The Pods are API objects whose runtimed never
//! runs, so only binding is measured: binds per second from the first
//! create, API writes per bound Run (from the operator's own metrics), and
//! over-commitment (a Pod holding more than its slots), which must be 0.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use kruntimes_api::Run;
use kruntimes_kubetest::ApiServer;
use kruntimes_kubetest::cluster::Cluster;
use kube::api::{Api, PostParams};
use serde_json::json;

use super::context::Ctx;
use super::local::Local;

/// Pods, and slots per Pod (as many slots as Runs in the burst).
const PODS: usize = 10;
/// Creates in flight at once.
const CONCURRENCY: usize = 16;

/// Sets the `burst_*` figures, or skips `burst` with the reason.
pub(super) async fn run(ctx: &mut Ctx, local: &Local, runs: usize) {
    ctx.bar.set_message("kubernetes burst");
    match measure(local, runs).await {
        Ok(figures) => {
            for (k, v) in figures {
                ctx.figure(&k, v);
            }
        }
        Err(e) => ctx.skip("burst", format!("{e:#}")),
    }
}

async fn measure(local: &Local, runs: usize) -> anyhow::Result<Vec<(String, serde_json::Value)>> {
    let slots = u32::try_from(runs.div_ceil(PODS)).unwrap_or(u32::MAX);
    let server = ApiServer::start().await?;
    let cluster = Cluster::start(&local.krt, &server).await?;
    cluster.create_runtime("python", PODS as i32, slots).await?;
    for i in 0..PODS {
        cluster
            .add_idle_pod(&format!("python-{i}"), "python")
            .await?;
    }
    server.create_namespace("a").await?;
    let api: Api<Run> = Api::namespaced(server.client().await?, "a");
    let before = writes(&cluster).await?;
    let started = Instant::now();
    let mut pending = futures::stream::iter((0..runs).map(|i| {
        let api = api.clone();
        async move {
            let run: Run = serde_json::from_value(json!({
                "apiVersion": "kruntimes.io/v1alpha1",
                "kind": "Run",
                "metadata": {"name": format!("burst-{i:04}"), "namespace": "a"},
                "spec": {"runtime": "python", "mode": {"function": {"handler": "main.invoke"}},
                         "source": {"inlinePath": "main.py", "inline": "def invoke(r):\n    return r\n"}},
            }))?;
            api.create(&PostParams::default(), &run).await?;
            anyhow::Ok(())
        }
    }))
    .buffer_unordered(CONCURRENCY);
    use futures::StreamExt as _;
    while let Some(r) = pending.next().await {
        r?;
    }
    let created = started.elapsed();
    let deadline = Instant::now() + Duration::from_secs(300);
    let (bound, per_pod) = loop {
        let listed = api.list(&Default::default()).await?.items;
        let mut per_pod: BTreeMap<String, u32> = BTreeMap::new();
        for r in &listed {
            if let Some(uid) = r.status.as_ref().and_then(|s| s.assigned_pod_uid.clone()) {
                *per_pod.entry(uid).or_default() += 1;
            }
        }
        let bound: u32 = per_pod.values().sum();
        if bound as usize >= runs {
            break (started.elapsed(), per_pod);
        }
        if Instant::now() > deadline {
            bail!("{bound} of {runs} Runs bound within 300 s");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // Settle: nothing more should be written for these binds.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = writes(&cluster).await?;
    let over: u32 = per_pod.values().map(|n| n.saturating_sub(slots)).sum();
    let per_run = |k: &str| {
        (after.get(k).copied().unwrap_or(0) - before.get(k).copied().unwrap_or(0)) as f64
            / runs as f64
    };
    Ok(vec![
        ("burst_runs".into(), json!(runs)),
        ("burst_create_seconds".into(), json!(created.as_secs_f64())),
        ("burst_bound_seconds".into(), json!(bound.as_secs_f64())),
        (
            "burst_binds_per_sec".into(),
            json!(runs as f64 / bound.as_secs_f64()),
        ),
        ("burst_over_committed".into(), json!(over)),
        (
            "burst_status_writes_per_run".into(),
            json!(per_run("status/ok")),
        ),
        (
            "burst_conflicts_per_run".into(),
            json!(per_run("status/conflict")),
        ),
        (
            "burst_finalizer_writes_per_run".into(),
            json!(per_run("finalizer/ok")),
        ),
    ])
}

/// The operator's writes so far, by `kind/result`.
async fn writes(cluster: &Cluster) -> anyhow::Result<BTreeMap<String, u64>> {
    let text = reqwest::get(&cluster.operator_metrics)
        .await?
        .text()
        .await
        .context("operator metrics")?;
    let mut out = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| l.starts_with("kruntimes_operator_writes_total{"))
    {
        let kind = field(line, "kind").unwrap_or_default();
        let result = field(line, "result").unwrap_or_default();
        let n: u64 = line
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0) as u64;
        out.insert(format!("{kind}/{result}"), n);
    }
    Ok(out)
}

fn field<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    let start = line.find(&format!("{name}=\""))? + name.len() + 2;
    let end = line[start..].find('"')? + start;
    Some(&line[start..end])
}

#[cfg(test)]
mod tests {
    #[test]
    fn metric_labels_are_read_by_name() {
        let line = r#"kruntimes_operator_writes_total{kind="status",result="ok"} 12"#;
        assert_eq!(super::field(line, "kind"), Some("status"));
        assert_eq!(super::field(line, "result"), Some("ok"));
        assert_eq!(super::field(line, "phase"), None);
    }
}
