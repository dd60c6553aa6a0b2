//! What the operator renders for a Runtime, as pure functions: the
//! Deployment that keeps its Pods warm and the headless Service naming them.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, EnvVar, EnvVarSource, ObjectFieldSelector, PodSpec, PodTemplateSpec,
    Probe, SecretVolumeSource, Service, ServicePort, ServiceSpec, TCPSocketAction, Volume,
    VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kruntimes_api::{Backend, RUNTIME_LABEL, Runtime};
use kube::{Resource, ResourceExt};

/// Name of the dataplane container port.
pub const DATAPLANE_PORT_NAME: &str = "dataplane";
/// Default dataplane port.
pub const DATAPLANE_PORT: i32 = 7443;

/// How Runtime Pods are built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodSettings {
    /// Secret with `tls.crt`, `tls.key` and `ca.crt` of the internal CA,
    /// mounted into runtimed.
    pub internal_tls_secret: String,
    /// ServiceAccount Runtime Pods run as (runtimed watches its Runs).
    pub service_account: String,
}

fn labels(rt: &Runtime) -> BTreeMap<String, String> {
    BTreeMap::from([
        (
            "app.kubernetes.io/name".to_string(),
            "kruntimes-runtime".to_string(),
        ),
        (
            "app.kubernetes.io/managed-by".to_string(),
            "kruntimes-operator".to_string(),
        ),
        (RUNTIME_LABEL.to_string(), rt.name_any()),
    ])
}

fn owner_ref(rt: &Runtime) -> Vec<OwnerReference> {
    rt.controller_owner_ref(&()).into_iter().collect()
}

fn field_env(name: &str, path: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: path.into(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The Deployment keeping a Runtime's Pods warm.
pub fn deployment(rt: &Runtime, s: &PodSettings) -> Deployment {
    let labels = labels(rt);
    let mut template = rt.spec.template.clone().unwrap_or_default();
    let meta = template.metadata.get_or_insert_with(ObjectMeta::default);
    meta.labels
        .get_or_insert_with(BTreeMap::new)
        .extend(labels.clone());
    let spec = template.spec.get_or_insert_with(PodSpec::default);
    if spec.service_account_name.is_none() {
        spec.service_account_name = Some(s.service_account.clone());
    }
    let mut args: Vec<String> = vec!["--kubernetes".into()];
    match rt.spec.backend {
        Some(Backend::Python) => args.push("--backend=python".into()),
        Some(Backend::Bash) => args.push("--backend=bash".into()),
        // By the Run's runtime name; custom Runtime Servers are not wired yet.
        Some(Backend::Custom) | None => {}
    }
    let runtimed = Container {
        name: "runtimed".into(),
        image: Some(rt.spec.image.clone()),
        args: Some(
            args.into_iter()
                .chain([
                    "--listen=0.0.0.0:7443".into(),
                    "--advertise=$(POD_IP):7443".into(),
                    "--tls-cert=/etc/kruntimes/tls/tls.crt".into(),
                    "--tls-key=/etc/kruntimes/tls/tls.key".into(),
                    "--client-ca=/etc/kruntimes/tls/ca.crt".into(),
                    "--work-root=/var/lib/kruntimes".into(),
                ])
                .collect(),
        ),
        env: Some(vec![
            field_env("KRUNTIMES_RUNTIMED_NAME", "metadata.name"),
            field_env("KRUNTIMES_RUNTIMED_POD_UID", "metadata.uid"),
            field_env("KRUNTIMES_RUNTIMED_POD_NAMESPACE", "metadata.namespace"),
            field_env("POD_IP", "status.podIP"),
        ]),
        ports: Some(vec![ContainerPort {
            name: Some(DATAPLANE_PORT_NAME.into()),
            container_port: DATAPLANE_PORT,
            protocol: Some("TCP".into()),
            ..Default::default()
        }]),
        readiness_probe: Some(Probe {
            tcp_socket: Some(TCPSocketAction {
                port: IntOrString::String(DATAPLANE_PORT_NAME.into()),
                ..Default::default()
            }),
            period_seconds: Some(2),
            ..Default::default()
        }),
        volume_mounts: Some(vec![
            VolumeMount {
                name: "internal-tls".into(),
                mount_path: "/etc/kruntimes/tls".into(),
                read_only: Some(true),
                ..Default::default()
            },
            VolumeMount {
                name: "work".into(),
                mount_path: "/var/lib/kruntimes".into(),
                ..Default::default()
            },
        ]),
        ..Default::default()
    };
    // runtimed replaces a container of the same name in the template.
    spec.containers.retain(|c| c.name != "runtimed");
    spec.containers.insert(0, runtimed);
    let volumes = spec.volumes.get_or_insert_with(Vec::new);
    volumes.retain(|v| v.name != "internal-tls" && v.name != "work");
    volumes.push(Volume {
        name: "internal-tls".into(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(s.internal_tls_secret.clone()),
            ..Default::default()
        }),
        ..Default::default()
    });
    volumes.push(Volume {
        name: "work".into(),
        empty_dir: Some(Default::default()),
        ..Default::default()
    });
    Deployment {
        metadata: ObjectMeta {
            name: Some(format!("runtime-{}", rt.name_any())),
            namespace: rt.namespace(),
            labels: Some(labels.clone()),
            owner_references: Some(owner_ref(rt)),
            ..Default::default()
        },
        spec: Some(DeploymentSpec {
            replicas: Some(rt.spec.replicas),
            selector: LabelSelector {
                match_labels: Some(BTreeMap::from([(RUNTIME_LABEL.to_string(), rt.name_any())])),
                ..Default::default()
            },
            template: PodTemplateSpec {
                metadata: template.metadata,
                spec: template.spec,
            },
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The headless Service naming a Runtime's Pods.
pub fn service(rt: &Runtime) -> Service {
    Service {
        metadata: ObjectMeta {
            name: Some(format!("runtime-{}", rt.name_any())),
            namespace: rt.namespace(),
            labels: Some(labels(rt)),
            owner_references: Some(owner_ref(rt)),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".into()),
            selector: Some(BTreeMap::from([(RUNTIME_LABEL.to_string(), rt.name_any())])),
            ports: Some(vec![ServicePort {
                name: Some(DATAPLANE_PORT_NAME.into()),
                port: DATAPLANE_PORT,
                target_port: Some(IntOrString::String(DATAPLANE_PORT_NAME.into())),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kruntimes_api::{Capacity, RuntimeSpec};

    fn rt() -> Runtime {
        let mut rt = Runtime::new(
            "python",
            RuntimeSpec {
                replicas: 3,
                capacity: Capacity { runs: 4 },
                image: "ghcr.io/kruntimes/python:1".into(),
                backend: Some(Backend::Python),
                ..Default::default()
            },
        );
        rt.metadata.namespace = Some("kruntimes-system".into());
        rt.metadata.uid = Some("rt-uid".into());
        rt
    }

    fn settings() -> PodSettings {
        PodSettings {
            internal_tls_secret: "kruntimes-internal-tls".into(),
            service_account: "kruntimes-runtime".into(),
        }
    }

    #[test]
    fn deployment_runs_runtimed_with_downward_identity_and_internal_tls() {
        let d = deployment(&rt(), &settings());
        assert_eq!(d.metadata.name.as_deref(), Some("runtime-python"));
        let owner = &d.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(owner.kind, "Runtime");
        assert_eq!(owner.controller, Some(true));
        let spec = d.spec.unwrap();
        assert_eq!(spec.replicas, Some(3));
        let pod = spec.template.spec.unwrap();
        assert_eq!(
            pod.service_account_name.as_deref(),
            Some("kruntimes-runtime")
        );
        let c = &pod.containers[0];
        assert_eq!(c.name, "runtimed");
        assert!(
            c.args
                .as_ref()
                .unwrap()
                .contains(&"--kubernetes".to_string())
        );
        let env: Vec<&str> = c
            .env
            .as_ref()
            .unwrap()
            .iter()
            .map(|e| e.name.as_str())
            .collect();
        assert!(env.contains(&"KRUNTIMES_RUNTIMED_POD_UID"));
        assert_eq!(
            c.ports.as_ref().unwrap()[0].name.as_deref(),
            Some("dataplane")
        );
        let labels = spec.template.metadata.unwrap().labels.unwrap();
        assert_eq!(labels[RUNTIME_LABEL], "python");
        assert!(pod.volumes.unwrap().iter().any(|v| {
            v.secret
                .as_ref()
                .is_some_and(|s| s.secret_name.as_deref() == Some("kruntimes-internal-tls"))
        }));
    }

    #[test]
    fn template_overrides_are_kept_and_runtimed_is_not_duplicated() {
        let mut r = rt();
        r.spec.template = Some(PodTemplateSpec {
            metadata: Some(ObjectMeta {
                labels: Some(BTreeMap::from([("team".into(), "ml".into())])),
                ..Default::default()
            }),
            spec: Some(PodSpec {
                containers: vec![
                    Container {
                        name: "runtimed".into(),
                        image: Some("user-override".into()),
                        ..Default::default()
                    },
                    Container {
                        name: "runtime-server".into(),
                        image: Some("custom:1".into()),
                        ..Default::default()
                    },
                ],
                ..Default::default()
            }),
        });
        let d = deployment(&r, &settings());
        let t = d.spec.unwrap().template;
        assert_eq!(t.metadata.unwrap().labels.unwrap()["team"], "ml");
        let names: Vec<String> = t
            .spec
            .unwrap()
            .containers
            .into_iter()
            .map(|c| c.name)
            .collect();
        assert_eq!(names, vec!["runtimed", "runtime-server"]);
    }

    #[test]
    fn service_is_headless_over_the_runtime_pods() {
        let s = service(&rt()).spec.unwrap();
        assert_eq!(s.cluster_ip.as_deref(), Some("None"));
        assert_eq!(s.selector.unwrap()[RUNTIME_LABEL], "python");
    }
}
