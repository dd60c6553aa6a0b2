//! Installing the committed kruntimes CRDs ([`crate::crd_dir`]) into a test
//! API server and waiting until they are served.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};

use crate::binaries::crd_dir;
use crate::server::ApiServer;

impl ApiServer {
    /// Creates every `*.yaml` CRD of [`crd_dir`] (in name order) and waits
    /// up to 30 s until each is `Established`.
    pub(crate) async fn install_crds(&self) -> anyhow::Result<()> {
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
}
