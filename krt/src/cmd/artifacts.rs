//! `krt artifacts list|get RUN [NAME]`: a Run's artifacts, read through the
//! gateway (`GET …/runs/{uid}/artifacts[/{name}]`, authorized on
//! `runs/artifacts`): no store credentials on the caller's side.

use std::io::Write as _;
use std::path::PathBuf;

use anyhow::Context as _;
use futures::StreamExt as _;
use kruntimes_api::ArtifactRef;
use kruntimes_client::{self as client, RunInfo, Target, gateway};

/// `krt artifacts …`.
#[derive(Debug, clap::Subcommand)]
pub enum ArtifactsCommand {
    /// The artifacts a Run left (name, size, SHA-256).
    List {
        /// Run name.
        run: String,
        /// Output format.
        #[arg(short, long, value_enum, default_value = "table")]
        output: super::Output,
    },
    /// Download one artifact (to stdout, or `-o FILE`).
    Get {
        /// Run name.
        run: String,
        /// The artifact's name (`report.json`, `out/trace.bin`).
        name: String,
        /// Write it to this file instead of stdout (`-` for stdout).
        #[arg(short = 'o', long = "output-file")]
        output_file: Option<PathBuf>,
    },
}

/// The URL of a Run's artifacts on the gateway its endpoint names.
fn artifacts_url(run: &RunInfo) -> anyhow::Result<reqwest::Url> {
    let endpoint = client::endpoint(run)?;
    let mut url = reqwest::Url::parse(endpoint)
        .with_context(|| format!("the endpoint of {} is not a URL", run.key()))?;
    url.set_path(&kruntimes_api::run::artifacts_path(
        &run.namespace,
        &run.runtime,
        &run.uid,
    ));
    url.set_query(None);
    Ok(url)
}

/// Runs one `krt artifacts` command.
pub async fn run(t: &Target, namespace: &str, cmd: ArtifactsCommand) -> anyhow::Result<()> {
    match cmd {
        ArtifactsCommand::List { run, output } => list(t, namespace, &run, output).await,
        ArtifactsCommand::Get {
            run,
            name,
            output_file,
        } => get(t, namespace, &run, &name, output_file).await,
    }
}

async fn list(
    t: &Target,
    namespace: &str,
    name: &str,
    output: super::Output,
) -> anyhow::Result<()> {
    let (run, _) = t.run(namespace, name).await?;
    let url = artifacts_url(&run)?;
    let gw = t.gateway(&run).await?;
    let resp = gw
        .http()
        .get(url)
        .send()
        .await
        .context("list the artifacts")?;
    let resp = gateway::check(resp).await?;
    #[derive(serde::Deserialize)]
    struct Listed {
        artifacts: Vec<ArtifactRef>,
    }
    let listed: Listed = resp.json().await.context("read the artifact list")?;
    match output {
        super::Output::Json => {
            println!("{}", serde_json::to_string_pretty(&listed.artifacts)?);
        }
        super::Output::Yaml => print!("{}", serde_yaml::to_string(&listed.artifacts)?),
        super::Output::Table => {
            let width = listed
                .artifacts
                .iter()
                .map(|a| a.name.len())
                .max()
                .unwrap_or(0)
                .max(4);
            println!("{:width$}  {:>12}  SHA256", "NAME", "SIZE");
            for a in &listed.artifacts {
                println!("{:width$}  {:>12}  {}", a.name, a.size, a.sha256);
            }
        }
    }
    Ok(())
}

async fn get(
    t: &Target,
    namespace: &str,
    name: &str,
    artifact: &str,
    output_file: Option<PathBuf>,
) -> anyhow::Result<()> {
    if let Some(why) = kruntimes_proto::api::artifact_name(artifact) {
        anyhow::bail!("{artifact:?} cannot be an artifact name: {why}");
    }
    let (run, _) = t.run(namespace, name).await?;
    let mut url = artifacts_url(&run)?;
    url.set_path(&format!("{}/{artifact}", url.path()));
    let gw = t.gateway(&run).await?;
    let resp = gw
        .http()
        .get(url)
        .send()
        .await
        .context("download the artifact")?;
    let resp = gateway::check(resp).await?;
    let to_file = output_file.filter(|p| p.as_os_str() != "-");
    // Into a temporary file beside the target, renamed once whole: an
    // interrupted download never leaves a partial file under its name.
    let (mut out, tmp): (Box<dyn std::io::Write>, Option<tempfile::NamedTempFile>) = match &to_file
    {
        Some(path) => {
            let dir = path
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(std::path::Path::new("."));
            let tmp = tempfile::NamedTempFile::new_in(dir)
                .with_context(|| format!("create a file in {}", dir.display()))?;
            (Box::new(tmp.reopen()?), Some(tmp))
        }
        None => (Box::new(std::io::stdout().lock()), None),
    };
    let mut body = resp.bytes_stream();
    while let Some(chunk) = body.next().await {
        let chunk = chunk.context("read the artifact")?;
        out.write_all(&chunk)?;
    }
    out.flush()?;
    drop(out);
    if let (Some(tmp), Some(path)) = (tmp, to_file) {
        tmp.persist(&path)
            .with_context(|| format!("write {}", path.display()))?;
    }
    Ok(())
}
