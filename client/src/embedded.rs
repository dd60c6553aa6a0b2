//! The embedded stack as a target: `STATE_DIR/client.json` (gateway, CA,
//! token), `STATE_DIR/runs.json` (every Run's status and the runtimed
//! instances), and the watched directory of Run manifests, where `krt apply`
//! and `krt session create` write files of their own (`apply-NS-NAME.yaml`,
//! `session-NS-NAME.yaml`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use kruntimes_api::TerminationMode;
use serde::{Deserialize, Serialize};

use crate::{Error, Gateway, Result, RunInfo, RuntimeInfo, Selector};

/// `STATE_DIR/client.json`: how clients reach the gateway.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClientConfig {
    /// Gateway base URL.
    pub gateway: String,
    /// CA bundle of the gateway's certificate.
    pub ca_file: PathBuf,
    /// Bearer token.
    pub token: String,
    /// Internal CA (for direct-to-runtimed diagnostics and benchmarks).
    #[serde(default)]
    pub internal_ca_file: Option<PathBuf>,
    /// Control plane ownership watch address.
    #[serde(default)]
    pub control_plane: Option<String>,
    /// The watched directory clients write Run manifests into (`krt
    /// apply`, `krt session create`, the SDKs): `STATE_DIR/runs`.
    #[serde(default)]
    pub runs_dir: Option<PathBuf>,
    /// The user's own watched directory of manifests (`krt up --runs`),
    /// when it is another: krt never writes there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manifests_dir: Option<PathBuf>,
}

/// How long `krt apply` waits for a Run whose manifest came back while
/// `krt up` still served it to be replaced, before it says the Run was kept.
const KEPT_WAIT: Duration = Duration::from_secs(3);

/// What `krt apply` did to one Run's manifest on `krt up`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// What changed.
    pub change: Change,
    /// The UID of the Run `krt up` served before the write, if any.
    pub old_uid: Option<String>,
}

/// How an applied manifest changes its Run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// A new Run.
    Created,
    /// Fields a Run may change in place (priority, labels, timeout, …).
    InPlace,
    /// Fields a Run keeps for life: `krt up` deletes it and creates another.
    Replaced,
}

/// One Run of `STATE_DIR/runs.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunRow {
    /// Name.
    pub name: String,
    /// Namespace.
    pub namespace: String,
    /// Runtime.
    pub runtime: String,
    /// UID.
    pub uid: String,
    /// Mode.
    pub mode: String,
    /// Phase.
    pub phase: String,
    /// Reason.
    #[serde(default)]
    pub reason: String,
    /// Message.
    #[serde(default)]
    pub message: String,
    /// Owner.
    #[serde(default)]
    pub assigned_pod: Option<String>,
    /// Attempt.
    #[serde(default)]
    pub attempt: u64,
    /// Endpoint URL.
    #[serde(default)]
    pub endpoint: Option<String>,
    /// How its task ended (task Runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<kruntimes_api::TaskStatus>,
    /// What it left in its artifacts directory (task Runs of a Runtime
    /// with an artifact store, at most 100).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub artifacts: Vec<kruntimes_api::ArtifactRef>,
}

impl From<RunRow> for RunInfo {
    fn from(r: RunRow) -> Self {
        Self {
            name: r.name,
            namespace: r.namespace,
            runtime: r.runtime,
            uid: r.uid,
            mode: r.mode,
            phase: r.phase,
            reason: r.reason,
            message: r.message,
            assigned_pod: r.assigned_pod,
            attempt: r.attempt,
            endpoint: r.endpoint,
            task: r.task,
            artifacts: r.artifacts,
        }
    }
}

/// One runtimed instance of `STATE_DIR/runs.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodRow {
    /// Instance name.
    pub name: String,
    /// Runs it may own.
    pub capacity: u32,
    /// Runs holding capacity on it.
    #[serde(default)]
    pub used: u32,
    /// Its ownership watch is connected.
    #[serde(default)]
    pub connected: bool,
    /// Chosen to stop (idle beyond the pool's size): takes no new Run.
    #[serde(default)]
    pub retiring: bool,
    /// What its resources still offer, in thousandths.
    #[serde(default)]
    pub free_milli: std::collections::BTreeMap<String, u64>,
}

/// The pool of runtimed instances, when it follows demand.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolRow {
    /// Instances it should have now (starting ones included).
    pub desired: u32,
    /// Never fewer (`--runtimed`).
    pub min_instances: u32,
    /// Free instances kept (`--min-idle`).
    pub min_idle: u32,
    /// Never more (`--max-runtimed`).
    pub max_instances: u32,
}

/// `STATE_DIR/runs.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunsFile {
    /// Runs.
    pub runs: Vec<RunRow>,
    /// The runtimed instances.
    #[serde(default)]
    pub pods: Vec<PodRow>,
    /// Their pool, when it follows demand (else they are a fixed set).
    #[serde(default)]
    pub pool: Option<PoolRow>,
    /// Skipped manifests.
    #[serde(default)]
    pub errors: Vec<serde_json::Value>,
}

/// What the connected instances' resources still offer, summed.
fn free_of(pods: &[PodRow]) -> std::collections::BTreeMap<String, String> {
    let mut free = std::collections::BTreeMap::<String, u64>::new();
    for p in pods.iter().filter(|p| p.connected && !p.retiring) {
        for (name, left) in &p.free_milli {
            let sum = free.entry(name.clone()).or_default();
            *sum = sum.saturating_add(*left);
        }
    }
    free.into_iter()
        .map(|(name, milli)| {
            let shown = kruntimes_api::quantity::display(&name, milli);
            (name, shown)
        })
        .collect()
}

/// The embedded stack of one state directory.
#[derive(Debug)]
pub struct Embedded {
    dir: PathBuf,
    client: ClientConfig,
    token: Option<String>,
}

fn read_state<T: serde::de::DeserializeOwned>(dir: &Path, name: &str) -> Result<T> {
    let path = dir.join(name);
    let text = std::fs::read(&path).map_err(|source| Error::NoStack {
        path: path.clone(),
        source,
    })?;
    serde_json::from_slice(&text).map_err(|e| Error::file("parse", &path, e))
}

/// JSON is YAML: a manifest the store reads, written whole (write, then
/// rename) so it never sees half a file.
/// `doc` as a Run that `krt up` would run, or why it would not: the
/// embedded store's own reading and validation, before anything is
/// written.
fn checked_run(doc: &serde_json::Value, ns: &str, name: &str) -> Result<kruntimes_api::Run> {
    let run: kruntimes_api::Run = serde_json::from_value(doc.clone())
        .map_err(|e| Error::Invalid(format!("run {ns}/{name}: {e}")))?;
    run.validate()
        .map_err(|e| Error::Invalid(format!("run {ns}/{name}: {e}")))?;
    Ok(run)
}

fn write_manifest(path: &Path, doc: &serde_json::Value) -> Result<()> {
    let tmp = path.with_extension("tmp");
    let text = serde_json::to_vec_pretty(doc).map_err(|e| Error::Invalid(e.to_string()))?;
    std::fs::write(&tmp, text).map_err(|e| Error::file("write", &tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| Error::file("write", path, e))
}

impl Embedded {
    /// The stack of `sel.state_dir`, if one runs (its state files say
    /// nothing true once it stopped).
    pub fn open(sel: &Selector) -> Result<Self> {
        if crate::stack_lock::running(&sel.state_dir).is_none() {
            return Err(Error::NotRunning {
                dir: sel.state_dir.clone(),
            });
        }
        let client: ClientConfig = read_state(&sel.state_dir, "client.json")?;
        Ok(Self {
            dir: sel.state_dir.clone(),
            client,
            token: sel.token.clone(),
        })
    }

    /// Where `krt up` writes each child process's log.
    pub fn log_dir(&self) -> PathBuf {
        self.dir.join("logs")
    }

    /// The per-Run logs (handler output) of instance `pod`'s Runtime Server.
    pub fn run_log_dir(&self, pod: &str) -> PathBuf {
        self.dir.join("work").join(pod).join(".logs")
    }

    /// `client.json`.
    pub fn client(&self) -> &ClientConfig {
        &self.client
    }

    fn status(&self) -> Result<RunsFile> {
        read_state(&self.dir, "runs.json")
    }

    /// Every Run (of `namespace`, or all).
    pub fn runs(&self, namespace: Option<&str>) -> Result<Vec<RunInfo>> {
        Ok(self
            .status()?
            .runs
            .into_iter()
            .filter(|r| namespace.is_none_or(|ns| r.namespace == ns))
            .map(RunInfo::from)
            .collect())
    }

    /// The manifests of the runs directory the store could not read.
    pub fn skipped(&self) -> Result<Vec<(String, String)>> {
        Ok(self
            .status()?
            .errors
            .iter()
            .map(|e| {
                let s = |k: &str| e[k].as_str().unwrap_or_default().to_owned();
                (s("file"), s("message"))
            })
            .collect())
    }

    /// One Run and its row.
    pub fn run(&self, namespace: &str, name: &str) -> Result<(RunInfo, serde_json::Value)> {
        let row = self
            .status()?
            .runs
            .into_iter()
            .find(|r| r.namespace == namespace && r.name == name)
            .ok_or_else(|| Error::NotFound {
                namespace: namespace.into(),
                name: name.into(),
            })?;
        let raw = serde_json::to_value(&row).map_err(|e| Error::Invalid(e.to_string()))?;
        Ok((row.into(), raw))
    }

    fn runs_dir(&self) -> Result<&Path> {
        self.client
            .runs_dir
            .as_deref()
            .ok_or_else(|| Error::Unsupported("client.json has no runsDir (restart krt up)".into()))
    }

    /// The file `krt apply` or `krt session create` wrote for a Run.
    fn own_file(&self, namespace: &str, name: &str) -> Result<Option<PathBuf>> {
        let dir = self.runs_dir()?;
        Ok(kruntimes_api::ManifestWriter::ALL
            .iter()
            .map(|w| dir.join(w.file_name(namespace, name)))
            .find(|p| p.exists()))
    }

    /// Writes a new session Run as `session-NS-NAME.yaml`, the file the
    /// SDKs create and close sandboxes by; refused if the Run exists.
    pub fn create_session(&self, doc: &serde_json::Value) -> Result<()> {
        let name = doc["metadata"]["name"].as_str().unwrap_or_default();
        let ns = doc["metadata"]["namespace"].as_str().unwrap_or("default");
        checked_run(doc, ns, name)?;
        if self.own_file(ns, name)?.is_some() || self.run(ns, name).is_ok() {
            return Err(Error::Invalid(format!("run {ns}/{name} already exists")));
        }
        let path = self
            .runs_dir()?
            .join(kruntimes_api::ManifestWriter::Session.file_name(ns, name));
        write_manifest(&path, doc)
    }

    /// Writes each Run into the store (`apply-NS-NAME.yaml`); what changed,
    /// for [`Self::settled`] to report once `krt up` has taken it in.
    pub fn apply(&self, docs: Vec<serde_json::Value>) -> Result<Vec<Applied>> {
        let dir = self.runs_dir()?.to_path_buf();
        // Every document is checked before any is written: a refused apply
        // changes nothing.
        let mut checked = Vec::new();
        for doc in docs {
            let kind = doc["kind"].as_str().unwrap_or_default();
            if kind != kruntimes_api::RUN_KIND {
                return Err(Error::Unsupported(format!(
                    "krt up serves Runs only ({kind:?} is a cluster object; its Runtime Pods are krt up's pool of runtimed instances: --runtimed, --min-idle, --max-runtimed, --capacity, --resources)"
                )));
            }
            let name = doc["metadata"]["name"]
                .as_str()
                .ok_or_else(|| Error::Invalid("a Run needs metadata.name".into()))?
                .to_owned();
            let ns = doc["metadata"]["namespace"]
                .as_str()
                .unwrap_or("default")
                .to_owned();
            let run = checked_run(&doc, &ns, &name)?;
            let path = match self.own_file(&ns, &name)? {
                Some(p) => p,
                None => dir.join(kruntimes_api::ManifestWriter::Apply.file_name(&ns, &name)),
            };
            checked.push((doc, run, ns, name, path));
        }
        // The Runs krt up serves now, read once: a new one must differ.
        let served = self.runs(None).unwrap_or_default();
        let mut out = Vec::new();
        for (doc, run, ns, name, path) in checked {
            let existed = path.exists();
            let before = std::fs::read(&path)
                .ok()
                .and_then(|t| serde_yaml::from_slice::<kruntimes_api::Run>(&t).ok());
            let old_uid = served
                .iter()
                .find(|r| r.namespace == ns && r.name == name)
                .map(|r| r.uid.clone());
            write_manifest(&path, &doc)?;
            let change = match before {
                None if !existed => Change::Created,
                Some(b) if !b.same_inputs(&run) => Change::Replaced,
                _ => Change::InPlace,
            };
            out.push(Applied {
                namespace: ns,
                name,
                change,
                old_uid,
            });
        }
        Ok(out)
    }

    /// Waits (up to `within`) until `krt up` serves each created or replaced
    /// Run under a new UID, then says what happened to each: the UIDs a
    /// `krt wait` or a call must use, never the old Run's.
    pub async fn settled(&self, applied: Vec<Applied>, within: Duration) -> Vec<String> {
        let deadline = tokio::time::Instant::now() + within;
        let mut out = Vec::new();
        for a in applied {
            let name = &a.name;
            if a.change == Change::InPlace {
                out.push(format!("run.kruntimes.io/{name} configured"));
                continue;
            }
            // A manifest written again while the old Run is still served
            // may leave it as it is (below): waited for briefly.
            let until = match (a.change, &a.old_uid) {
                (Change::Created, Some(_)) => deadline.min(tokio::time::Instant::now() + KEPT_WAIT),
                _ => deadline,
            };
            let new_uid = loop {
                match self.run(&a.namespace, name) {
                    Ok((r, _)) if Some(&r.uid) != a.old_uid.as_ref() => break Some(r.uid),
                    _ if tokio::time::Instant::now() >= until => break None,
                    _ => tokio::time::sleep(Duration::from_millis(50)).await,
                }
            };
            // A manifest removed and written again before krt up saw it go
            // leaves the Run it serves as it was.
            let kept = match (&new_uid, a.change, &a.old_uid) {
                (None, Change::Created, Some(old)) => Some(old),
                _ => None,
            };
            if let Some(old) = kept {
                out.push(format!(
                    "run.kruntimes.io/{name} configured: krt up kept the Run it serves (uid {old}): the manifest came back before it saw it go"
                ));
                continue;
            }
            let uid = new_uid.map_or_else(
                || format!("uid not yet known: krt up has not taken it in after {within:?}"),
                |u| format!("uid {u}"),
            );
            out.push(match (a.change, &a.old_uid) {
                (Change::Replaced, Some(old)) => format!(
                    "run.kruntimes.io/{name} configured: its runtime, source, mode, env, resources or affinity changed, which a Run keeps for life, so krt up replaced it — new {uid}; the old one ({old}) was deleted"
                ),
                (Change::Replaced, None) => format!("run.kruntimes.io/{name} configured ({uid})"),
                _ => format!("run.kruntimes.io/{name} created ({uid})"),
            });
        }
        out
    }

    /// Removes the file krt wrote for the Run.
    pub fn delete(&self, namespace: &str, name: &str) -> Result<()> {
        match self.own_file(namespace, name)? {
            Some(p) => std::fs::remove_file(&p).map_err(|e| Error::file("remove", &p, e)),
            None => {
                // No such Run: say so (as `krt get` does), not how it was made.
                self.run(namespace, name)?;
                let dir = match &self.client.manifests_dir {
                    Some(d) => d.as_path(),
                    None => self.runs_dir()?,
                };
                Err(Error::Unsupported(format!(
                    "run {namespace}/{name} was not created by krt apply or krt session create; remove it from its manifest in {}",
                    dir.display()
                )))
            }
        }
    }

    /// Sets `spec.termination` in the file krt wrote for the Run.
    pub fn terminate(&self, namespace: &str, name: &str, mode: TerminationMode) -> Result<()> {
        let path = self.own_file(namespace, name)?.ok_or_else(|| {
            Error::Unsupported(format!("run {namespace}/{name} was not created by krt apply or krt session create; set spec.termination in its manifest"))
        })?;
        let text = std::fs::read(&path).map_err(|e| Error::file("read", &path, e))?;
        let mut doc: serde_json::Value =
            serde_json::from_slice(&text).map_err(|e| Error::file("parse", &path, e))?;
        doc["spec"]["termination"] = serde_json::json!({ "mode": mode });
        write_manifest(&path, &doc)
    }

    /// The stack's gateway with `client.json`'s token (or `--token`).
    pub fn gateway(&self) -> Result<Gateway> {
        let ca = std::fs::read(&self.client.ca_file)
            .map_err(|e| Error::file("read", &self.client.ca_file, e))?;
        Gateway::new(
            Some(&ca),
            self.token.as_deref().unwrap_or(&self.client.token),
        )
    }

    /// The runtimed instances, as one pool.
    pub fn runtimes(&self) -> Result<Vec<RuntimeInfo>> {
        let status = self.status()?;
        Ok(vec![RuntimeInfo {
            name: "embedded".into(),
            namespace: "-".into(),
            desired_replicas: status
                .pool
                .as_ref()
                .map_or(status.pods.len() as i64, |p| i64::from(p.desired)),
            ready_replicas: status.pods.iter().filter(|p| p.connected).count() as i64,
            capacity_per_pod: status.pods.first().map_or(0, |p| u64::from(p.capacity)),
            runs_in_use: status.pods.iter().map(|p| u64::from(p.used)).sum(),
            free: free_of(&status.pods),
            image: String::new(),
        }])
    }
}
