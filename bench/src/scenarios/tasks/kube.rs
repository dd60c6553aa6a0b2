//! The task's script on a Kubernetes cluster (the real node of
//! `bench/node.sh`) three ways, through its API server: a task Run on the
//! warm Runtime Pods, a Job, and a bare Pod per task with the Runtime's
//! own image (`Runtime` `python`'s `spec.image`, or `--task-image`).
//!
//! The client watches what it created and notes when each event reached
//! it: the API server's own timestamps are whole seconds, so on a cluster
//! a status counts as written when its watch event arrives, and seen at
//! the same moment (the observe part is 0). A Run is scheduled when it
//! has an owner; a Job or a Pod when its Pod has a node. A Run's script
//! time comes from its `status.task.stdoutTail`; a Pod's from its log,
//! read once the burst has ended. Writes are the API server's
//! `apiserver_request_total` before and after each burst, less what the
//! cluster writes at rest over the same time (measured first).

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use futures::StreamExt as _;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use kruntimes_api::{Run, Runtime};
use kube::api::{Api, DeleteParams, ListParams, LogParams, PostParams};
use kube::{Client, Resource, ResourceExt as _};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::timeline::{self, SCRIPT, Seen};
use super::watch::{Obs, apply, follow, job_obs, job_pod_obs, pod_obs, run_obs};
use super::writes::Writes;

/// The namespace every task is created in (made, and removed at the end).
pub const NAMESPACE: &str = "krt-bench-tasks";
/// The label that names an object's burst.
const BURST_LABEL: &str = "bench.kruntimes.io/burst";
/// Creates in flight at once.
const CREATES: usize = 16;
/// How long the cluster is watched at rest for its background writes.
const AT_REST: Duration = Duration::from_secs(10);

/// How a task is run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A task Run.
    Run,
    /// A Job.
    Job,
    /// A bare Pod.
    Pod,
}

impl Kind {
    /// The name the report gives it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Run => "run",
            Self::Job => "job",
            Self::Pod => "pod",
        }
    }

    /// The resources its own objects are: what its writes per task count.
    pub fn resources(self) -> &'static [&'static str] {
        match self {
            Self::Run => &["runs"],
            Self::Job => &["jobs", "pods"],
            Self::Pod => &["pods"],
        }
    }
}

/// A burst's outcome.
pub struct Burst {
    /// Every task's timeline.
    pub seen: Vec<Seen>,
    /// When the burst gave up on what had not ended (Unix seconds).
    pub gave_up: f64,
    /// API-server writes during the burst, less the background.
    pub writes: Writes,
}

/// The cluster and what a burst needs of it.
pub struct Cluster {
    client: Client,
    image: String,
    /// Writes per second by resource at rest.
    background: Writes,
}

impl Cluster {
    /// Connects with `kubeconfig`, finds the image, creates the namespace
    /// and measures the writes at rest.
    pub async fn connect(kubeconfig: &Path, image: Option<String>) -> anyhow::Result<Self> {
        let config = kube::Config::from_custom_kubeconfig(
            kube::config::Kubeconfig::read_from(kubeconfig)?,
            &Default::default(),
        )
        .await?;
        let client = Client::try_from(config)?;
        let image = match image {
            Some(i) => i,
            None => Api::<Runtime>::all(client.clone())
                .list(&ListParams::default())
                .await
                .context("list Runtimes")?
                .items
                .into_iter()
                .find(|r| r.name_any() == "python")
                .map(|r| r.spec.image)
                .context("no Runtime named python on the cluster (or pass --task-image)")?,
        };
        let namespaces: Api<Namespace> = Api::all(client.clone());
        let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": NAMESPACE}}))?;
        match namespaces.create(&PostParams::default(), &ns).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e).context("create the tasks' namespace"),
        }
        // A Pod needs its namespace's default ServiceAccount.
        let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), NAMESPACE);
        let deadline = Instant::now() + Duration::from_secs(60);
        while accounts.get_opt("default").await?.is_none() {
            if Instant::now() > deadline {
                bail!("namespace {NAMESPACE} has no default ServiceAccount after 60 s");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let before = Writes::read(&client).await?;
        tokio::time::sleep(AT_REST).await;
        let background = Writes::read(&client)
            .await?
            .rate(&before, AT_REST.as_secs_f64());
        Ok(Self {
            client,
            image,
            background,
        })
    }

    /// The baselines' image.
    pub fn image(&self) -> &str {
        &self.image
    }

    /// Writes per second at rest, every resource.
    pub fn background_writes_per_sec(&self) -> f64 {
        self.background.total()
    }

    /// Removes the namespace (and what is left in it).
    pub async fn remove(&self) -> anyhow::Result<()> {
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        match namespaces.delete(NAMESPACE, &DeleteParams::default()).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// `n` tasks of `kind` created at once (`CREATES` creates in flight)
    /// under burst label `id`, followed until each ended or `within`
    /// passed, then deleted.
    pub async fn burst(
        &self,
        kind: Kind,
        id: &str,
        n: usize,
        within: Duration,
    ) -> anyhow::Result<Burst> {
        let selector = format!("{BURST_LABEL}={id}");
        let (tx, mut rx) = mpsc::unbounded_channel();
        let mut watches = vec![match kind {
            Kind::Run => follow(self.api::<Run>(), &selector, run_obs, tx.clone()).await?,
            Kind::Job => follow(self.api::<Job>(), &selector, job_obs, tx.clone()).await?,
            Kind::Pod => follow(self.api::<Pod>(), &selector, pod_obs, tx.clone()).await?,
        }];
        if kind == Kind::Job {
            watches.push(follow(self.api::<Pod>(), &selector, job_pod_obs, tx.clone()).await?);
        }
        drop(tx);
        let before = Writes::read(&self.client).await?;
        let began = timeline::now();
        let names: Vec<String> = (0..n).map(|i| format!("{id}-{i:04}")).collect();
        let mut seen: HashMap<String, Seen> = HashMap::new();
        let mut pods: HashMap<String, String> = HashMap::new();
        let mut ended = 0;
        let mut creates = futures::stream::iter(names.iter().map(|name| {
            let obj = self.object(kind, name, id);
            async move {
                let created = timeline::now();
                self.create(kind, &obj)
                    .await
                    .map(|()| (name.clone(), created))
            }
        }))
        .buffer_unordered(CREATES);
        let deadline = Instant::now() + within;
        // Creates and events interleave: a task may end before the last
        // create returned.
        let mut early: Vec<(f64, Obs)> = Vec::new();
        let mut creating = true;
        while (creating || ended < n) && Instant::now() < deadline {
            let left = deadline.saturating_duration_since(Instant::now());
            tokio::select! {
                c = creates.next(), if creating => match c {
                    Some(r) => {
                        let (name, created) = r?;
                        seen.insert(name, Seen::created_at(created));
                        for (at, o) in std::mem::take(&mut early) {
                            if seen.contains_key(&o.task) {
                                ended += apply(&mut seen, &mut pods, at, o);
                            } else {
                                early.push((at, o));
                            }
                        }
                    }
                    None => creating = false,
                },
                e = rx.recv() => match e {
                    Some((at, o)) if seen.contains_key(&o.task) => ended += apply(&mut seen, &mut pods, at, o),
                    Some(e) => early.push(e),
                    None => bail!("the watches of burst {id} ended"),
                },
                _ = tokio::time::sleep(left) => {}
            }
        }
        let gave_up = timeline::now();
        drop(creates);
        for w in &watches {
            w.abort();
        }
        // Late writes of the burst (a Job's status, a finalizer) land.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let writes = Writes::read(&self.client).await?.since(
            &before,
            &self.background,
            timeline::now() - began,
        );
        if kind != Kind::Run {
            self.script_times(&mut seen, &pods).await;
        }
        self.delete(kind, &selector).await?;
        Ok(Burst {
            seen: seen.into_values().collect(),
            gave_up,
            writes,
        })
    }

    fn api<K>(&self) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        <K as Resource>::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), NAMESPACE)
    }

    /// The task `name` of `kind`, labelled with its burst.
    fn object(&self, kind: Kind, name: &str, id: &str) -> Value {
        let labels = json!({ BURST_LABEL: id });
        let pod = json!({
            "restartPolicy": "Never",
            "containers": [{
                "name": "task",
                "image": self.image,
                "imagePullPolicy": "IfNotPresent",
                "command": ["python3", "-c", SCRIPT],
            }],
        });
        let meta = json!({"name": name, "namespace": NAMESPACE, "labels": labels});
        match kind {
            Kind::Run => {
                let mut doc = super::embedded::task_doc(name);
                doc["metadata"] = meta;
                doc
            }
            Kind::Job => json!({
                "apiVersion": "batch/v1", "kind": "Job", "metadata": meta,
                "spec": {"backoffLimit": 0, "template": {"metadata": {"labels": labels}, "spec": pod}},
            }),
            Kind::Pod => json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": pod}),
        }
    }

    async fn create(&self, kind: Kind, obj: &Value) -> anyhow::Result<()> {
        let pp = PostParams::default();
        match kind {
            Kind::Run => {
                self.api::<Run>()
                    .create(&pp, &serde_json::from_value(obj.clone())?)
                    .await?;
            }
            Kind::Job => {
                self.api::<Job>()
                    .create(&pp, &serde_json::from_value(obj.clone())?)
                    .await?;
            }
            Kind::Pod => {
                self.api::<Pod>()
                    .create(&pp, &serde_json::from_value(obj.clone())?)
                    .await?;
            }
        }
        Ok(())
    }

    /// Each Pod's script time, from its log.
    async fn script_times(&self, seen: &mut HashMap<String, Seen>, pods: &HashMap<String, String>) {
        let api = self.api::<Pod>();
        let times: Vec<(String, Option<f64>)> =
            futures::stream::iter(pods.iter().map(|(task, pod)| {
                let api = api.clone();
                async move {
                    let log = api.logs(pod, &LogParams::default()).await.ok();
                    (
                        task.clone(),
                        log.as_deref().and_then(timeline::printed_time),
                    )
                }
            }))
            .buffer_unordered(8)
            .collect()
            .await;
        for (task, t) in times {
            if let Some(s) = seen.get_mut(&task) {
                s.user_code = t;
            }
        }
    }

    /// Deletes the burst's objects and waits until they and their Pods
    /// are gone.
    async fn delete(&self, kind: Kind, selector: &str) -> anyhow::Result<()> {
        let lp = ListParams::default().labels(selector);
        let dp = DeleteParams {
            propagation_policy: Some(kube::api::PropagationPolicy::Background),
            grace_period_seconds: Some(0),
            ..Default::default()
        };
        match kind {
            Kind::Run => {
                self.api::<Run>().delete_collection(&dp, &lp).await?;
            }
            Kind::Job => {
                self.api::<Job>().delete_collection(&dp, &lp).await?;
            }
            Kind::Pod => {}
        }
        // The Jobs' Pods carry the label too; the garbage collector
        // deletes them gracefully, so they are deleted now.
        self.api::<Pod>().delete_collection(&dp, &lp).await?;
        let deadline = Instant::now() + Duration::from_secs(600);
        loop {
            let left = self.api::<Run>().list(&lp).await?.items.len()
                + self.api::<Job>().list(&lp).await?.items.len()
                + self.api::<Pod>().list(&lp).await?.items.len();
            if left == 0 {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("{left} objects of {selector} still there 600 s after their deletion");
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}
