//! `krt runs`, `krt get run`, `krt apply`, `krt delete run`, `krt wait run`.

use std::path::Path;
use std::time::Duration;

use kruntimes_api::Phase;

use super::{Output, print_doc, read_input, yaml_documents};
use kruntimes_client::{RunInfo, Target};

/// `krt runs`.
pub async fn list(t: &Target, namespace: Option<&str>, output: Output) -> anyhow::Result<()> {
    let runs = t.runs(namespace).await?;
    // Manifests krt up could not read are no Run, but the user wrote them:
    // named on stderr, whatever the output format.
    for (file, why) in t.skipped()? {
        eprintln!("error: {file}: {why} (skipped: krt up runs nothing from it)");
    }
    if output != Output::Table {
        return print_doc(&runs, output);
    }
    println!(
        "{:<20} {:<12} {:<8} {:<36} {:<9} {:<10} {:<14} {:<3} {:<4} ENDPOINT",
        "NAME", "NAMESPACE", "RUNTIME", "UID", "MODE", "PHASE", "OWNER", "ATT", "EXIT"
    );
    for r in &runs {
        print_row(r);
    }
    Ok(())
}

fn print_row(r: &RunInfo) {
    // A task's exit code, once its process ended.
    let exit = r
        .task
        .as_ref()
        .map_or_else(|| "-".to_owned(), |t| t.exit_code.to_string());
    println!(
        "{:<20} {:<12} {:<8} {:<36} {:<9} {:<10} {:<14} {:<3} {:<4} {}",
        r.name,
        r.namespace,
        r.runtime,
        r.uid,
        r.mode,
        r.phase,
        r.assigned_pod.as_deref().unwrap_or("-"),
        r.attempt,
        exit,
        r.endpoint.as_deref().unwrap_or("-")
    );
    if !r.message.is_empty() {
        println!("  {}: {}", r.reason, r.message);
    }
}

/// `krt get run NAME`: a table row, or the whole object.
pub async fn get(t: &Target, namespace: &str, name: &str, output: Output) -> anyhow::Result<()> {
    let (info, raw) = t.run(namespace, name).await?;
    match output {
        Output::Table => {
            print_row(&info);
            Ok(())
        }
        _ => print_doc(&raw, output),
    }
}

/// `krt apply -f FILE`.
pub async fn apply(t: &Target, file: &Path, namespace: Option<&str>) -> anyhow::Result<()> {
    let text = String::from_utf8(read_input(file)?)?;
    let mut docs = yaml_documents(&text)?;
    if let Some(ns) = namespace {
        for d in &mut docs {
            if d["metadata"]["namespace"].is_null() {
                d["metadata"]["namespace"] = ns.into();
            }
        }
    }
    // What a Run sets that has no effect is said before it is written, on
    // either target (a Runtime or an unparsable document is the target's
    // to refuse).
    for doc in &docs {
        if let Ok(run) = serde_json::from_value::<kruntimes_api::Run>(doc.clone()) {
            for w in run.warnings() {
                eprintln!("Warning: run {}: {w}", run.key());
            }
        }
    }
    for line in t.apply(docs).await? {
        println!("{line}");
    }
    Ok(())
}

/// `krt delete run NAME [--wait D]`: waits (as `kubectl delete` does) until
/// the Run is gone, so a `krt apply` of the same name next makes a new Run.
pub async fn delete(t: &Target, namespace: &str, name: &str, wait: Duration) -> anyhow::Result<()> {
    delete_quietly(t, namespace, name, wait).await?;
    println!("run.kruntimes.io/{name} deleted");
    Ok(())
}

/// Deletes the Run and waits (up to `wait`; zero: not at all) until it is
/// gone, printing nothing.
pub async fn delete_quietly(
    t: &Target,
    namespace: &str,
    name: &str,
    wait: Duration,
) -> anyhow::Result<()> {
    t.delete(namespace, name).await?;
    if let Some(timeout) = Some(wait).filter(|w| !w.is_zero()) {
        let deadline = std::time::Instant::now() + timeout;
        while t.run(namespace, name).await.is_ok() {
            if std::time::Instant::now() > deadline {
                anyhow::bail!("run {namespace}/{name} still exists after {timeout:?}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    Ok(())
}

/// `krt wait run NAME --for PHASE`.
pub async fn wait(
    t: &Target,
    namespace: &str,
    name: &str,
    phase: Phase,
    timeout: Duration,
) -> anyhow::Result<()> {
    let r = wait_showing(t, namespace, name, &[phase], timeout).await?;
    println!("run.kruntimes.io/{} {}", r.name, r.phase);
    Ok(())
}

/// How long a wait stays silent: a quick one prints nothing.
const QUIET: Duration = Duration::from_secs(1);

/// [`Target::wait`], showing on stderr where the Run stands once it takes
/// longer than [`QUIET`] (a spinner line on a terminal, a line per change
/// otherwise).
pub async fn wait_showing(
    t: &Target,
    namespace: &str,
    name: &str,
    phases: &[Phase],
    timeout: Duration,
) -> kruntimes_client::Result<RunInfo> {
    let started = std::time::Instant::now();
    let mut progress = crate::progress::Progress::new();
    // The line is cleared when `progress` is dropped, however the wait ends.
    t.wait_seeing(namespace, name, phases, timeout, |r| {
        if started.elapsed() >= QUIET {
            progress.show(format!(
                "waiting for run {namespace}/{name}: {}",
                kruntimes_client::last_seen(r)
            ));
        }
    })
    .await
}
