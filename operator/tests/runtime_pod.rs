//! The Runtime Pod the operator renders, admitted by a real kube-apiserver:
//! its Deployment is applied as the operator applies it, then a Pod is
//! created from the Deployment's template — so the ServiceAccount admission
//! plugin and Pod Security admission (`restricted`) see it — and read back.
//! Only `runtimed` may hold the token or the TLS Secret.

// Test helpers panic on failure: that is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Container, Namespace, Pod, PodSpec, Volume};
use kruntimes_api::{Backend, Runtime, RuntimeSpec};
use kruntimes_kubetest::{ApiServer, ApiServerOptions};
use kruntimes_operator::cluster::FIELD_MANAGER;
use kruntimes_operator::cluster::workloads::runtime::SOCKET_ENV;
use kruntimes_operator::cluster::workloads::runtimed::{TOKEN_DIR, TOKEN_VOLUME};
use kruntimes_operator::cluster::workloads::security::RUNTIME_USER;
use kruntimes_operator::cluster::workloads::{self, PodSettings, SOCKET_PATH};
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::json;

const NAMESPACE: &str = "team-restricted";
const SERVICE_ACCOUNT: &str = "kruntimes-runtime";

fn settings() -> PodSettings {
    PodSettings {
        runtimed_image: "ghcr.io/kruntimes/runtimed:test".into(),
        internal_tls_secret: "kruntimes-runtimed-tls".into(),
        service_account: SERVICE_ACCOUNT.into(),
        system_namespace: "kruntimes-system".into(),
    }
}

async fn create_namespace(client: &kube::Client, name: &str, labels: &[(&str, &str)]) {
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
}

/// Creates the Runtime, applies its rendered Deployment as the operator does
/// (server-side apply, forced) and returns the Deployment as stored.
async fn apply_deployment(client: &kube::Client, rt: Runtime) -> Deployment {
    let rt = Api::<Runtime>::namespaced(client.clone(), NAMESPACE)
        .create(&PostParams::default(), &rt)
        .await
        .unwrap();
    let rendered = workloads::deployment(&rt, &settings());
    let name = rendered.metadata.name.clone().unwrap();
    let mut d = serde_json::to_value(&rendered).unwrap();
    d["apiVersion"] = json!("apps/v1");
    d["kind"] = json!("Deployment");
    Api::<Deployment>::namespaced(client.clone(), NAMESPACE)
        .patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(d),
        )
        .await
        .unwrap()
}

/// What a ReplicaSet would create from `d`'s template.
fn pod_of(d: &Deployment, name: &str) -> Pod {
    let template = d.spec.clone().unwrap().template;
    let mut metadata = template.metadata.unwrap_or_default();
    metadata.name = Some(name.into());
    metadata.namespace = Some(NAMESPACE.into());
    Pod {
        metadata,
        spec: template.spec,
        ..Default::default()
    }
}

fn container<'a>(spec: &'a PodSpec, name: &str) -> &'a Container {
    spec.containers.iter().find(|c| c.name == name).unwrap()
}

/// Whether `v` carries a credential: a Secret, or a ServiceAccount token.
fn holds_credentials(v: &Volume) -> bool {
    v.secret.is_some()
        || v.projected.as_ref().is_some_and(|p| {
            p.sources
                .iter()
                .flatten()
                .any(|s| s.service_account_token.is_some() || s.secret.is_some())
        })
}

/// The checks on a Pod as the API server stored it.
fn assert_only_runtimed_holds_credentials(pod: &Pod) {
    let spec = pod.spec.as_ref().unwrap();
    assert_eq!(spec.automount_service_account_token, Some(false));
    assert_eq!(spec.service_account_name.as_deref(), Some(SERVICE_ACCOUNT));
    let volumes = spec.volumes.as_deref().unwrap();
    // The admission plugin added no `kube-api-access-xxxxx` of its own.
    let credentials: Vec<&str> = volumes
        .iter()
        .filter(|v| holds_credentials(v))
        .map(|v| v.name.as_str())
        .collect();
    assert_eq!(credentials, ["internal-tls", TOKEN_VOLUME], "{volumes:?}");
    for c in spec.containers.iter() {
        let mounts = c.volume_mounts.as_deref().unwrap_or_default();
        let held: Vec<&str> = mounts
            .iter()
            .filter(|m| credentials.contains(&m.name.as_str()) || m.mount_path == TOKEN_DIR)
            .map(|m| m.name.as_str())
            .collect();
        if c.name == "runtimed" {
            assert_eq!(held, ["internal-tls", TOKEN_VOLUME], "{mounts:?}");
        } else {
            assert!(held.is_empty(), "{} mounts {held:?}", c.name);
            assert!(c.env_from.is_none(), "{}", c.name);
            assert!(
                c.env.iter().flatten().all(|e| e.value_from.is_none()),
                "{}",
                c.name
            );
        }
    }
    let runtime = container(spec, "runtime");
    let ctx = runtime.security_context.as_ref().unwrap();
    assert_eq!(ctx.run_as_non_root, Some(true));
    assert_eq!(ctx.run_as_user, Some(RUNTIME_USER));
    assert_eq!(ctx.read_only_root_filesystem, Some(true));
    assert_eq!(ctx.allow_privilege_escalation, Some(false));
    let caps = ctx.capabilities.as_ref().unwrap();
    assert_eq!(caps.drop.as_deref(), Some(&["ALL".to_string()][..]));
    assert_eq!(
        ctx.seccomp_profile.as_ref().unwrap().type_,
        "RuntimeDefault"
    );
    let socket: Vec<&str> = runtime
        .env
        .iter()
        .flatten()
        .filter(|e| e.name == SOCKET_ENV)
        .filter_map(|e| e.value.as_deref())
        .collect();
    assert_eq!(socket, [SOCKET_PATH]);
}

fn runtime(name: &str, backend: Backend) -> Runtime {
    let mut rt = Runtime::new(
        name,
        RuntimeSpec {
            image: format!("registry.example/{name}:1"),
            backend: Some(backend),
            ..Default::default()
        },
    );
    rt.metadata.namespace = Some(NAMESPACE.into());
    rt
}

#[tokio::test]
async fn runtime_pods_are_admitted_as_restricted_with_the_token_in_runtimed_alone() {
    let server = ApiServer::start_with(ApiServerOptions {
        service_account_admission: true,
    })
    .await
    .expect("start the test API server");
    let client = server.client().await.unwrap();
    create_namespace(
        &client,
        NAMESPACE,
        &[
            ("pod-security.kubernetes.io/enforce", "restricted"),
            ("pod-security.kubernetes.io/enforce-version", "latest"),
        ],
    )
    .await;
    server
        .create_service_account(NAMESPACE, SERVICE_ACCOUNT)
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);

    // The built-in Runtime Server, and a custom one whose template adds
    // resources to the runtime container.
    let builtin = apply_deployment(&client, runtime("python", Backend::Python)).await;
    let mut custom = runtime("upper", Backend::Custom);
    custom.spec.template = Some(
        serde_json::from_value(json!({
            "spec": {"containers": [{
                "name": "runtime",
                "resources": {"limits": {"memory": "256Mi"}},
            }]}
        }))
        .unwrap(),
    );
    let custom = apply_deployment(&client, custom).await;

    for (d, name) in [(&builtin, "python-0"), (&custom, "upper-0")] {
        let created = pods
            .create(&PostParams::default(), &pod_of(d, name))
            .await
            .unwrap_or_else(|e| panic!("{name} was not admitted: {e}"));
        let pod = pods.get(name).await.unwrap();
        assert_eq!(pod.metadata.uid, created.metadata.uid);
        assert_only_runtimed_holds_credentials(&pod);
    }
    let spec = pods.get("python-0").await.unwrap().spec.unwrap();
    assert_eq!(
        container(&spec, "runtime").command.as_deref(),
        Some(&["runtime-server".to_string()][..])
    );
    let spec = pods.get("upper-0").await.unwrap().spec.unwrap();
    let runtime = container(&spec, "runtime");
    assert_eq!(runtime.command, None, "the image's own entrypoint");
    let limits = runtime.resources.as_ref().unwrap().limits.as_ref().unwrap();
    assert_eq!(limits["memory"].0, "256Mi");

    // The checks are real: the same Pod without the runtime container's
    // hardening is refused by Pod Security admission…
    let mut weak = pod_of(&builtin, "python-weak");
    let spec = weak.spec.as_mut().unwrap();
    spec.containers[1].security_context = None;
    spec.security_context = None;
    let err = pods
        .create(&PostParams::default(), &weak)
        .await
        .expect_err("a Pod violating restricted was admitted");
    assert!(err.to_string().contains("violates PodSecurity"), "{err}");
    // …one naming a missing ServiceAccount by the ServiceAccount plugin…
    let mut orphan = pod_of(&builtin, "python-orphan");
    orphan.spec.as_mut().unwrap().service_account_name = Some("missing".into());
    let err = pods
        .create(&PostParams::default(), &orphan)
        .await
        .expect_err("a Pod with a missing ServiceAccount was admitted");
    assert!(err.to_string().contains("service account"), "{err}");
    // …and where the token is not turned off, the plugin mounts it into
    // every container (in a namespace without Pod Security enforcement).
    create_namespace(&client, "plain", &[]).await;
    server
        .create_service_account("plain", SERVICE_ACCOUNT)
        .await
        .unwrap();
    let mut automounted = pod_of(&builtin, "python-automounted");
    automounted.metadata.namespace = Some("plain".into());
    automounted
        .spec
        .as_mut()
        .unwrap()
        .automount_service_account_token = None;
    let pod = Api::<Pod>::namespaced(client.clone(), "plain")
        .create(&PostParams::default(), &automounted)
        .await
        .unwrap();
    let spec = pod.spec.unwrap();
    let injected: BTreeMap<&str, bool> =
        spec.containers
            .iter()
            .map(|c| {
                let at_token_dir =
                    c.volume_mounts.iter().flatten().any(|m| {
                        m.name.starts_with("kube-api-access-") && m.mount_path == TOKEN_DIR
                    });
                (c.name.as_str(), at_token_dir)
            })
            .collect();
    assert_eq!(injected.get("runtime"), Some(&true), "{injected:?}");
}
