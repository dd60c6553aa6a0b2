use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{
    Container, EnvVar, PodSecurityContext, PodSpec, ResourceRequirements, SeccompProfile,
    SecretVolumeSource, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kruntimes_api::{Backend, Capacity, RuntimeSpec};

use super::runtime::{SOCKET_ENV, WORK_ROOT_ENV, WORKSPACE_VOLUME};
use super::runtimed::{TLS_VOLUME, TOKEN_DIR, TOKEN_EXPIRATION_SECONDS, TOKEN_VOLUME};
use super::security::{POD_GROUP, RUNTIME_USER, RUNTIMED_USER};
use super::*;

fn rt() -> Runtime {
    runtime_with(Some(Backend::Python))
}

fn runtime_with(backend: Option<Backend>) -> Runtime {
    let mut rt = Runtime::new(
        "python",
        RuntimeSpec {
            replicas: 3,
            capacity: Capacity {
                runs: 4,
                resources: Default::default(),
            },
            image: "ghcr.io/kruntimes/python:1".into(),
            backend,
            ..Default::default()
        },
    );
    rt.metadata.namespace = Some("kruntimes-system".into());
    rt.metadata.uid = Some("rt-uid".into());
    rt
}

fn settings() -> PodSettings {
    PodSettings {
        runtimed_image: "ghcr.io/kruntimes/runtimed:test".into(),
        internal_tls_secret: "kruntimes-internal-tls".into(),
        service_account: "kruntimes-runtime".into(),
        system_namespace: "kruntimes-system".into(),
    }
}

fn pod(rt: &Runtime) -> PodSpec {
    deployment(rt, &settings())
        .spec
        .unwrap()
        .template
        .spec
        .unwrap()
}

fn with_template(spec: PodSpec) -> Runtime {
    let mut r = rt();
    r.spec.template = Some(PodTemplateSpec {
        metadata: None,
        spec: Some(spec),
    });
    r
}

fn container<'a>(pod: &'a PodSpec, name: &str) -> &'a Container {
    pod.containers.iter().find(|c| c.name == name).unwrap()
}

fn mounts(c: &Container) -> BTreeSet<&str> {
    c.volume_mounts
        .iter()
        .flatten()
        .map(|m| m.name.as_str())
        .collect()
}

fn mount_path<'a>(c: &'a Container, volume: &str) -> Option<&'a str> {
    c.volume_mounts
        .iter()
        .flatten()
        .find(|m| m.name == volume)
        .map(|m| m.mount_path.as_str())
}

fn env<'a>(c: &'a Container, name: &str) -> Vec<&'a str> {
    c.env
        .iter()
        .flatten()
        .filter(|e| e.name == name)
        .filter_map(|e| e.value.as_deref())
        .collect()
}

fn volume<'a>(pod: &'a PodSpec, name: &str) -> &'a Volume {
    pod.volumes
        .iter()
        .flatten()
        .find(|v| v.name == name)
        .unwrap()
}

fn user_mount(name: &str, path: &str) -> VolumeMount {
    VolumeMount {
        name: name.into(),
        mount_path: path.into(),
        ..Default::default()
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
    assert_eq!(c.image.as_deref(), Some("ghcr.io/kruntimes/runtimed:test"));
    let args = c.args.as_ref().unwrap();
    assert!(args.contains(&"--kubernetes".to_string()));
    assert!(args.contains(&"--backend=python".to_string()));
    assert!(args.contains(&"--runtime-server=/run/kruntimes/runtime.sock".to_string()));
    let env: Vec<&str> = c.env.iter().flatten().map(|e| e.name.as_str()).collect();
    assert!(env.contains(&"KRUNTIMES_RUNTIMED_POD_UID"));
    let runtime = c
        .env
        .iter()
        .flatten()
        .find(|e| e.name == "KRUNTIMES_RUNTIMED_RUNTIME_NAME")
        .and_then(|e| e.value_from.as_ref()?.field_ref.as_ref())
        .map(|f| f.field_path.as_str());
    assert_eq!(runtime, Some("metadata.labels['kruntimes.io/runtime']"));
    let system = c
        .env
        .iter()
        .flatten()
        .find(|e| e.name == "KRUNTIMES_RUNTIMED_SYSTEM_NAMESPACE")
        .and_then(|e| e.value.as_deref());
    assert_eq!(system, Some("kruntimes-system"));
    assert_eq!(
        c.ports.as_ref().unwrap()[0].name.as_deref(),
        Some("dataplane")
    );
    let labels = spec.template.metadata.unwrap().labels.unwrap();
    assert_eq!(labels[RUNTIME_LABEL], "python");
    let tls = volume(&pod, TLS_VOLUME).secret.as_ref().unwrap();
    assert_eq!(tls.secret_name.as_deref(), Some("kruntimes-internal-tls"));
}

#[test]
fn runtimed_alone_mounts_the_token_and_the_tls_secret() {
    let pod = pod(&rt());
    let runtimed = container(&pod, "runtimed");
    assert_eq!(mount_path(runtimed, TOKEN_VOLUME), Some(TOKEN_DIR));
    assert_eq!(mount_path(runtimed, TLS_VOLUME), Some("/etc/kruntimes/tls"));
    let runtime = container(&pod, "runtime");
    assert!(!mounts(runtime).contains(TOKEN_VOLUME));
    assert!(!mounts(runtime).contains(TLS_VOLUME));
    assert!(
        runtime
            .volume_mounts
            .iter()
            .flatten()
            .all(|m| !m.mount_path.starts_with("/var/run/secrets"))
    );
    assert!(runtime.env_from.is_none());
    assert!(runtime.env.iter().flatten().all(|e| e.value_from.is_none()));
}

#[test]
fn the_token_is_projected_expiring_with_the_cluster_ca_and_namespace() {
    let pod = pod(&rt());
    let projected = volume(&pod, TOKEN_VOLUME).projected.as_ref().unwrap();
    let sources = projected.sources.as_ref().unwrap();
    let token = sources
        .iter()
        .find_map(|s| s.service_account_token.as_ref())
        .unwrap();
    assert_eq!(token.path, "token");
    assert_eq!(token.expiration_seconds, Some(TOKEN_EXPIRATION_SECONDS));
    assert_eq!(token.audience, None, "the API server's own audience");
    let ca = sources.iter().find_map(|s| s.config_map.as_ref()).unwrap();
    assert_eq!(ca.name, "kube-root-ca.crt");
    assert_eq!(ca.items.as_ref().unwrap()[0].path, "ca.crt");
    let ns = sources
        .iter()
        .find_map(|s| s.downward_api.as_ref())
        .unwrap();
    let item = &ns.items.as_ref().unwrap()[0];
    assert_eq!(item.path, "namespace");
    assert_eq!(
        item.field_ref.as_ref().unwrap().field_path,
        "metadata.namespace"
    );
}

#[test]
fn no_token_is_automounted_and_no_process_namespace_shared() {
    let mut template = PodSpec {
        automount_service_account_token: Some(true),
        share_process_namespace: Some(true),
        ..Default::default()
    };
    for pod in [pod(&rt()), pod(&with_template(template.clone()))] {
        assert_eq!(pod.automount_service_account_token, Some(false));
        assert_eq!(pod.share_process_namespace, Some(false));
        assert_eq!(pod.enable_service_links, Some(false));
    }
    template.enable_service_links = Some(true);
    assert_eq!(
        pod(&with_template(template)).enable_service_links,
        Some(true),
        "service links are the template's choice"
    );
}

#[test]
fn built_in_backends_run_runtime_server_on_the_shared_socket() {
    for (backend, flag) in [
        (Some(Backend::Python), Some("--backend=python")),
        (Some(Backend::Bash), Some("--backend=bash")),
        (None, None),
    ] {
        let pod = pod(&runtime_with(backend));
        let runtime = container(&pod, "runtime");
        assert_eq!(runtime.image.as_deref(), Some("ghcr.io/kruntimes/python:1"));
        assert_eq!(runtime.command, Some(vec!["runtime-server".to_string()]));
        assert_eq!(
            runtime.args.as_deref().unwrap(),
            [
                "--socket",
                "/run/kruntimes/runtime.sock",
                "--work-root",
                "/workspace",
                "--socket-mode",
                "660"
            ]
        );
        assert_eq!(env(runtime, SOCKET_ENV), [SOCKET_PATH]);
        let args = container(&pod, "runtimed").args.clone().unwrap();
        let backends: Vec<&String> = args.iter().filter(|a| a.starts_with("--backend")).collect();
        assert_eq!(backends.first().map(|a| a.as_str()), flag, "{backend:?}");
    }
}

#[test]
fn custom_backend_runs_the_image_entrypoint_with_the_socket_in_env() {
    let pod = pod(&runtime_with(Some(Backend::Custom)));
    let runtime = container(&pod, "runtime");
    assert_eq!(runtime.image.as_deref(), Some("ghcr.io/kruntimes/python:1"));
    assert_eq!(runtime.command, None);
    assert_eq!(runtime.args, None);
    assert_eq!(env(runtime, SOCKET_ENV), ["/run/kruntimes/runtime.sock"]);
    assert_eq!(env(runtime, WORK_ROOT_ENV), ["/workspace"]);
    let args = container(&pod, "runtimed").args.clone().unwrap();
    assert!(args.iter().all(|a| !a.starts_with("--backend")), "{args:?}");
    assert!(args.contains(&format!("--runtime-server={SOCKET_PATH}")));
}

#[test]
fn custom_backend_keeps_a_template_command() {
    let mut r = with_template(PodSpec {
        containers: vec![Container {
            name: "runtime".into(),
            command: Some(vec!["python".into(), "/app/server.py".into()]),
            args: Some(vec!["--verbose".into()]),
            ..Default::default()
        }],
        ..Default::default()
    });
    r.spec.backend = Some(Backend::Custom);
    let pod = pod(&r);
    let runtime = container(&pod, "runtime");
    assert_eq!(
        runtime.command.as_deref().unwrap(),
        ["python", "/app/server.py"]
    );
    assert_eq!(runtime.args.as_deref().unwrap(), ["--verbose"]);
}

#[test]
fn both_containers_pass_the_restricted_standard_as_distinct_users() {
    let pod = pod(&rt());
    for (name, user) in [("runtimed", RUNTIMED_USER), ("runtime", RUNTIME_USER)] {
        let ctx = container(&pod, name).security_context.clone().unwrap();
        assert_eq!(ctx.run_as_non_root, Some(true), "{name}");
        assert_eq!(ctx.run_as_user, Some(user), "{name}");
        assert_eq!(ctx.run_as_group, Some(POD_GROUP), "{name}");
        assert_eq!(ctx.read_only_root_filesystem, Some(true), "{name}");
        assert_eq!(ctx.allow_privilege_escalation, Some(false), "{name}");
        assert_eq!(ctx.privileged, Some(false), "{name}");
        let caps = ctx.capabilities.unwrap();
        assert_eq!(caps.drop, Some(vec!["ALL".to_string()]), "{name}");
        assert_eq!(caps.add, None, "{name}");
        assert_eq!(ctx.seccomp_profile.unwrap().type_, "RuntimeDefault");
    }
    assert_ne!(RUNTIMED_USER, RUNTIME_USER);
    let ctx = pod.security_context.unwrap();
    assert_eq!(ctx.run_as_non_root, Some(true));
    assert_eq!(ctx.fs_group, Some(POD_GROUP));
    assert_eq!(ctx.seccomp_profile.unwrap().type_, "RuntimeDefault");
}

#[test]
fn the_socket_directory_is_the_only_volume_both_containers_mount() {
    let pod = pod(&rt());
    let runtimed = mounts(container(&pod, "runtimed"));
    let runtime = mounts(container(&pod, "runtime"));
    let shared: Vec<&&str> = runtimed.intersection(&runtime).collect();
    assert_eq!(shared, [&SOCKET_VOLUME]);
    for name in ["runtimed", "runtime"] {
        assert_eq!(
            mount_path(container(&pod, name), SOCKET_VOLUME),
            Some(SOCKET_DIR)
        );
    }
    assert!(volume(&pod, SOCKET_VOLUME).empty_dir.is_some());
}

#[test]
fn the_runtime_container_writes_only_its_workspace_tmp_and_socket() {
    let pod = pod(&rt());
    let runtime = container(&pod, "runtime");
    let paths: BTreeSet<&str> = runtime
        .volume_mounts
        .iter()
        .flatten()
        .map(|m| m.mount_path.as_str())
        .collect();
    assert_eq!(
        paths,
        BTreeSet::from(["/workspace", "/tmp", "/run/kruntimes"])
    );
    assert!(volume(&pod, WORKSPACE_VOLUME).empty_dir.is_some());
    let runtimed = container(&pod, "runtimed");
    assert_eq!(mount_path(runtimed, "runtimed-tmp"), Some("/tmp"));
}

#[test]
fn a_template_runtime_container_is_patched_not_replaced() {
    let resources = ResourceRequirements {
        limits: Some(BTreeMap::from([(
            "memory".to_string(),
            Quantity("1Gi".into()),
        )])),
        ..Default::default()
    };
    let r = with_template(PodSpec {
        containers: vec![Container {
            name: "runtime".into(),
            image: Some("ignored:1".into()),
            command: Some(vec!["sh".into()]),
            resources: Some(resources.clone()),
            env: Some(vec![
                EnvVar {
                    name: "MODEL".into(),
                    value: Some("small".into()),
                    ..Default::default()
                },
                EnvVar {
                    name: SOCKET_ENV.into(),
                    value: Some("/elsewhere.sock".into()),
                    ..Default::default()
                },
            ]),
            volume_mounts: Some(vec![
                user_mount("models", "/models"),
                user_mount("scratch", "/tmp"),
            ]),
            security_context: Some(Default::default()),
            ..Default::default()
        }],
        ..Default::default()
    });
    let pod = pod(&r);
    let runtime = container(&pod, "runtime");
    assert_eq!(runtime.resources.as_ref(), Some(&resources));
    assert_eq!(env(runtime, "MODEL"), ["small"]);
    assert_eq!(env(runtime, SOCKET_ENV), [SOCKET_PATH]);
    assert_eq!(runtime.image.as_deref(), Some("ghcr.io/kruntimes/python:1"));
    assert_eq!(runtime.command, Some(vec!["runtime-server".to_string()]));
    assert_eq!(mount_path(runtime, "models"), Some("/models"));
    assert_eq!(
        mount_path(runtime, "scratch"),
        None,
        "/tmp is the operator's"
    );
    let ctx = runtime.security_context.as_ref().unwrap();
    assert_eq!(ctx.run_as_user, Some(RUNTIME_USER));
    assert_eq!(ctx.read_only_root_filesystem, Some(true));
    let names: Vec<&str> = pod.containers.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["runtimed", "runtime"]);
}

#[test]
fn a_template_runtimed_container_is_replaced_and_other_containers_kept() {
    let mut r = rt();
    r.spec.template = Some(PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(BTreeMap::from([("team".into(), "ml".into())])),
            ..Default::default()
        }),
        spec: Some(PodSpec {
            containers: vec![
                Container {
                    name: "log-shipper".into(),
                    image: Some("shipper:1".into()),
                    ..Default::default()
                },
                Container {
                    name: "runtimed".into(),
                    image: Some("user-override".into()),
                    ..Default::default()
                },
            ],
            ..Default::default()
        }),
    });
    let d = deployment(&r, &settings());
    let t = d.spec.unwrap().template;
    assert_eq!(t.metadata.unwrap().labels.unwrap()["team"], "ml");
    let pod = t.spec.unwrap();
    let names: Vec<&str> = pod.containers.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["runtimed", "runtime", "log-shipper"]);
    assert_eq!(
        container(&pod, "runtimed").image.as_deref(),
        Some("ghcr.io/kruntimes/runtimed:test")
    );
}

#[test]
fn no_template_container_may_mount_runtimeds_volumes() {
    let sneaky = || {
        Some(vec![
            user_mount(TLS_VOLUME, "/tls"),
            user_mount(TOKEN_VOLUME, "/token"),
            user_mount("cache", "/cache"),
        ])
    };
    let r = with_template(PodSpec {
        containers: vec![
            Container {
                name: "runtime".into(),
                volume_mounts: sneaky(),
                ..Default::default()
            },
            Container {
                name: "sidecar".into(),
                volume_mounts: sneaky(),
                ..Default::default()
            },
        ],
        init_containers: Some(vec![Container {
            name: "init".into(),
            volume_mounts: sneaky(),
            ..Default::default()
        }]),
        ..Default::default()
    });
    let pod = pod(&r);
    let init = &pod.init_containers.as_ref().unwrap()[0];
    for c in [container(&pod, "runtime"), container(&pod, "sidecar"), init] {
        assert!(!mounts(c).contains(TLS_VOLUME), "{}", c.name);
        assert!(!mounts(c).contains(TOKEN_VOLUME), "{}", c.name);
        assert!(mounts(c).contains("cache"), "{}", c.name);
    }
}

#[test]
fn template_volumes_named_like_the_operators_are_replaced_but_workspace_is_kept() {
    let secret = |name: &str| Volume {
        name: name.into(),
        secret: Some(SecretVolumeSource {
            secret_name: Some("user-secret".into()),
            ..Default::default()
        }),
        ..Default::default()
    };
    let r = with_template(PodSpec {
        volumes: Some(vec![
            secret(TLS_VOLUME),
            secret(SOCKET_VOLUME),
            Volume {
                name: WORKSPACE_VOLUME.into(),
                empty_dir: Some(k8s_openapi::api::core::v1::EmptyDirVolumeSource {
                    size_limit: Some(Quantity("2Gi".into())),
                    ..Default::default()
                }),
                ..Default::default()
            },
        ]),
        ..Default::default()
    });
    let pod = pod(&r);
    let tls = volume(&pod, TLS_VOLUME).secret.as_ref().unwrap();
    assert_eq!(tls.secret_name.as_deref(), Some("kruntimes-internal-tls"));
    assert!(volume(&pod, SOCKET_VOLUME).secret.is_none());
    let workspace = volume(&pod, WORKSPACE_VOLUME).empty_dir.as_ref().unwrap();
    assert_eq!(workspace.size_limit, Some(Quantity("2Gi".into())));
    let names: Vec<&str> = pod
        .volumes
        .iter()
        .flatten()
        .map(|v| v.name.as_str())
        .collect();
    let unique: BTreeSet<&str> = names.iter().copied().collect();
    assert_eq!(names.len(), unique.len(), "{names:?}");
}

#[test]
fn the_template_pod_security_context_is_kept_under_the_enforced_fields() {
    let r = with_template(PodSpec {
        security_context: Some(PodSecurityContext {
            run_as_non_root: Some(false),
            fs_group: Some(0),
            supplemental_groups: Some(vec![2000]),
            seccomp_profile: Some(SeccompProfile {
                type_: "Localhost".into(),
                localhost_profile: Some("profiles/runtime.json".into()),
            }),
            ..Default::default()
        }),
        ..Default::default()
    });
    let ctx = pod(&r).security_context.unwrap();
    assert_eq!(ctx.run_as_non_root, Some(true));
    assert_eq!(ctx.fs_group, Some(POD_GROUP));
    assert_eq!(ctx.supplemental_groups, Some(vec![2000]));
    assert_eq!(ctx.seccomp_profile.unwrap().type_, "Localhost");
}

#[test]
fn service_is_headless_over_the_runtime_pods() {
    let s = service(&rt()).spec.unwrap();
    assert_eq!(s.cluster_ip.as_deref(), Some("None"));
    assert_eq!(s.selector.unwrap()[RUNTIME_LABEL], "python");
}

#[test]
fn the_runtime_container_gets_its_resources_from_the_capacity_unless_the_template_sets_them() {
    use k8s_openapi::api::core::v1::{Container, ResourceRequirements};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    let q = |s: &str| Quantity(s.into());
    let mut r = rt();
    r.spec.capacity.resources = [
        ("cpu".to_owned(), q("2")),
        ("memory".to_owned(), q("4Gi")),
        ("example.com/gpu".to_owned(), q("1")),
    ]
    .into();
    let runtime = |spec: PodSpec| {
        spec.containers
            .into_iter()
            .find(|c| c.name == "runtime")
            .unwrap()
            .resources
            .unwrap_or_default()
    };
    let res = runtime(pod(&r));
    for m in [res.limits.unwrap(), res.requests.unwrap()] {
        assert_eq!(m.get("cpu"), Some(&q("2")));
        assert_eq!(m.get("memory"), Some(&q("4Gi")));
        assert!(
            !m.contains_key("example.com/gpu"),
            "extended names are the template's"
        );
    }
    // The template's own figure for a name wins; the others are derived.
    r.spec.template = Some(PodTemplateSpec {
        metadata: None,
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "runtime".into(),
                resources: Some(ResourceRequirements {
                    limits: Some([("memory".to_owned(), q("8Gi"))].into()),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        }),
    });
    let res = runtime(pod(&r));
    assert_eq!(res.limits.as_ref().unwrap().get("memory"), Some(&q("8Gi")));
    assert_eq!(res.requests.as_ref().unwrap().get("memory"), None);
    assert_eq!(res.limits.unwrap().get("cpu"), Some(&q("2")));
    // No declared resources: nothing derived.
    assert!(runtime(pod(&rt())).limits.is_none());
}

#[test]
fn the_artifact_store_and_its_credentials_reach_runtimed_alone() {
    let mut r = rt();
    r.spec.artifact_store = Some(kruntimes_api::ArtifactStoreSpec {
        endpoint: Some("http://minio.storage:9000".into()),
        bucket: "artifacts".into(),
        prefix: Some("team-a".into()),
        credentials_secret: Some(kruntimes_api::CredentialsSecret {
            name: "s3-keys".into(),
            secret_access_key_key: Some("secret".into()),
            ..Default::default()
        }),
        retain_after_run_seconds: Some(3600),
        ..Default::default()
    });
    let pod = pod(&r);
    let env = |name: &str| {
        container(&pod, name)
            .env
            .clone()
            .unwrap_or_default()
            .into_iter()
            .map(|e| (e.name.clone(), e))
            .collect::<BTreeMap<_, _>>()
    };
    let runtimed = env("runtimed");
    let store = runtimed["KRUNTIMES_RUNTIMED_ARTIFACT_STORE"]
        .value
        .clone()
        .unwrap();
    assert_eq!(
        kruntimes_artifacts::StoreConfig::parse(&store).unwrap(),
        kruntimes_artifacts::StoreConfig::S3(kruntimes_artifacts::S3Config {
            endpoint: Some("http://minio.storage:9000".into()),
            bucket: "artifacts".into(),
            prefix: Some("team-a".into()),
            ..Default::default()
        })
    );
    for (var, key) in [
        ("KRUNTIMES_ARTIFACT_ACCESS_KEY_ID", "accessKeyId"),
        ("KRUNTIMES_ARTIFACT_SECRET_ACCESS_KEY", "secret"),
    ] {
        let sel = runtimed[var]
            .value_from
            .as_ref()
            .and_then(|v| v.secret_key_ref.clone())
            .unwrap();
        assert_eq!((sel.name.as_str(), sel.key.as_str()), ("s3-keys", key));
        assert!(runtimed[var].value.is_none(), "never inline");
    }
    assert_eq!(
        runtimed["KRUNTIMES_RUNTIMED_ARTIFACT_RETAIN_SECS"]
            .value
            .as_deref(),
        Some("3600")
    );
    let runtime = env("runtime");
    assert!(
        runtime.keys().all(|k| !k.contains("ARTIFACT")),
        "{:?}",
        runtime.keys()
    );
    assert!(
        container(&pod, "runtime").env_from.is_none(),
        "nothing imported wholesale"
    );
    // Without a store: no variable at all.
    assert!(
        env_of(&pod_of_rt()).iter().all(|k| !k.contains("ARTIFACT")),
        "a Runtime without a store"
    );
}

fn pod_of_rt() -> PodSpec {
    pod(&rt())
}

fn env_of(pod: &PodSpec) -> Vec<String> {
    container(pod, "runtimed")
        .env
        .iter()
        .flatten()
        .map(|e| e.name.clone())
        .collect()
}
