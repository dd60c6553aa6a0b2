//! How tests reach a test API server: kubeconfig documents and files per
//! [`User`], kube clients, and a raw HTTPS client for endpoints such as
//! `/metrics`.

use std::path::PathBuf;
use std::time::Duration;

use base64::Engine as _;
use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::server::ApiServer;
use crate::users::User;

impl ApiServer {
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
}
