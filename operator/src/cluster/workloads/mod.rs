//! What the operator renders for a Runtime, as pure functions: the
//! Deployment that keeps its Pods warm and the headless Service naming them.
//!
//! A Runtime Pod has two containers that share nothing but an `emptyDir`
//! holding the Runtime Server's socket: [`runtimed`] (the trusted agent,
//! with the ServiceAccount token and the internal TLS key) and [`runtime`]
//! (the Runtime Server running user code, with neither). [`security`] holds
//! the users and contexts that make the Pod pass the `restricted` Pod
//! Security Standard; [`parts`] the small builders both use.

mod parts;
pub mod runtime;
pub mod runtimed;
pub mod security;

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    PodSpec, PodTemplateSpec, Service, ServicePort, ServiceSpec, Volume,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kruntimes_api::{RUNTIME_LABEL, Runtime};
use kube::{Resource, ResourceExt};

/// Name of the dataplane container port.
pub const DATAPLANE_PORT_NAME: &str = "dataplane";
/// Default dataplane port.
pub const DATAPLANE_PORT: i32 = 7443;
/// Name of the agent's container.
pub const RUNTIMED_CONTAINER: &str = "runtimed";
/// Name of the Runtime Server's container.
pub const RUNTIME_CONTAINER: &str = "runtime";
/// The directory, shared by both containers, holding the socket.
pub const SOCKET_DIR: &str = "/run/kruntimes";
/// The Runtime Server's socket: it listens, runtimed connects.
pub const SOCKET_PATH: &str = "/run/kruntimes/runtime.sock";
/// The one volume both containers mount.
pub const SOCKET_VOLUME: &str = "runtime-socket";
/// Default of `--runtimed-image`: runtimed of the operator's own version.
pub const DEFAULT_RUNTIMED_IMAGE: &str =
    concat!("ghcr.io/kruntimes/runtimed:", env!("CARGO_PKG_VERSION"));

/// How Runtime Pods are built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodSettings {
    /// Image of the `runtimed` container (its entrypoint is not used: the
    /// operator passes only arguments, so it must be `runtimed`).
    pub runtimed_image: String,
    /// Secret with `tls.crt`, `tls.key` and `ca.crt` of the internal CA,
    /// mounted into runtimed.
    pub internal_tls_secret: String,
    /// ServiceAccount Runtime Pods run as (runtimed watches its Runs).
    pub service_account: String,
    /// The operator's system namespace, passed to runtimed (whose Runtimes
    /// serve the namespaces without one of the name).
    pub system_namespace: String,
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

/// The Deployment keeping a Runtime's Pods warm.
pub fn deployment(rt: &Runtime, s: &PodSettings) -> Deployment {
    let labels = labels(rt);
    let mut template = rt.spec.template.clone().unwrap_or_default();
    let meta = template.metadata.get_or_insert_with(ObjectMeta::default);
    meta.labels
        .get_or_insert_with(BTreeMap::new)
        .extend(labels.clone());
    pod_spec(rt, s, template.spec.get_or_insert_with(PodSpec::default));
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

/// Turns the template's Pod spec into a Runtime Pod's: `runtimed` first
/// (replacing a template container of that name), `runtime` second (over a
/// template container of that name), the other template containers after;
/// the operator's volumes replace template volumes of the same names, and
/// only runtimed mounts runtimed's; no automounted token, no shared process
/// namespace.
fn pod_spec(rt: &Runtime, s: &PodSettings, spec: &mut PodSpec) {
    if spec.service_account_name.is_none() {
        spec.service_account_name = Some(s.service_account.clone());
    }
    // The token is projected into runtimed alone; admission must not mount
    // one into every container.
    spec.automount_service_account_token = Some(false);
    // runtimed is not visible from the Runtime Server's PID namespace.
    spec.share_process_namespace = Some(false);
    // Service variables are no business of user code's environment.
    spec.enable_service_links.get_or_insert(false);
    spec.security_context = Some(security::pod(spec.security_context.take()));

    let base = spec
        .containers
        .iter()
        .position(|c| c.name == RUNTIME_CONTAINER)
        .map(|at| spec.containers.remove(at));
    spec.containers.retain(|c| c.name != RUNTIMED_CONTAINER);
    spec.containers.insert(0, runtime::container(rt, base));
    // Only runtimed may mount its volumes, whatever the template asks for.
    for c in spec
        .containers
        .iter_mut()
        .chain(spec.init_containers.iter_mut().flatten())
    {
        if let Some(mounts) = c.volume_mounts.as_mut() {
            mounts.retain(|m| !runtimed::VOLUMES.contains(&m.name.as_str()));
        }
    }
    spec.containers.insert(0, runtimed::container(rt, s));

    let volumes = spec.volumes.get_or_insert_with(Vec::new);
    let has_workspace = volumes.iter().any(|v| v.name == runtime::WORKSPACE_VOLUME);
    let ours: Vec<Volume> = runtimed::volumes(s)
        .into_iter()
        .chain([parts::empty_dir(SOCKET_VOLUME)])
        .chain(runtime::volumes(has_workspace))
        .collect();
    volumes.retain(|v| !ours.iter().any(|o| o.name == v.name));
    volumes.extend(ours);
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
mod tests;
