//! Objects tests create as the cluster admin to decide who may do what:
//! namespaces, Roles and ClusterRoles (from YAML such as `examples/rbac/`),
//! their bindings, ServiceAccounts, and admission policies (the chart's
//! `files/*-policy.yaml`).

use std::path::Path;

use anyhow::Context;
use kube::api::{Api, PostParams};

use crate::server::ApiServer;
use crate::users::{Subject, User};

impl ApiServer {
    /// Creates the `ValidatingAdmissionPolicy` and its binding of a file as
    /// the chart ships them (policy first, binding second). The API server
    /// enforces it a moment later: tests wait until it does.
    pub async fn apply_admission_policy_file(&self, path: &Path) -> anyhow::Result<()> {
        use k8s_openapi::api::admissionregistration::v1::{
            ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
        };
        let text =
            std::fs::read_to_string(path).with_context(|| format!("read {}", path.display()))?;
        let mut docs = serde_yaml::Deserializer::from_str(&text);
        let policy: ValidatingAdmissionPolicy =
            serde::Deserialize::deserialize(docs.next().context("no policy document")?)?;
        let binding: ValidatingAdmissionPolicyBinding =
            serde::Deserialize::deserialize(docs.next().context("no binding document")?)?;
        let client = self.client().await?;
        Api::<ValidatingAdmissionPolicy>::all(client.clone())
            .create(&PostParams::default(), &policy)
            .await?;
        Api::<ValidatingAdmissionPolicyBinding>::all(client)
            .create(&PostParams::default(), &binding)
            .await?;
        Ok(())
    }

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

    /// Creates the ClusterRole of `examples/rbac/FILE` and binds it
    /// cluster-wide to `user` (binding named as the role) — how the tests
    /// grant a component (gateway, operator, runtimed) its rights.
    pub async fn grant_cluster_role(&self, file: &str, user: User) -> anyhow::Result<String> {
        let path = kruntimes_testkit::checkout()
            .join("examples/rbac")
            .join(file);
        let role = self.apply_role_file(None, &path).await?;
        self.bind(None, &role, &role, Subject::User(user)).await?;
        Ok(role)
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
}
