//! Small builders of Pod parts that both containers of a Runtime Pod use:
//! volume mounts, `emptyDir` volumes, plain and downward-API environment
//! variables.

use k8s_openapi::api::core::v1::{
    EmptyDirVolumeSource, EnvVar, EnvVarSource, ObjectFieldSelector, Volume, VolumeMount,
};

/// A mount of volume `name` at `path`.
pub(super) fn mount(name: &str, path: &str, read_only: bool) -> VolumeMount {
    VolumeMount {
        name: name.into(),
        mount_path: path.into(),
        read_only: read_only.then_some(true),
        ..Default::default()
    }
}

/// An `emptyDir` volume, on the node's disk.
pub(super) fn empty_dir(name: &str) -> Volume {
    Volume {
        name: name.into(),
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Default::default()
    }
}

/// `name=value`.
pub(super) fn env(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: Some(value.into()),
        ..Default::default()
    }
}

/// `name` from the Pod's own field `path` (downward API).
pub(super) fn field_env(name: &str, path: &str) -> EnvVar {
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
