//! A real Kubernetes API server for tests: `etcd` + `kube-apiserver`, built
//! from the Go module proxy by `kubetest/envtest/build.sh`, started on free
//! loopback ports in a temporary directory.
//!
//! The API server runs with a generated serving certificate, a static token
//! file (one token per [`User`]), RBAC authorization, service-account signing
//! keys (so the TokenRequest API issues real JWTs) and the kruntimes CRDs from
//! `charts/kruntimes/crds/`. Both processes are stopped when the
//! [`ApiServer`] is dropped.
//!
//! There is no kubelet, no controller manager and no scheduler: tests create
//! the objects those would (Pods, their status) themselves.
//!
//! When the binaries are missing, [`ApiServer::start`] fails with the command
//! that builds them; a test that needs the API server never passes without it.

pub mod cluster;

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use base64::Engine as _;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};

/// The static-token users of the test API server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum User {
    /// Cluster admin (`system:masters`).
    Admin,
    /// A user tests grant access to.
    Alice,
    /// A user tests grant access to.
    Bob,
    /// A user tests grant access to.
    Carol,
    /// The identity the gateway runs as.
    Gateway,
    /// The identity the operator runs as.
    Operator,
    /// The identity runtimed runs as.
    Runtimed,
}

impl User {
    /// Every user.
    pub const ALL: [User; 7] = [
        User::Admin,
        User::Alice,
        User::Bob,
        User::Carol,
        User::Gateway,
        User::Operator,
        User::Runtimed,
    ];

    /// The user name the API server reports.
    pub fn name(self) -> &'static str {
        match self {
            User::Admin => "admin",
            User::Alice => "alice",
            User::Bob => "bob",
            User::Carol => "carol",
            User::Gateway => "kruntimes-gateway",
            User::Operator => "kruntimes-operator",
            User::Runtimed => "kruntimes-runtimed",
        }
    }

    fn groups(self) -> &'static str {
        match self {
            User::Admin => "system:masters",
            User::Alice | User::Bob | User::Carol => "kruntimes-testers",
            User::Gateway | User::Operator | User::Runtimed => "kruntimes-components",
        }
    }
}

/// Where the binaries of this checkout's pinned versions live (they are
/// built by `kubetest/envtest/build.sh`, which owns the version pins).
pub fn binaries_dir() -> anyhow::Result<PathBuf> {
    if let Ok(dir) = std::env::var("KRT_ENVTEST_DIR") {
        return Ok(PathBuf::from(dir));
    }
    let script = build_script();
    let out = Command::new("bash")
        .arg(&script)
        .arg("--print")
        .output()
        .with_context(|| format!("run {}", script.display()))?;
    if !out.status.success() {
        bail!("{} --print failed", script.display());
    }
    Ok(PathBuf::from(String::from_utf8(out.stdout)?.trim()))
}

fn build_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("envtest/build.sh")
}

/// The committed CRD manifests installed into every API server.
pub fn crd_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../charts/kruntimes/crds")
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

fn stop(child: &mut Child) {
    let pid = child.id() as i32;
    // SIGTERM first so etcd and the API server shut down cleanly.
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(pid.to_string())
        .status();
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if matches!(child.try_wait(), Ok(Some(_))) {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// A running etcd + kube-apiserver.
pub struct ApiServer {
    dir: tempfile::TempDir,
    bins: PathBuf,
    etcd: Option<Child>,
    apiserver: Option<Child>,
    port: u16,
    etcd_url: String,
    ca_pem: String,
    tokens: BTreeMap<User, String>,
    sa_key_pem: String,
}

/// The service-account token issuer the API server is configured with.
pub const SA_ISSUER: &str = "https://kubernetes.default.svc.cluster.local";
/// The default audience of service-account tokens.
pub const API_AUDIENCE: &str = "https://kubernetes.default.svc.cluster.local";

impl ApiServer {
    /// Starts etcd and the API server, waits for `/readyz` and installs the
    /// CRDs. Fails (with the build command) when the binaries are missing.
    pub async fn start() -> anyhow::Result<Self> {
        let bins = binaries_dir()?;
        for bin in ["etcd", "kube-apiserver"] {
            if !bins.join(bin).is_file() {
                bail!(
                    "{} is missing: build the test API server with `{}` (CI does this in .ci/run)",
                    bins.join(bin).display(),
                    build_script().display()
                );
            }
        }
        let dir = tempfile::Builder::new().prefix("kubetest-").tempdir()?;
        let p = dir.path();

        // Serving certificate for 127.0.0.1 from a fresh CA.
        let ca = kruntimes_certs::Ca::generate("kubetest-ca", 2)?;
        let serving = ca.issue(&kruntimes_certs::LeafSpec {
            common_name: "kube-apiserver".into(),
            dns_names: vec!["localhost".into(), "kubernetes.default.svc".into()],
            ips: vec![IpAddr::V4(Ipv4Addr::LOCALHOST)],
            server: true,
            client: false,
            valid_days: 2,
        })?;
        std::fs::write(p.join("ca.crt"), &ca.cert_pem)?;
        std::fs::write(p.join("apiserver.crt"), &serving.cert_pem)?;
        kruntimes_certs::write_private(&p.join("apiserver.key"), serving.key_pem.as_bytes())?;

        // Service-account signing key (ES256).
        let sa = rcgen::KeyPair::generate()?;
        kruntimes_certs::write_private(&p.join("sa.key"), sa.serialize_pem().as_bytes())?;
        std::fs::write(p.join("sa.pub"), sa.public_key_pem())?;

        // Static tokens: `token,user,uid,"groups"`.
        let mut tokens = BTreeMap::new();
        let mut csv = String::new();
        for user in User::ALL {
            let token = format!("kt-{}", uuid::Uuid::new_v4().simple());
            csv.push_str(&format!(
                "{token},{},uid-{},\"{}\"\n",
                user.name(),
                user.name(),
                user.groups()
            ));
            tokens.insert(user, token);
        }
        kruntimes_certs::write_private(&p.join("tokens.csv"), csv.as_bytes())?;

        let etcd_port = free_port()?;
        let peer_port = free_port()?;
        let api_port = free_port()?;
        let etcd_url = format!("http://127.0.0.1:{etcd_port}");
        let etcd = Command::new(bins.join("etcd"))
            .arg("--name=kubetest")
            .arg(format!("--data-dir={}", p.join("etcd").display()))
            .arg(format!("--listen-client-urls={etcd_url}"))
            .arg(format!("--advertise-client-urls={etcd_url}"))
            .arg(format!("--listen-peer-urls=http://127.0.0.1:{peer_port}"))
            .arg(format!(
                "--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}"
            ))
            .arg(format!(
                "--initial-cluster=kubetest=http://127.0.0.1:{peer_port}"
            ))
            .arg("--unsafe-no-fsync")
            .arg("--log-level=warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(p.join("etcd.log"))?)
            .spawn()
            .context("start etcd")?;

        let mut server = Self {
            dir,
            bins,
            etcd: Some(etcd),
            apiserver: None,
            port: api_port,
            etcd_url,
            ca_pem: ca.cert_pem,
            tokens,
            sa_key_pem: sa.serialize_pem(),
        };
        server.start_apiserver().await?;
        server.install_crds().await?;
        Ok(server)
    }

    /// (Re)starts the API server process on the same port and etcd, and
    /// waits until it is ready.
    pub async fn start_apiserver(&mut self) -> anyhow::Result<()> {
        if self.apiserver.is_some() {
            return Ok(());
        }
        let p = self.dir.path();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(p.join("kube-apiserver.log"))?;
        let child = Command::new(self.bins.join("kube-apiserver"))
            .arg(format!("--etcd-servers={}", self.etcd_url))
            .arg("--bind-address=127.0.0.1")
            .arg("--advertise-address=127.0.0.1")
            .arg(format!("--secure-port={}", self.port))
            .arg(format!("--cert-dir={}", p.join("certs").display()))
            .arg(format!(
                "--tls-cert-file={}",
                p.join("apiserver.crt").display()
            ))
            .arg(format!(
                "--tls-private-key-file={}",
                p.join("apiserver.key").display()
            ))
            .arg(format!(
                "--token-auth-file={}",
                p.join("tokens.csv").display()
            ))
            .arg("--authorization-mode=RBAC")
            .arg(format!("--service-account-issuer={SA_ISSUER}"))
            .arg(format!("--api-audiences={API_AUDIENCE}"))
            .arg(format!(
                "--service-account-key-file={}",
                p.join("sa.pub").display()
            ))
            .arg(format!(
                "--service-account-signing-key-file={}",
                p.join("sa.key").display()
            ))
            .arg("--service-cluster-ip-range=10.96.0.0/24")
            // No controller manager creates `default` ServiceAccounts here.
            .arg("--disable-admission-plugins=ServiceAccount")
            .arg("--allow-privileged=true")
            .arg("--v=1")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("start kube-apiserver")?;
        self.apiserver = Some(child);
        self.wait_ready(Duration::from_secs(90)).await
    }

    /// Stops the API server process (etcd keeps running), as an outage.
    pub fn stop_apiserver(&mut self) {
        if let Some(mut child) = self.apiserver.take() {
            stop(&mut child);
        }
    }

    async fn wait_ready(&mut self, within: Duration) -> anyhow::Result<()> {
        let http = self.http()?;
        let url = format!("{}/readyz", self.url());
        let deadline = Instant::now() + within;
        loop {
            if let Ok(r) = http
                .get(&url)
                .bearer_auth(self.token(User::Admin))
                .send()
                .await
                && r.status().is_success()
            {
                return Ok(());
            }
            if let Some(etcd) = self.etcd.as_mut()
                && let Some(status) = etcd.try_wait()?
            {
                bail!("etcd exited ({status}):\n{}", tail(&self.log("etcd"), 40));
            }
            if let Some(child) = self.apiserver.as_mut()
                && let Some(status) = child.try_wait()?
            {
                bail!(
                    "kube-apiserver exited ({status}):\n{}",
                    tail(&self.log("kube-apiserver"), 40)
                );
            }
            if Instant::now() > deadline {
                bail!(
                    "kube-apiserver not ready within {within:?}:\n{}",
                    tail(&self.log("kube-apiserver"), 40)
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    async fn install_crds(&self) -> anyhow::Result<()> {
        let client = self.client().await?;
        let crds: Api<CustomResourceDefinition> = Api::all(client);
        let mut names = Vec::new();
        let dir = crd_dir();
        let mut files: Vec<_> = match std::fs::read_dir(&dir) {
            Ok(entries) => entries.filter_map(Result::ok).map(|e| e.path()).collect(),
            Err(_) => Vec::new(),
        };
        files.sort();
        for file in files
            .iter()
            .filter(|f| f.extension().is_some_and(|e| e == "yaml"))
        {
            let crd: CustomResourceDefinition = serde_yaml::from_slice(&std::fs::read(file)?)
                .with_context(|| format!("parse {}", file.display()))?;
            names.push(crd.metadata.name.clone().unwrap_or_default());
            crds.create(&PostParams::default(), &crd)
                .await
                .with_context(|| format!("install {}", file.display()))?;
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        for name in names {
            loop {
                let crd = crds.get(&name).await?;
                let established = crd
                    .status
                    .and_then(|s| s.conditions)
                    .unwrap_or_default()
                    .iter()
                    .any(|c| c.type_ == "Established" && c.status == "True");
                if established {
                    break;
                }
                if Instant::now() > deadline {
                    bail!("CRD {name} not established within 30 s");
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        Ok(())
    }

    /// `https://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }

    /// The static token of `user`.
    pub fn token(&self, user: User) -> &str {
        &self.tokens[&user]
    }

    /// Every static token (to check that none leaks into logs).
    pub fn tokens(&self) -> impl Iterator<Item = &str> {
        self.tokens.values().map(String::as_str)
    }

    /// The CA that signed the serving certificate (PEM).
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// The service-account signing key (PKCS#8 PEM, ES256), for tests that
    /// mint tokens the API server accepts.
    pub fn sa_signing_key_pem(&self) -> &str {
        &self.sa_key_pem
    }

    /// A kubeconfig document that authenticates as `user`.
    pub fn kubeconfig_yaml(&self, user: User) -> String {
        let ca = base64::engine::general_purpose::STANDARD.encode(self.ca_pem.as_bytes());
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: kubetest\n  cluster:\n    server: {url}\n    certificate-authority-data: {ca}\nusers:\n- name: {name}\n  user:\n    token: {token}\ncontexts:\n- name: kubetest\n  context:\n    cluster: kubetest\n    user: {name}\ncurrent-context: kubetest\n",
            url = self.url(),
            name = user.name(),
            token = self.token(user),
        )
    }

    /// Writes [`Self::kubeconfig_yaml`] for `user` (mode 0600) and returns
    /// its path.
    pub fn write_kubeconfig(&self, user: User) -> anyhow::Result<PathBuf> {
        let path = self.dir.path().join(format!("{}.kubeconfig", user.name()));
        kruntimes_certs::write_private(&path, self.kubeconfig_yaml(user).as_bytes())?;
        Ok(path)
    }

    /// A client authenticated as the cluster admin.
    pub async fn client(&self) -> anyhow::Result<kube::Client> {
        self.client_as(User::Admin).await
    }

    /// A client authenticated as `user`.
    pub async fn client_as(&self, user: User) -> anyhow::Result<kube::Client> {
        let kubeconfig = Kubeconfig::from_yaml(&self.kubeconfig_yaml(user))?;
        let config =
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
        Ok(kube::Client::try_from(config)?)
    }

    /// An HTTPS client trusting the API server (for raw endpoints such as
    /// `/metrics`).
    pub fn http(&self) -> anyhow::Result<reqwest::Client> {
        Ok(reqwest::Client::builder()
            .add_root_certificate(reqwest::Certificate::from_pem(self.ca_pem.as_bytes())?)
            .timeout(Duration::from_secs(10))
            .build()?)
    }

    /// Sum of the API server's `apiserver_request_total` samples for
    /// `resource` and `verb` (all codes): an independent count of the API
    /// calls a component made.
    pub async fn request_count(&self, resource: &str, verb: &str) -> anyhow::Result<u64> {
        let text = self
            .http()?
            .get(format!("{}/metrics", self.url()))
            .bearer_auth(self.token(User::Admin))
            .send()
            .await?
            .error_for_status()?
            .text()
            .await?;
        let resource_label = format!("resource=\"{resource}\"");
        let verb_label = format!("verb=\"{verb}\"");
        let mut total = 0u64;
        for line in text.lines() {
            if line.starts_with("apiserver_request_total{")
                && line.contains(&resource_label)
                && line.contains(&verb_label)
                && let Some(v) = line.rsplit(' ').next()
            {
                total += v.parse::<f64>().unwrap_or(0.0) as u64;
            }
        }
        Ok(total)
    }

    /// The log of `component` (`etcd` or `kube-apiserver`).
    pub fn log(&self, component: &str) -> String {
        std::fs::read_to_string(self.dir.path().join(format!("{component}.log")))
            .unwrap_or_default()
    }
}

/// Who a binding grants to.
#[derive(Debug, Clone)]
pub enum Subject {
    /// A static-token user.
    User(User),
    /// A ServiceAccount `(namespace, name)`.
    ServiceAccount(String, String),
}

impl Subject {
    fn to_rbac(&self) -> k8s_openapi::api::rbac::v1::Subject {
        match self {
            Subject::User(u) => k8s_openapi::api::rbac::v1::Subject {
                kind: "User".into(),
                name: u.name().into(),
                api_group: Some("rbac.authorization.k8s.io".into()),
                namespace: None,
            },
            Subject::ServiceAccount(ns, name) => k8s_openapi::api::rbac::v1::Subject {
                kind: "ServiceAccount".into(),
                name: name.clone(),
                api_group: None,
                namespace: Some(ns.clone()),
            },
        }
    }
}

impl ApiServer {
    /// Creates a namespace.
    pub async fn create_namespace(&self, name: &str) -> anyhow::Result<()> {
        use k8s_openapi::api::core::v1::Namespace;
        let api: Api<Namespace> = Api::all(self.client().await?);
        let ns = Namespace {
            metadata: kube::api::ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            ..Default::default()
        };
        api.create(&PostParams::default(), &ns).await?;
        Ok(())
    }

    /// Creates the `Role` (in `namespace`) or `ClusterRole` (namespace
    /// `None`) of a YAML file, returning its name.
    pub async fn apply_role_file(
        &self,
        namespace: Option<&str>,
        path: &Path,
    ) -> anyhow::Result<String> {
        let text = std::fs::read(path).with_context(|| format!("read {}", path.display()))?;
        self.apply_role_yaml(namespace, &text).await
    }

    /// [`Self::apply_role_file`] from YAML text.
    pub async fn apply_role_yaml(
        &self,
        namespace: Option<&str>,
        text: &[u8],
    ) -> anyhow::Result<String> {
        use k8s_openapi::api::rbac::v1::{ClusterRole, Role};
        let client = self.client().await?;
        match namespace {
            Some(ns) => {
                let role: Role = serde_yaml::from_slice(text)?;
                let name = role.metadata.name.clone().unwrap_or_default();
                Api::<Role>::namespaced(client, ns)
                    .create(&PostParams::default(), &role)
                    .await?;
                Ok(name)
            }
            None => {
                let role: ClusterRole = serde_yaml::from_slice(text)?;
                let name = role.metadata.name.clone().unwrap_or_default();
                Api::<ClusterRole>::all(client)
                    .create(&PostParams::default(), &role)
                    .await?;
                Ok(name)
            }
        }
    }

    /// Binds `role` (a Role in `namespace`, or a ClusterRole cluster-wide
    /// when `namespace` is `None`) to `subject` as binding `name`.
    pub async fn bind(
        &self,
        namespace: Option<&str>,
        name: &str,
        role: &str,
        subject: Subject,
    ) -> anyhow::Result<()> {
        use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleBinding, RoleRef};
        let client = self.client().await?;
        let meta = kube::api::ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        };
        match namespace {
            Some(ns) => {
                let b = RoleBinding {
                    metadata: meta,
                    role_ref: RoleRef {
                        api_group: "rbac.authorization.k8s.io".into(),
                        kind: "Role".into(),
                        name: role.into(),
                    },
                    subjects: Some(vec![subject.to_rbac()]),
                };
                Api::<RoleBinding>::namespaced(client, ns)
                    .create(&PostParams::default(), &b)
                    .await?;
            }
            None => {
                let b = ClusterRoleBinding {
                    metadata: meta,
                    role_ref: RoleRef {
                        api_group: "rbac.authorization.k8s.io".into(),
                        kind: "ClusterRole".into(),
                        name: role.into(),
                    },
                    subjects: Some(vec![subject.to_rbac()]),
                };
                Api::<ClusterRoleBinding>::all(client)
                    .create(&PostParams::default(), &b)
                    .await?;
            }
        }
        Ok(())
    }

    /// Deletes the RoleBinding `name` in `namespace`.
    pub async fn unbind(&self, namespace: &str, name: &str) -> anyhow::Result<()> {
        use k8s_openapi::api::rbac::v1::RoleBinding;
        Api::<RoleBinding>::namespaced(self.client().await?, namespace)
            .delete(name, &Default::default())
            .await?;
        Ok(())
    }

    /// Creates ServiceAccount `name` in `namespace` and returns its UID.
    pub async fn create_service_account(
        &self,
        namespace: &str,
        name: &str,
    ) -> anyhow::Result<String> {
        use k8s_openapi::api::core::v1::ServiceAccount;
        let sa = ServiceAccount {
            metadata: kube::api::ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let sa = Api::<ServiceAccount>::namespaced(self.client().await?, namespace)
            .create(&PostParams::default(), &sa)
            .await?;
        sa.metadata.uid.context("ServiceAccount without uid")
    }

    /// A real service-account JWT from the TokenRequest API (the API server
    /// allows at least 600 s).
    pub async fn service_account_token(
        &self,
        namespace: &str,
        name: &str,
        expiration_seconds: i64,
    ) -> anyhow::Result<String> {
        self.service_account_token_for(namespace, name, expiration_seconds, API_AUDIENCE)
            .await
    }

    /// [`Self::service_account_token`] for another audience.
    pub async fn service_account_token_for(
        &self,
        namespace: &str,
        name: &str,
        expiration_seconds: i64,
        audience: &str,
    ) -> anyhow::Result<String> {
        use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
        use k8s_openapi::api::core::v1::ServiceAccount;
        let request = TokenRequest {
            spec: TokenRequestSpec {
                audiences: vec![audience.into()],
                expiration_seconds: Some(expiration_seconds),
                bound_object_ref: None,
            },
            ..Default::default()
        };
        let api = Api::<ServiceAccount>::namespaced(self.client().await?, namespace);
        let issued: TokenRequest = api
            .create_subresource("token", name, &PostParams::default(), &request)
            .await?;
        Ok(issued.status.context("TokenRequest without status")?.token)
    }
}

impl ApiServer {
    /// Signs a service-account token with the API server's own signing key,
    /// valid for `ttl` (the TokenRequest API will not issue one shorter than
    /// ten minutes). The API server accepts it like one it issued: the
    /// ServiceAccount `namespace/name` must exist with `uid`.
    pub fn mint_service_account_token(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
        ttl: Duration,
    ) -> anyhow::Result<String> {
        mint_service_account_token(&self.sa_key_pem, namespace, name, uid, ttl)
    }
}

/// A fresh ES256 key the test API server does not trust (PKCS#8 PEM), for
/// forged-token tests.
pub fn foreign_signing_key() -> anyhow::Result<String> {
    Ok(rcgen::KeyPair::generate()?.serialize_pem())
}

/// Signs a service-account token of this harness's issuer with `key_pem`.
pub fn mint_service_account_token(
    key_pem: &str,
    namespace: &str,
    name: &str,
    uid: &str,
    ttl: Duration,
) -> anyhow::Result<String> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs();
    let claims = serde_json::json!({
        "iss": SA_ISSUER,
        "aud": [API_AUDIENCE],
        "sub": format!("system:serviceaccount:{namespace}:{name}"),
        "iat": now,
        "nbf": now,
        "exp": now + ttl.as_secs(),
        "jti": uuid::Uuid::new_v4().to_string(),
        "kubernetes.io": {
            "namespace": namespace,
            "serviceaccount": {"name": name, "uid": uid},
        },
    });
    let key = jsonwebtoken::EncodingKey::from_ec_pem(key_pem.as_bytes())?;
    Ok(jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::ES256),
        &claims,
        &key,
    )?)
}

fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        self.stop_apiserver();
        if let Some(mut etcd) = self.etcd.take() {
            stop(&mut etcd);
        }
    }
}
