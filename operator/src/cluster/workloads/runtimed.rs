//! The `runtimed` container of a Runtime Pod — the trusted agent — and the
//! volumes only it mounts: the internal TLS Secret, the ServiceAccount token
//! (projected here and nowhere else), its work directory and `/tmp`.

use k8s_openapi::api::core::v1::{
    ConfigMapProjection, Container, ContainerPort, DownwardAPIProjection, DownwardAPIVolumeFile,
    EnvVar, EnvVarSource, KeyToPath, ObjectFieldSelector, Probe, ProjectedVolumeSource,
    SecretKeySelector, SecretVolumeSource, ServiceAccountTokenProjection, TCPSocketAction, Volume,
    VolumeProjection,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kruntimes_api::{Backend, Runtime};

use super::parts::{empty_dir, env, field_env, mount};
use super::{
    DATAPLANE_PORT, DATAPLANE_PORT_NAME, PodSettings, RUNTIMED_CONTAINER, SOCKET_DIR, SOCKET_PATH,
    SOCKET_VOLUME, security,
};

/// Where the ServiceAccount token, the cluster CA and the namespace are
/// mounted in `runtimed` (the in-cluster configuration's well-known path).
pub const TOKEN_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// Lifetime of the projected token. The kubelet renews it at 80 % of this;
/// not 3607 s, which API servers extend to a year for legacy clients.
pub const TOKEN_EXPIRATION_SECONDS: i64 = 3600;
/// Volume of the projected ServiceAccount token.
pub const TOKEN_VOLUME: &str = "kube-api-access";
/// Volume of the internal TLS Secret.
pub const TLS_VOLUME: &str = "internal-tls";
const TLS_DIR: &str = "/etc/kruntimes/tls";
const WORK_VOLUME: &str = "work";
const WORK_DIR: &str = "/var/lib/kruntimes";
const TMP_VOLUME: &str = "runtimed-tmp";

/// Names of the volumes only `runtimed` may mount.
pub(super) const VOLUMES: [&str; 4] = [TLS_VOLUME, TOKEN_VOLUME, WORK_VOLUME, TMP_VOLUME];

/// The `runtimed` container: `--kubernetes`, the backend of
/// `Runtime.spec.backend`, the dataplane on 7443 with the internal TLS
/// material, and the Runtime Server's socket.
pub(super) fn container(rt: &Runtime, s: &PodSettings) -> Container {
    let mut args: Vec<String> = vec!["--kubernetes".into()];
    match rt.spec.backend {
        Some(Backend::Python) => args.push("--backend=python".into()),
        Some(Backend::Bash) => args.push("--backend=bash".into()),
        // runtimed hands every Run to the Runtime Server by its runtime
        // name (a custom server, or the built-in one choosing by name).
        Some(Backend::Custom) | None => {}
    }
    args.extend([
        "--listen=0.0.0.0:7443".into(),
        "--advertise=$(POD_IP):7443".into(),
        format!("--tls-cert={TLS_DIR}/tls.crt"),
        format!("--tls-key={TLS_DIR}/tls.key"),
        format!("--client-ca={TLS_DIR}/ca.crt"),
        format!("--work-root={WORK_DIR}"),
        format!("--runtime-server={SOCKET_PATH}"),
    ]);
    Container {
        name: RUNTIMED_CONTAINER.into(),
        image: Some(s.runtimed_image.clone()),
        args: Some(args),
        env: Some(
            [
                field_env("KRUNTIMES_RUNTIMED_NAME", "metadata.name"),
                field_env("KRUNTIMES_RUNTIMED_POD_UID", "metadata.uid"),
                field_env("KRUNTIMES_RUNTIMED_POD_NAMESPACE", "metadata.namespace"),
                // The Runtime whose Pods elect one to sweep the artifact store.
                field_env(
                    "KRUNTIMES_RUNTIMED_RUNTIME_NAME",
                    &format!("metadata.labels['{}']", kruntimes_api::RUNTIME_LABEL),
                ),
                env("KRUNTIMES_RUNTIMED_SYSTEM_NAMESPACE", &s.system_namespace),
                field_env("POD_IP", "status.podIP"),
            ]
            .into_iter()
            .chain(artifact_store_env(rt))
            .collect(),
        ),
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
            mount(TLS_VOLUME, TLS_DIR, true),
            mount(TOKEN_VOLUME, TOKEN_DIR, true),
            mount(WORK_VOLUME, WORK_DIR, false),
            mount(TMP_VOLUME, "/tmp", false),
            mount(SOCKET_VOLUME, SOCKET_DIR, false),
        ]),
        security_context: Some(security::container(security::RUNTIMED_USER)),
        ..Default::default()
    }
}

/// `spec.artifactStore` for runtimed alone: the bucket as JSON, the
/// credentials from their Secret (read by the kubelet into this container's
/// environment; the `runtime` container never gets them).
fn artifact_store_env(rt: &Runtime) -> Vec<EnvVar> {
    let Some(spec) = &rt.spec.artifact_store else {
        return Vec::new();
    };
    let store = kruntimes_artifacts::StoreConfig::S3(kruntimes_artifacts::S3Config::of(spec));
    let mut v = vec![env(kruntimes_artifacts::STORE_ENV, &store.to_json())];
    if let Some(secs) = spec.retain_after_run_seconds {
        v.push(env(
            "KRUNTIMES_RUNTIMED_ARTIFACT_RETAIN_SECS",
            &secs.to_string(),
        ));
    }
    if let Some(secret) = &spec.credentials_secret {
        for (name, key) in [
            (
                kruntimes_artifacts::ACCESS_KEY_ID_ENV,
                secret.access_key_id_key(),
            ),
            (
                kruntimes_artifacts::SECRET_ACCESS_KEY_ENV,
                secret.secret_access_key_key(),
            ),
        ] {
            v.push(EnvVar {
                name: name.into(),
                value_from: Some(EnvVarSource {
                    secret_key_ref: Some(SecretKeySelector {
                        name: secret.name.clone(),
                        key: key.into(),
                        optional: Some(false),
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            });
        }
    }
    v
}

/// The volumes only `runtimed` mounts.
pub(super) fn volumes(s: &PodSettings) -> Vec<Volume> {
    vec![
        Volume {
            name: TLS_VOLUME.into(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(s.internal_tls_secret.clone()),
                ..Default::default()
            }),
            ..Default::default()
        },
        token_volume(),
        empty_dir(WORK_VOLUME),
        empty_dir(TMP_VOLUME),
    ]
}

/// What the ServiceAccount admission plugin would mount into every
/// container, projected for `runtimed` alone: a bound, expiring token, the
/// cluster CA (`kube-root-ca.crt`) and the namespace.
fn token_volume() -> Volume {
    Volume {
        name: TOKEN_VOLUME.into(),
        projected: Some(ProjectedVolumeSource {
            default_mode: Some(0o444),
            sources: Some(vec![
                VolumeProjection {
                    service_account_token: Some(ServiceAccountTokenProjection {
                        path: "token".into(),
                        expiration_seconds: Some(TOKEN_EXPIRATION_SECONDS),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                VolumeProjection {
                    config_map: Some(ConfigMapProjection {
                        name: "kube-root-ca.crt".into(),
                        items: Some(vec![KeyToPath {
                            key: "ca.crt".into(),
                            path: "ca.crt".into(),
                            ..Default::default()
                        }]),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                VolumeProjection {
                    downward_api: Some(DownwardAPIProjection {
                        items: Some(vec![DownwardAPIVolumeFile {
                            path: "namespace".into(),
                            field_ref: Some(ObjectFieldSelector {
                                api_version: Some("v1".into()),
                                field_path: "metadata.namespace".into(),
                            }),
                            ..Default::default()
                        }]),
                    }),
                    ..Default::default()
                },
            ]),
        }),
        ..Default::default()
    }
}
