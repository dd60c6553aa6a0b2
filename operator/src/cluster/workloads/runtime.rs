//! The `runtime` container of a Runtime Pod — the Runtime Server, the
//! untrusted side that runs user code — and the volumes only it mounts: its
//! workspace and `/tmp`. It gets no token, key or Secret from the operator.

use k8s_openapi::api::core::v1::{Container, Volume};
use kruntimes_api::{Backend, Runtime};

use super::parts::{empty_dir, env, mount};
use super::{RUNTIME_CONTAINER, SOCKET_DIR, SOCKET_PATH, SOCKET_VOLUME, security};

/// Environment variable naming the socket the Runtime Server serves on.
pub const SOCKET_ENV: &str = "KRUNTIMES_RUNTIME_SOCKET";
/// Environment variable naming the Runtime Server's workspace directory.
pub const WORK_ROOT_ENV: &str = "KRUNTIMES_WORK_ROOT";
/// Where the workspace volume is mounted.
pub const WORK_ROOT: &str = "/workspace";
/// Volume of the workspace; a template volume of this name is used instead
/// of the default `emptyDir` (to bound its size, say).
pub const WORKSPACE_VOLUME: &str = "workspace";
/// The built-in Runtime Server's program, on the image's `PATH`.
pub const BUILT_IN_SERVER: &str = "runtime-server";
const TMP_VOLUME: &str = "runtime-tmp";

/// The `runtime` container, built over `base` — the template's container of
/// that name, if any. The operator sets the name, the image
/// (`Runtime.spec.image`), the security context, the two environment
/// variables and its own mounts, and for the built-in backends the command;
/// everything else of `base` (resources, probes, further env and mounts,
/// a custom server's command) is kept. (Mounts of runtimed's volumes are
/// dropped from every container but runtimed's by the Pod assembly.)
pub(super) fn container(rt: &Runtime, base: Option<Container>) -> Container {
    let mut c = base.unwrap_or_default();
    c.name = RUNTIME_CONTAINER.into();
    c.image = Some(rt.spec.image.clone());
    if serves_built_in(rt.spec.backend) {
        c.command = Some(vec![BUILT_IN_SERVER.into()]);
        c.args = Some(vec![
            "--socket".into(),
            SOCKET_PATH.into(),
            "--work-root".into(),
            WORK_ROOT.into(),
            // runtimed runs as another user of the same group.
            "--socket-mode".into(),
            "660".into(),
        ]);
    }
    let ours = [SOCKET_ENV, WORK_ROOT_ENV];
    let envs = c.env.get_or_insert_with(Vec::new);
    envs.retain(|e| !ours.contains(&e.name.as_str()));
    envs.push(env(SOCKET_ENV, SOCKET_PATH));
    envs.push(env(WORK_ROOT_ENV, WORK_ROOT));
    let mounts = c.volume_mounts.get_or_insert_with(Vec::new);
    let own = [
        (SOCKET_VOLUME, SOCKET_DIR),
        (WORKSPACE_VOLUME, WORK_ROOT),
        (TMP_VOLUME, "/tmp"),
    ];
    mounts.retain(|m| {
        !own.iter()
            .any(|(name, path)| m.name == *name || m.mount_path == *path)
    });
    mounts.extend(own.iter().map(|(name, path)| mount(name, path, false)));
    c.security_context = Some(security::container(security::RUNTIME_USER));
    derive_resources(&mut c, rt);
    c
}

/// Resources the container gets from `spec.capacity.resources` where the
/// template sets none: what the Runs of one Pod may reserve is what the
/// container may use — as limits and as requests, so the node scheduler
/// reserves it too. A name the template already limits or requests is the
/// template's; extended resources are left to the template (a device
/// plugin's name is not always a container resource).
fn derive_resources(c: &mut Container, rt: &Runtime) {
    const DERIVED: [&str; 3] = ["cpu", "memory", "ephemeral-storage"];
    let capacity = &rt.spec.capacity.resources;
    if !DERIVED.iter().any(|n| capacity.contains_key(*n)) {
        return;
    }
    let r = c.resources.get_or_insert_with(Default::default);
    for name in DERIVED {
        let Some(q) = capacity.get(name) else {
            continue;
        };
        let set = |m: &mut Option<std::collections::BTreeMap<String, _>>| {
            m.get_or_insert_with(Default::default)
                .entry(name.to_owned())
                .or_insert_with(|| q.clone());
        };
        let template_sets = r.limits.as_ref().is_some_and(|l| l.contains_key(name))
            || r.requests.as_ref().is_some_and(|l| l.contains_key(name));
        if !template_sets {
            set(&mut r.limits);
            set(&mut r.requests);
        }
    }
}

/// Whether `backend` is served by the built-in `runtime-server` (Python,
/// Bash, or chosen per Run by its runtime name) rather than the image's
/// own entrypoint.
pub fn serves_built_in(backend: Option<Backend>) -> bool {
    !matches!(backend, Some(Backend::Custom))
}

/// The volumes only `runtime` mounts: `/tmp`, and the workspace unless the
/// template brings its own (`has_workspace`).
pub(super) fn volumes(has_workspace: bool) -> Vec<Volume> {
    let mut v = vec![empty_dir(TMP_VOLUME)];
    if !has_workspace {
        v.push(empty_dir(WORKSPACE_VOLUME));
    }
    v
}
