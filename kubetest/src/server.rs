//! [`ApiServer`]: one running etcd + kube-apiserver pair, its lifecycle
//! (start, readiness, outage and restart, stop on drop) and what it was
//! started with (URL, CA, static tokens, signing key, logs).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Child;
use std::time::{Duration, Instant};

use anyhow::bail;

use crate::binaries::require_binaries;
use crate::pki;
use crate::process::{self, free_port, tail};
use crate::users::User;

/// What a test API server is started with beyond its fixed setup.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ApiServerOptions {
    /// Run the `ServiceAccount` admission plugin, which checks on every Pod
    /// creation that its ServiceAccount exists and mounts its token unless
    /// `automountServiceAccountToken` is false. Off by default: without a
    /// controller manager no `default` ServiceAccount exists, so every Pod
    /// that names none would be refused.
    pub service_account_admission: bool,
}

/// A running etcd + kube-apiserver.
pub struct ApiServer {
    options: ApiServerOptions,
    pub(crate) dir: tempfile::TempDir,
    bins: PathBuf,
    etcd: Option<Child>,
    apiserver: Option<Child>,
    port: u16,
    etcd_url: String,
    pub(crate) ca_pem: String,
    tokens: BTreeMap<User, String>,
    pub(crate) sa_key_pem: String,
}

impl ApiServer {
    /// Starts etcd and the API server, waits for `/readyz` and installs the
    /// CRDs. Fails (with the build command) when the binaries are missing.
    pub async fn start() -> anyhow::Result<Self> {
        Self::start_with(ApiServerOptions::default()).await
    }

    /// [`Self::start`] with `options`. The ports are picked free and then
    /// handed to etcd and the API server, so another process may take one
    /// in between (tests start many servers at once): a start that fails
    /// with "address already in use" is tried again on fresh ports.
    pub async fn start_with(options: ApiServerOptions) -> anyhow::Result<Self> {
        const ATTEMPTS: usize = 5;
        let mut attempt = 1;
        loop {
            match Self::start_once(options).await {
                Err(e)
                    if attempt < ATTEMPTS
                        && format!("{e:#}").contains("address already in use") =>
                {
                    attempt += 1;
                }
                other => return other,
            }
        }
    }

    async fn start_once(options: ApiServerOptions) -> anyhow::Result<Self> {
        let bins = require_binaries()?;
        let dir = tempfile::Builder::new().prefix("kubetest-").tempdir()?;
        let credentials = pki::write(dir.path())?;

        let etcd_port = free_port()?;
        let peer_port = free_port()?;
        let api_port = free_port()?;
        let etcd_url = format!("http://127.0.0.1:{etcd_port}");
        let etcd = process::start_etcd(&bins, dir.path(), &etcd_url, peer_port)?;

        let mut server = Self {
            options,
            dir,
            bins,
            etcd: Some(etcd),
            apiserver: None,
            port: api_port,
            etcd_url,
            ca_pem: credentials.ca_pem,
            tokens: credentials.tokens,
            sa_key_pem: credentials.sa_key_pem,
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
        let child = process::start_kube_apiserver(
            &self.bins,
            self.dir.path(),
            &self.etcd_url,
            self.port,
            self.options,
        )?;
        self.apiserver = Some(child);
        self.wait_ready(Duration::from_secs(90)).await
    }

    /// Stops the API server process (etcd keeps running), as an outage.
    pub fn stop_apiserver(&mut self) {
        if let Some(mut child) = self.apiserver.take() {
            process::stop(&mut child);
        }
    }

    /// Polls `/readyz` until it answers, failing early with the log tail when
    /// either process exits.
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

    /// The log of `component` (`etcd` or `kube-apiserver`).
    pub fn log(&self, component: &str) -> String {
        std::fs::read_to_string(self.dir.path().join(format!("{component}.log")))
            .unwrap_or_default()
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        self.stop_apiserver();
        if let Some(mut etcd) = self.etcd.take() {
            process::stop(&mut etcd);
        }
    }
}
