//! `krt runtime list|get`: the Runtime pools, their replicas (desired and
//! ready), the capacity their Runs hold and the resources left free.

use anyhow::Context as _;

use super::{Output, print_doc};
use kruntimes_client::{RuntimeInfo, Target};

fn header() {
    println!(
        "{:<16} {:<18} {:>7} {:>5} {:>8} {:>6}  {:<24} IMAGE",
        "NAME", "NAMESPACE", "DESIRED", "READY", "CAPACITY", "IN-USE", "FREE"
    );
}

fn row(r: &RuntimeInfo) {
    let free: Vec<String> = r.free.iter().map(|(k, v)| format!("{k}={v}")).collect();
    println!(
        "{:<16} {:<18} {:>7} {:>5} {:>8} {:>6}  {:<24} {}",
        r.name,
        r.namespace,
        r.desired_replicas,
        r.ready_replicas,
        r.capacity_per_pod * r.ready_replicas.max(0) as u64,
        r.runs_in_use,
        if free.is_empty() {
            "-".to_owned()
        } else {
            free.join(",")
        },
        if r.image.is_empty() { "-" } else { &r.image }
    );
}

/// `krt runtime list`.
pub async fn list(t: &Target, output: Output) -> anyhow::Result<()> {
    let rts = t.runtimes().await?;
    if output != Output::Table {
        return print_doc(&rts, output);
    }
    header();
    rts.iter().for_each(row);
    Ok(())
}

/// `krt runtime get NAME`.
pub async fn get(
    t: &Target,
    namespace: Option<&str>,
    name: &str,
    output: Output,
) -> anyhow::Result<()> {
    let rt = t
        .runtimes()
        .await?
        .into_iter()
        .find(|r| {
            r.name == name && namespace.is_none_or(|ns| r.namespace == ns || r.namespace == "-")
        })
        .with_context(|| format!("runtime {name} not found"))?;
    if output != Output::Table {
        return print_doc(&rt, output);
    }
    header();
    row(&rt);
    Ok(())
}
