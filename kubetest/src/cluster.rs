//! A kruntimes installation on the test API server, as real processes: the
//! operator, the gateway and one runtimed per Pod, each with its own RBAC
//! identity from `examples/rbac/`, mTLS between them and HTTPS in front.
//!
//! There is no kubelet: [`Cluster::add_pod`] creates a real Pod object,
//! starts a local runtimed that plays it beside a Runtime Server of its own
//! (the Pod's two containers), and — once its port answers — patches the
//! Pod's status Ready with `podIP: 127.0.0.1`, as kwok would.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kruntimes_certs::install::InstallPki;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::{ApiServer, User};

/// Namespace of the installation (operator, gateway, Runtimes, Pods).
pub const SYSTEM_NAMESPACE: &str = "kruntimes-system";
/// ConfigMap with the gateway's public CA.
pub const CA_CONFIGMAP: &str = "kruntimes-gateway-ca";

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// A process of the installation.
struct Proc {
    child: Child,
    args: Vec<String>,
}

/// The installation.
pub struct Cluster {
    krt: PathBuf,
    dir: tempfile::TempDir,
    files: InstallPki,
    internal_ca: kruntimes_certs::Ca,
    kubeconfigs: BTreeMap<User, PathBuf>,
    procs: Mutex<BTreeMap<String, Proc>>,
    client: kube::Client,
    /// Gateway base URL (`https://127.0.0.1:<port>`).
    pub gateway: String,
    /// The operator's metrics URL (`--metrics-listen`).
    pub operator_metrics: String,
    /// HTTPS client trusting the gateway's public CA.
    pub http: reqwest::Client,
    /// The public CA (PEM).
    pub public_ca_pem: String,
    /// The artifact store Pods started from now on get, as the operator's
    /// Deployment passes `Runtime.spec.artifactStore`: runtimed's
    /// `--artifact-store` JSON and the credentials' variables.
    artifact_store: Mutex<Option<ArtifactStore>>,
}

/// runtimed's `--artifact-store` JSON and the credentials' variables.
type ArtifactStore = (String, Vec<(String, String)>);

impl Cluster {
    /// Installs RBAC, the CA ConfigMap and the namespace, then starts the
    /// operator and the gateway (`krt operator`, `krt gateway`).
    pub async fn start(krt: &Path, server: &ApiServer) -> anyhow::Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("kubetest-cluster-")
            .tempdir()?;
        let (files, internal_ca) =
            InstallPki::generate_keeping_internal_ca(dir.path(), "kubetest", 2)?;
        server.create_namespace(SYSTEM_NAMESPACE).await?;
        for (file, user) in [
            ("gateway-clusterrole.yaml", User::Gateway),
            ("operator-clusterrole.yaml", User::Operator),
            ("runtimed-clusterrole.yaml", User::Runtimed),
        ] {
            server.grant_cluster_role(file, user).await?;
        }
        let public_ca_pem = std::fs::read_to_string(&files.public_ca)?;
        let client = server.client().await?;
        let cm: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": CA_CONFIGMAP, "namespace": SYSTEM_NAMESPACE},
            "data": {"ca.crt": public_ca_pem},
        }))?;
        Api::<ConfigMap>::namespaced(client.clone(), SYSTEM_NAMESPACE)
            .create(&PostParams::default(), &cm)
            .await?;
        let mut kubeconfigs = BTreeMap::new();
        for user in User::ALL {
            kubeconfigs.insert(user, server.write_kubeconfig(user)?);
        }
        let http = reqwest::Client::builder()
            .add_root_certificate(reqwest::Certificate::from_pem(public_ca_pem.as_bytes())?)
            .timeout(Duration::from_secs(30))
            .build()?;
        let gateway_port = free_port()?;
        let watch_port = free_port()?;
        let metrics_port = free_port()?;
        let cluster = Self {
            krt: krt.to_path_buf(),
            dir,
            files,
            internal_ca,
            kubeconfigs,
            procs: Mutex::new(BTreeMap::new()),
            client,
            gateway: format!("https://127.0.0.1:{gateway_port}"),
            operator_metrics: format!("http://127.0.0.1:{metrics_port}/metrics"),
            http,
            public_ca_pem,
            artifact_store: Mutex::new(None),
        };
        let s = |p: &Path| p.display().to_string();
        let f = &cluster.files;
        cluster.spawn(
            "operator",
            cluster.operator_args("operator", watch_port, metrics_port),
        )?;
        let gateway_args = vec![
            "gateway".into(),
            "--exit-with-parent".into(),
            format!("--https-listen=127.0.0.1:{gateway_port}"),
            format!("--tls-cert={}", s(&f.gateway_cert)),
            format!("--tls-key={}", s(&f.gateway_key)),
            format!("--control-plane=127.0.0.1:{watch_port}"),
            format!("--internal-ca={}", s(&f.internal_ca)),
            format!("--client-cert={}", s(&f.gateway_client_cert)),
            format!("--client-key={}", s(&f.gateway_client_key)),
            "--auth=kubernetes".into(),
            format!("--kubeconfig={}", s(&cluster.kubeconfigs[&User::Gateway])),
            "--threads=1".into(),
        ];
        cluster.spawn("gateway", gateway_args)?;
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(r) = cluster
                .http
                .get(format!("{}/healthz", cluster.gateway))
                .send()
                .await
                && r.status().is_success()
            {
                break;
            }
            cluster.check_alive()?;
            if Instant::now() > deadline {
                bail!("gateway not healthy within 60 s:\n{}", cluster.logs());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(cluster)
    }

    /// The flags of an operator replica `identity` (as the chart runs it:
    /// with leader election, a short Lease so a failover test is quick).
    fn operator_args(&self, identity: &str, watch_port: u16, metrics_port: u16) -> Vec<String> {
        let s = |p: &Path| p.display().to_string();
        let f = &self.files;
        vec![
            "operator".into(),
            "--exit-with-parent".into(),
            format!("--kubeconfig={}", s(&self.kubeconfigs[&User::Operator])),
            format!("--gateway-url={}", self.gateway),
            format!("--ca-configmap={SYSTEM_NAMESPACE}/{CA_CONFIGMAP}"),
            format!("--system-namespace={SYSTEM_NAMESPACE}"),
            format!("--watch-listen=127.0.0.1:{watch_port}"),
            format!("--metrics-listen=127.0.0.1:{metrics_port}"),
            format!("--tls-cert={}", s(&f.control_cert)),
            format!("--tls-key={}", s(&f.control_key)),
            format!("--client-ca={}", s(&f.internal_ca)),
            "--leader-election".into(),
            format!("--leader-identity={identity}"),
            "--lease-duration-secs=8".into(),
        ]
    }

    /// Starts a standby operator replica (process `name`, its own watch and
    /// metrics ports) beside the first; returns its metrics URL.
    pub fn start_operator_replica(&self, name: &str) -> anyhow::Result<String> {
        let metrics_port = free_port()?;
        self.spawn(name, self.operator_args(name, free_port()?, metrics_port))?;
        Ok(format!("http://127.0.0.1:{metrics_port}/metrics"))
    }

    fn spawn(&self, name: &str, args: Vec<String>) -> anyhow::Result<()> {
        self.spawn_with(name, args, None)
    }

    /// Starts a process; `env` replaces the whole environment when given.
    fn spawn_with(
        &self,
        name: &str,
        args: Vec<String>,
        env: Option<Vec<(String, String)>>,
    ) -> anyhow::Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join(format!("{name}.log")))?;
        let mut cmd = Command::new(&self.krt);
        if let Some(env) = env {
            cmd.env_clear().envs(env);
        }
        let child = cmd
            .args(&args)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("start {name}"))?;
        self.procs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.into(), Proc { child, args });
        Ok(())
    }

    fn check_alive(&self) -> anyhow::Result<()> {
        let mut procs = self.procs.lock().unwrap_or_else(|p| p.into_inner());
        for (name, p) in procs.iter_mut() {
            if let Some(status) = p.child.try_wait()? {
                bail!("{name} exited ({status}):\n{}", self.log(name));
            }
        }
        Ok(())
    }

    /// SIGKILLs a process (`operator`, `gateway` or a Pod's name).
    pub fn kill(&self, name: &str) -> anyhow::Result<()> {
        let mut procs = self.procs.lock().unwrap_or_else(|p| p.into_inner());
        let p = procs
            .get_mut(name)
            .with_context(|| format!("no process {name}"))?;
        let _ = p.child.kill();
        let _ = p.child.wait();
        Ok(())
    }

    /// Issues new runtimed and gateway-client certificates from the same
    /// internal CA and puts them in place of the files the processes use
    /// (as a renewed, mounted Secret would be); returns the new runtimed
    /// certificate (DER).
    pub fn rotate_internal_leaves(&self) -> anyhow::Result<Vec<u8>> {
        self.files.rotate_internal_leaves(&self.internal_ca, 2)?;
        let certs = kruntimes_certs::load_certs(&self.files.runtimed_cert)?;
        Ok(certs.first().context("no certificate")?.as_ref().to_vec())
    }

    /// SIGTERMs a process and waits for it to exit, at most `within`;
    /// returns how long it took.
    pub async fn terminate(
        &self,
        name: &str,
        within: std::time::Duration,
    ) -> anyhow::Result<std::time::Duration> {
        let pid = {
            let procs = self.procs.lock().unwrap_or_else(|p| p.into_inner());
            procs
                .get(name)
                .with_context(|| format!("no process {name}"))?
                .child
                .id()
        };
        let started = std::time::Instant::now();
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGTERM,
        )?;
        loop {
            {
                let mut procs = self.procs.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(p) = procs.get_mut(name)
                    && p.child.try_wait()?.is_some()
                {
                    return Ok(started.elapsed());
                }
            }
            if started.elapsed() > within {
                bail!(
                    "{name} still running {within:?} after SIGTERM:\n{}",
                    self.log(name)
                );
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }

    /// Starts a killed process again with the same flags.
    pub fn restart(&self, name: &str) -> anyhow::Result<()> {
        let args = {
            let mut procs = self.procs.lock().unwrap_or_else(|p| p.into_inner());
            let p = procs
                .get_mut(name)
                .with_context(|| format!("no process {name}"))?;
            let _ = p.child.kill();
            let _ = p.child.wait();
            p.args.clone()
        };
        self.spawn(name, args)
    }

    /// The working directory Pod `pod`'s Runtime Server gives Run `run_uid`
    /// (what its code may write, beside its temporary directory).
    pub fn work_dir(&self, pod: &str, run_uid: &str) -> PathBuf {
        self.dir.path().join("work").join(pod).join(run_uid)
    }

    /// The log of a process.
    pub fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.path().join(format!("{name}.log"))).unwrap_or_default()
    }

    /// [`Cluster::logs`] once every line the gateway logged before the
    /// call is written ([`kruntimes_testkit::settle_gateway_log`]).
    pub async fn settled_logs(&self) -> String {
        if let Err(e) =
            kruntimes_testkit::settle_gateway_log(&self.http, &self.gateway, || self.log("gateway"))
                .await
        {
            panic!("{e}:\n{}", self.log("gateway"));
        }
        self.logs()
    }

    /// Every process log, headed by its name.
    pub fn logs(&self) -> String {
        let names: Vec<String> = self
            .procs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .keys()
            .cloned()
            .collect();
        names
            .iter()
            .map(|n| format!("==== {n}\n{}", self.log(n)))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Creates Runtime `name` in the system namespace.
    pub async fn create_runtime(
        &self,
        name: &str,
        replicas: i32,
        capacity: u32,
    ) -> anyhow::Result<()> {
        let api: Api<kruntimes_api::Runtime> =
            Api::namespaced(self.client.clone(), SYSTEM_NAMESPACE);
        let rt: kruntimes_api::Runtime = serde_json::from_value(json!({
            "apiVersion": "kruntimes.io/v1alpha1",
            "kind": "Runtime",
            "metadata": {"name": name, "namespace": SYSTEM_NAMESPACE},
            "spec": {
                "replicas": replicas,
                "capacity": {"runs": capacity},
                "image": "ghcr.io/kruntimes/runtime-python:test",
            }
        }))?;
        api.create(&PostParams::default(), &rt).await?;
        Ok(())
    }

    /// Creates Pod `name` of Runtime `runtime`, starts the runtimed that
    /// plays it and marks the Pod Ready once that runtimed listens. Returns
    /// the Pod's UID.
    pub async fn add_pod(&self, name: &str, runtime: &str) -> anyhow::Result<String> {
        let (uid, port) = self.start_pod(name, runtime, User::Runtimed).await?;
        let deadline = Instant::now() + Duration::from_secs(30);
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            self.check_alive()?;
            if Instant::now() > deadline {
                bail!("runtimed for {name} did not listen within 30 s");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.set_pod_ready(name, true).await?;
        Ok(uid)
    }

    /// Creates the object of Pod `name` of Runtime `runtime`, its dataplane
    /// on `port` (as the operator's Deployment would, on the harness node).
    async fn create_pod(&self, name: &str, runtime: &str, port: u16) -> anyhow::Result<Pod> {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {
                "name": name,
                "namespace": SYSTEM_NAMESPACE,
                "labels": {"kruntimes.io/runtime": runtime, "app.kubernetes.io/name": "kruntimes-runtime"},
            },
            "spec": {
                "nodeName": "kubetest-node",
                "containers": [{
                    "name": "runtimed",
                    "image": "ghcr.io/kruntimes/runtime-python:test",
                    "ports": [{"name": "dataplane", "containerPort": port}],
                }],
            },
        }))?;
        Ok(
            Api::<Pod>::namespaced(self.client.clone(), SYSTEM_NAMESPACE)
                .create(&PostParams::default(), &pod)
                .await?,
        )
    }

    /// Creates Pod `name` of Runtime `runtime`, Ready, whose runtimed
    /// never runs: the operator binds Runs to it and nothing registers them
    /// (for measuring binding alone).
    pub async fn add_idle_pod(&self, name: &str, runtime: &str) -> anyhow::Result<String> {
        let pod = self.create_pod(name, runtime, 7443).await?;
        self.set_pod_ready(name, true).await?;
        pod.metadata.uid.context("pod uid")
    }

    /// Creates Pod `name` of Runtime `runtime` and starts the runtimed that
    /// plays it as `identity`, without waiting for it. Returns the Pod's UID
    /// and the runtimed's port.
    pub async fn start_pod(
        &self,
        name: &str,
        runtime: &str,
        identity: User,
    ) -> anyhow::Result<(String, u16)> {
        let port = free_port()?;
        let pod = self.create_pod(name, runtime, port).await?;
        let uid = pod.metadata.uid.clone().context("pod uid")?;
        let s = |p: &Path| p.display().to_string();
        let f = &self.files;
        let socket = self.start_runtime_server(name)?;
        let mut args = vec![
            "runtimed".into(),
            "--exit-with-parent".into(),
            "--kubernetes".into(),
            // As the operator's Deployment passes Runtime.spec.backend (the
            // harness's Runtimes are named after theirs; others are Python).
            format!(
                "--backend={}",
                if runtime == "bash" { "bash" } else { "python" }
            ),
            format!("--name={name}"),
            format!("--pod-uid={uid}"),
            format!("--pod-namespace={SYSTEM_NAMESPACE}"),
            // As the operator passes the Pod's `kruntimes.io/runtime` label.
            format!("--runtime-name={runtime}"),
            format!("--system-namespace={SYSTEM_NAMESPACE}"),
            format!("--kubeconfig={}", s(&self.kubeconfigs[&identity])),
            format!("--listen=127.0.0.1:{port}"),
            format!("--tls-cert={}", s(&f.runtimed_cert)),
            format!("--tls-key={}", s(&f.runtimed_key)),
            format!("--client-ca={}", s(&f.internal_ca)),
            format!("--runtime-server={}", s(&socket)),
        ];
        let store = self
            .artifact_store
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        match store {
            Some((json, credentials)) => {
                args.push(format!("--artifact-store={json}"));
                let env = std::env::vars().chain(credentials).collect();
                self.spawn_with(name, args, Some(env))?;
            }
            None => self.spawn(name, args)?,
        }
        Ok((uid, port))
    }

    /// Gives the runtimed of every Pod started from now on this artifact
    /// store (`--artifact-store` JSON) and these credentials' variables.
    pub fn use_artifact_store(&self, json: &str, credentials: Vec<(String, String)>) {
        *self
            .artifact_store
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some((json.to_owned(), credentials));
    }

    /// Starts the Runtime Server of Pod `name` (process
    /// `runtime-server-NAME`): a private socket directory, its own work
    /// root and temporary directory, only PATH from this environment, and
    /// the harness directory protected from it. Returns its socket.
    fn start_runtime_server(&self, name: &str) -> anyhow::Result<PathBuf> {
        use std::os::unix::fs::PermissionsExt;
        let sockets = self.dir.path().join("sockets").join(name);
        std::fs::create_dir_all(&sockets)?;
        std::fs::set_permissions(&sockets, std::fs::Permissions::from_mode(0o700))?;
        let socket = sockets.join("runtime.sock");
        let work = self.dir.path().join("work").join(name);
        let args = vec![
            "runtime-server".into(),
            "--exit-with-parent".into(),
            format!("--socket={}", socket.display()),
            format!("--work-root={}", work.display()),
            "--python-spares=1".into(),
            // Everything else of the harness (kubeconfigs, keys) stays out
            // of the server's reach.
            format!("--protect={}", self.dir.path().display()),
        ];
        let tmp = self.dir.path().join("tmp").join(name);
        std::fs::create_dir_all(&tmp)?;
        let mut env = std::env::var("PATH")
            .map(|p| vec![("PATH".to_owned(), p)])
            .unwrap_or_default();
        env.push(("TMPDIR".to_owned(), tmp.display().to_string()));
        self.spawn_with(&format!("runtime-server-{name}"), args, Some(env))?;
        Ok(socket)
    }

    /// Patches a Pod's status as a kubelet would.
    pub async fn set_pod_ready(&self, name: &str, ready: bool) -> anyhow::Result<()> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), SYSTEM_NAMESPACE);
        let now = k8s_openapi::jiff::Timestamp::now().to_string();
        let status = if ready { "True" } else { "False" };
        let patch = json!({"status": {
            "phase": "Running",
            "podIP": "127.0.0.1",
            "podIPs": [{"ip": "127.0.0.1"}],
            "conditions": [
                {"type": "Ready", "status": status, "lastTransitionTime": now},
                {"type": "ContainersReady", "status": status, "lastTransitionTime": now},
            ],
        }});
        pods.patch_status(name, &PatchParams::default(), &Patch::Merge(patch))
            .await?;
        Ok(())
    }

    /// Deletes a Pod object at once, as a node controller force-deletes the
    /// Pods of a lost node. Its runtimed keeps running: a partitioned owner
    /// that must fence itself.
    pub async fn delete_pod(&self, name: &str) -> anyhow::Result<()> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), SYSTEM_NAMESPACE);
        pods.delete(name, &kube::api::DeleteParams::default().grace_period(0))
            .await?;
        Ok(())
    }

    /// A Run's current object (JSON).
    pub async fn run(&self, namespace: &str, name: &str) -> anyhow::Result<Value> {
        let api: Api<kruntimes_api::Run> = Api::namespaced(self.client.clone(), namespace);
        Ok(serde_json::to_value(api.get(name).await?)?)
    }

    /// Waits until `check` holds for Run `namespace/name` (up to `within`).
    pub async fn wait_run<F>(
        &self,
        namespace: &str,
        name: &str,
        within: Duration,
        what: &str,
        check: F,
    ) -> anyhow::Result<Value>
    where
        F: Fn(&Value) -> bool,
    {
        let deadline = Instant::now() + within;
        let mut last: Value;
        loop {
            match self.run(namespace, name).await {
                Ok(v) => {
                    if check(&v) {
                        return Ok(v);
                    }
                    last = v;
                }
                Err(e) => last = json!(e.to_string()),
            }
            if Instant::now() > deadline {
                bail!(
                    "Run {namespace}/{name}: {what} not reached within {within:?}; last: {last}\n{}",
                    self.logs()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits for `status.phase == phase`.
    pub async fn wait_phase(
        &self,
        namespace: &str,
        name: &str,
        phase: &str,
    ) -> anyhow::Result<Value> {
        self.wait_run(namespace, name, Duration::from_secs(60), phase, |v| {
            v["status"]["phase"] == phase
        })
        .await
    }

    /// The internal TLS material for a client that talks to runtimed
    /// directly as the gateway would: (CA, client cert, client key) PEM.
    pub fn gateway_client_identity(&self) -> anyhow::Result<(Vec<u8>, Vec<u8>, Vec<u8>)> {
        Ok((
            std::fs::read(&self.files.internal_ca)?,
            std::fs::read(&self.files.gateway_client_cert)?,
            std::fs::read(&self.files.gateway_client_key)?,
        ))
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let mut procs = self.procs.lock().unwrap_or_else(|p| p.into_inner());
        for p in procs.values_mut() {
            let _ = p.child.kill();
            let _ = p.child.wait();
        }
    }
}
