//! The security settings of a Runtime Pod: the users its two containers run
//! as and the contexts that make the Pod pass the `restricted` Pod Security
//! Standard.

use k8s_openapi::api::core::v1::{
    Capabilities, PodSecurityContext, SeccompProfile, SecurityContext,
};

/// User of the `runtimed` container.
pub const RUNTIMED_USER: i64 = 65532;
/// User of the `runtime` container: not runtimed's, so the kernel's per-user
/// accounting (process counts, signals) keeps user code apart from the agent.
pub const RUNTIME_USER: i64 = 65533;
/// Primary group of both containers and the Pod's `fsGroup`: the socket
/// directory they share is the group's, so a socket the Runtime Server
/// creates with mode 0660 is one runtimed may connect to.
pub const POD_GROUP: i64 = 65532;

fn runtime_default() -> SeccompProfile {
    SeccompProfile {
        type_: "RuntimeDefault".into(),
        ..Default::default()
    }
}

/// A container context as `restricted` requires, running as `user`: non-root,
/// read-only root filesystem, no privilege escalation, no capabilities,
/// the container runtime's default seccomp profile.
pub(super) fn container(user: i64) -> SecurityContext {
    SecurityContext {
        run_as_non_root: Some(true),
        run_as_user: Some(user),
        run_as_group: Some(POD_GROUP),
        read_only_root_filesystem: Some(true),
        allow_privilege_escalation: Some(false),
        privileged: Some(false),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".into()]),
            ..Default::default()
        }),
        seccomp_profile: Some(runtime_default()),
        ..Default::default()
    }
}

/// The Pod's context: the template's, with non-root and [`POD_GROUP`] as
/// `fsGroup` enforced and `RuntimeDefault` seccomp unless it names a
/// profile (the operator's containers set their own either way).
pub(super) fn pod(template: Option<PodSecurityContext>) -> PodSecurityContext {
    let mut ctx = template.unwrap_or_default();
    ctx.run_as_non_root = Some(true);
    ctx.fs_group = Some(POD_GROUP);
    if ctx.seccomp_profile.is_none() {
        ctx.seccomp_profile = Some(runtime_default());
    }
    ctx
}
