//! `krt logs RUN [-f]`: the owner's log lines about one Run — from
//! `STATE_DIR/logs/<instance>.log` under `krt up`, from the owner Pod's
//! `runtimed` container through the API server on a cluster. runtimed
//! logs no payloads, so these lines are lifecycle and invocation records.

use std::io::{BufRead as _, Seek as _};
use std::time::Duration;

use anyhow::{Context as _, bail};
use futures::{AsyncBufReadExt as _, TryStreamExt as _};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt as _;
use kube::api::{Api, ListParams, LogParams};

use crate::target::{RunInfo, Target};

/// Prints the owner's lines that name the Run's UID; with `follow`, keeps
/// printing new ones.
pub async fn logs(t: &Target, namespace: &str, name: &str, follow: bool) -> anyhow::Result<()> {
    let (run, _) = t.run(namespace, name).await?;
    let Some(pod) = run.assigned_pod.clone() else {
        bail!("run {namespace}/{name} has no owner yet ({})", run.phase);
    };
    match t {
        Target::Embedded(e) => embedded(e.log_dir(), &pod, &run, follow).await,
        Target::Cluster(c) => cluster(c.client(), &pod, &run, follow).await,
    }
}

fn mentions(line: &str, run: &RunInfo) -> bool {
    line.contains(&run.uid)
}

async fn embedded(
    dir: std::path::PathBuf,
    pod: &str,
    run: &RunInfo,
    follow: bool,
) -> anyhow::Result<()> {
    let path = dir.join(format!("{pod}.log"));
    let file = std::fs::File::open(&path).with_context(|| format!("open {}", path.display()))?;
    let mut reader = std::io::BufReader::new(file);
    let mut line = String::new();
    loop {
        line.clear();
        let n = reader.read_line(&mut line)?;
        if n == 0 {
            if !follow {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
            // A line being written shows up once complete.
            let pos = reader.stream_position()?;
            reader.seek(std::io::SeekFrom::Start(pos))?;
            continue;
        }
        if mentions(&line, run) {
            print!("{line}");
        }
    }
}

async fn cluster(
    client: &kube::Client,
    pod: &str,
    run: &RunInfo,
    follow: bool,
) -> anyhow::Result<()> {
    // The owner Pod lives in its Runtime's namespace; find it by name.
    let found = Api::<Pod>::all(client.clone())
        .list(&ListParams::default().labels(kruntimes_api::RUNTIME_LABEL))
        .await?
        .items
        .into_iter()
        .find(|p| p.name_any() == pod)
        .with_context(|| format!("owner Pod {pod} not found"))?;
    let api = Api::<Pod>::namespaced(client.clone(), &found.namespace().unwrap_or_default());
    let params = LogParams {
        container: Some("runtimed".into()),
        follow,
        ..Default::default()
    };
    let mut lines = api.log_stream(pod, &params).await?.lines();
    while let Some(line) = lines.try_next().await? {
        if mentions(&line, run) {
            println!("{line}");
        }
    }
    Ok(())
}
