//! Artifacts: what a Run leaves in `$KRUNTIME_ARTIFACTS_DIR`, uploaded by
//! its owner to the Runtime's artifact store. `Runtime.spec.artifactStore`
//! names the store; `Run.status.artifacts` keeps compact refs to what was
//! uploaded. Types and pure rules only: the store itself is
//! `kruntimes-artifacts`'.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use kruntimes_proto::ownership::v1 as own;

/// Most refs `status.artifacts` keeps (the store and the gateway's list
/// route have them all).
pub const MAX_STATUS_ARTIFACTS: usize = 100;

/// `Runtime.spec.artifactStore`: an S3-compatible bucket the Runtime's
/// Pods upload artifacts to. Only runtimed (and the operator, which cleans
/// up) read the credentials; the Runtime Server and user code never see
/// them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ArtifactStoreSpec {
    /// The S3 endpoint, `https://host[:port]` (`http://` only for a store
    /// inside the cluster network). Omitted: AWS S3 in `region`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 512))]
    pub endpoint: Option<String>,
    /// The bucket (it must exist).
    #[schemars(length(min = 3, max = 63))]
    pub bucket: String,
    /// Key prefix of everything this Runtime stores (default `kruntimes`):
    /// a Run's artifacts are under `{prefix}/{namespace}/{runUID}/`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256))]
    pub prefix: Option<String>,
    /// Region (default `us-east-1`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub region: Option<String>,
    /// Path-style requests (`endpoint/bucket/key`), which most
    /// S3-compatible servers need; default `true`. `false`: virtual-hosted
    /// style (`bucket.endpoint/key`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_style: Option<bool>,
    /// A Secret in the Runtime's namespace with the access key id and
    /// secret access key. Omitted: the Pod's own identity (for example an
    /// EKS Pod Identity or IRSA role), read from the environment the cloud
    /// provides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_secret: Option<CredentialsSecret>,
    /// How long a Run's artifacts are kept after the Run ends, in seconds
    /// (omitted: until the Run is deleted). Deleting the Run deletes them
    /// either way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 31_536_000))]
    pub retain_after_run_seconds: Option<u32>,
}

/// `spec.artifactStore.credentialsSecret`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CredentialsSecret {
    /// The Secret's name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Key of the access key id (default `accessKeyId`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub access_key_id_key: Option<String>,
    /// Key of the secret access key (default `secretAccessKey`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub secret_access_key_key: Option<String>,
}

impl CredentialsSecret {
    /// The key of the access key id in the Secret.
    pub fn access_key_id_key(&self) -> &str {
        self.access_key_id_key.as_deref().unwrap_or("accessKeyId")
    }

    /// The key of the secret access key in the Secret.
    pub fn secret_access_key_key(&self) -> &str {
        self.secret_access_key_key
            .as_deref()
            .unwrap_or("secretAccessKey")
    }
}

/// One artifact of a Run: `status.artifacts[]`, an entry of the gateway's
/// list route, and of an invoke response's `artifactRefs`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ArtifactRef {
    /// Path relative to the artifacts directory (`report.json`,
    /// `out/trace.bin`).
    #[schemars(length(max = 512))]
    pub name: String,
    /// Where the store keeps it (`s3://bucket/key`, `file:///dir/key`);
    /// fetch it through the gateway's artifacts route without store
    /// credentials.
    #[schemars(length(max = 1024))]
    pub uri: String,
    /// Size in bytes.
    pub size: u64,
    /// Lowercase hex SHA-256 of the content.
    #[schemars(length(max = 64))]
    pub sha256: String,
}

/// The body of an invoke response whose invocation left artifacts:
/// `{"outputs": <the handler's JSON value>, "artifactRefs": [...]}` (the
/// seeds' invoke response), marked by
/// [`kruntimes_proto::api::HEADER_ARTIFACTS`]. `output` is the handler's
/// JSON document, as the Runtime Server answered it (never re-encoded).
pub fn invoke_envelope(output: &[u8], refs: &[ArtifactRef]) -> Vec<u8> {
    let refs = serde_json::to_vec(refs).unwrap_or_else(|_| b"[]".to_vec());
    let mut body = Vec::with_capacity(output.len() + refs.len() + 32);
    body.extend_from_slice(b"{\"outputs\":");
    body.extend_from_slice(output);
    body.extend_from_slice(b",\"artifactRefs\":");
    body.extend_from_slice(&refs);
    body.push(b'}');
    body
}

impl ArtifactRef {
    /// The ref as its owner publishes it.
    pub fn to_wire(&self) -> own::ArtifactRef {
        own::ArtifactRef {
            name: self.name.clone(),
            uri: self.uri.clone(),
            size: self.size,
            sha256: self.sha256.clone(),
        }
    }

    /// A published ref.
    pub fn from_wire(r: &own::ArtifactRef) -> Self {
        Self {
            name: r.name.clone(),
            uri: r.uri.clone(),
            size: r.size,
            sha256: r.sha256.clone(),
        }
    }
}

/// `status.artifacts` of a Run as its owner published its export: at most
/// [`MAX_STATUS_ARTIFACTS`], in the order published (a custom owner may
/// send more).
pub fn status_artifacts(outcome: &own::ExportOutcome) -> Vec<ArtifactRef> {
    outcome
        .artifacts
        .iter()
        .take(MAX_STATUS_ARTIFACTS)
        .map(ArtifactRef::from_wire)
        .collect()
}

/// Most entries of `spec.inputs.artifacts`.
pub const MAX_INPUT_ARTIFACTS: usize = 32;

/// `spec.inputs`: what a Run is given before it starts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Inputs {
    /// Artifacts from the Runtime's store (another Run's
    /// `status.artifacts[].uri`, of this Run's namespace), each written to
    /// a path of the working directory before a task starts or a session
    /// is Ready.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub artifacts: Vec<InputArtifact>,
}

/// `spec.inputs.artifacts[]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InputArtifact {
    /// `s3://bucket/key` or `file:///dir/key`, as a Run's
    /// `status.artifacts[].uri` shows it.
    #[schemars(length(min = 1, max = 1024))]
    pub uri: String,
    /// Where it goes, relative to the working directory (no `..`).
    #[schemars(length(min = 1, max = 512))]
    pub path: String,
    /// Its expected SHA-256, lowercase hex; a mismatch fails the start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 64, max = 64))]
    pub sha256: Option<String>,
}

impl InputArtifact {
    /// As the owner receives it.
    pub fn to_wire(&self) -> kruntimes_proto::agent::v1::InputArtifact {
        kruntimes_proto::agent::v1::InputArtifact {
            uri: self.uri.clone(),
            path: self.path.clone(),
            sha256: self.sha256.clone().unwrap_or_default(),
        }
    }
}

/// Why `spec.inputs` cannot be a Run's of `mode` (`None` when it can).
pub fn inputs_error(inputs: &Inputs, mode: kruntimes_core::ModeKind) -> Option<String> {
    if inputs.artifacts.is_empty() {
        return None;
    }
    if mode == kruntimes_core::ModeKind::Function {
        return Some("spec.inputs applies to task and session Runs only".into());
    }
    if inputs.artifacts.len() > MAX_INPUT_ARTIFACTS {
        return Some(format!(
            "spec.inputs.artifacts has more than {MAX_INPUT_ARTIFACTS} entries"
        ));
    }
    let mut paths = std::collections::BTreeSet::new();
    for (i, a) in inputs.artifacts.iter().enumerate() {
        let at = format!("spec.inputs.artifacts[{i}]");
        if !(a.uri.starts_with("s3://") || a.uri.starts_with("file:///")) || a.uri.len() > 1024 {
            return Some(format!(
                "{at}.uri must be an s3:// or file:/// URI of at most 1024 bytes"
            ));
        }
        match kruntimes_proto::runtime::path::normalize(&a.path) {
            Ok(p) if !p.as_os_str().is_empty() && a.path.len() <= 512 => {
                if !paths.insert(p) {
                    return Some(format!("{at}.path {:?} is given twice", a.path));
                }
            }
            Ok(_) => return Some(format!("{at}.path must name a file (1-512 bytes)")),
            Err(e) => return Some(format!("{at}.path {:?}: {e}", a.path)),
        }
        if let Some(s) = &a.sha256
            && !(s.len() == 64
                && s.bytes()
                    .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c)))
        {
            return Some(format!("{at}.sha256 must be 64 lowercase hex digits"));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(uri: &str, path: &str, sha: Option<&str>) -> InputArtifact {
        InputArtifact {
            uri: uri.into(),
            path: path.into(),
            sha256: sha.map(str::to_owned),
        }
    }

    #[test]
    fn the_envelope_carries_the_handlers_document_as_it_is() {
        let refs = [ArtifactRef {
            name: "invocations/order-42/diagnosis.json".into(),
            uri: "s3://b/k".into(),
            size: 2,
            sha256: "ab".into(),
        }];
        for output in [
            &b"{\"summary\": \"1 pending\"}"[..],
            b"[1, 2.50, null]",
            b"\"x\"",
            b"7",
        ] {
            let body = invoke_envelope(output, &refs);
            let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
            let original: serde_json::Value = serde_json::from_slice(output).unwrap();
            assert_eq!(v["outputs"], original);
            assert_eq!(v["artifactRefs"][0]["name"], refs[0].name);
            assert_eq!(v["artifactRefs"][0]["sha256"], "ab");
            // Byte for byte: `2.50` stays as the handler wrote it.
            let text = String::from_utf8(body).unwrap();
            assert!(
                text.contains(std::str::from_utf8(output).unwrap()),
                "{text}"
            );
        }
    }

    #[test]
    fn inputs_are_checked_with_reasons_naming_the_entry() {
        use kruntimes_core::ModeKind::{Function, Session, Task};
        let ok = Inputs {
            artifacts: vec![
                input("s3://b/k/ns/u/files/a", "in/a.json", Some(&"a".repeat(64))),
                input("file:///d/ns/u/files/b", "b", None),
            ],
        };
        assert_eq!(inputs_error(&ok, Task), None);
        assert_eq!(inputs_error(&ok, Session), None);
        assert!(
            inputs_error(&ok, Function)
                .unwrap()
                .contains("task and session")
        );
        assert_eq!(inputs_error(&Inputs::default(), Function), None);
        for (bad, why) in [
            (input("https://x/y", "a", None), "artifacts[0].uri"),
            (input("s3://b/k", "../a", None), "'..'"),
            (input("s3://b/k", "/etc/a", None), "relative"),
            (input("s3://b/k", ".", None), "must name a file"),
            (input("s3://b/k", "a", Some("ABC")), "64 lowercase hex"),
        ] {
            let got = inputs_error(
                &Inputs {
                    artifacts: vec![bad],
                },
                Task,
            )
            .unwrap();
            assert!(got.contains(why), "{got}");
        }
        let twice = Inputs {
            artifacts: vec![input("s3://b/1", "a", None), input("s3://b/2", "./a", None)],
        };
        assert!(inputs_error(&twice, Task).unwrap().contains("twice"));
        let many = Inputs {
            artifacts: (0..33)
                .map(|i| input("s3://b/k", &format!("f{i}"), None))
                .collect(),
        };
        assert!(inputs_error(&many, Task).unwrap().contains("more than 32"));
    }

    #[test]
    fn status_keeps_at_most_the_bound_in_order() {
        let outcome = own::ExportOutcome {
            artifacts: (0..150)
                .map(|i| own::ArtifactRef {
                    name: format!("f{i}"),
                    size: i,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        };
        let refs = status_artifacts(&outcome);
        assert_eq!(refs.len(), MAX_STATUS_ARTIFACTS);
        assert_eq!(refs[0].name, "f0");
        assert_eq!(refs[99].size, 99);
        assert_eq!(ArtifactRef::from_wire(&refs[5].to_wire()), refs[5]);
    }

    #[test]
    fn a_store_spec_reads_with_defaults_and_refuses_unknown_fields() {
        let spec: ArtifactStoreSpec = serde_json::from_value(serde_json::json!({
            "endpoint": "https://s3.example:9000",
            "bucket": "artifacts",
            "credentialsSecret": {"name": "s3"}
        }))
        .unwrap();
        let secret = spec.credentials_secret.unwrap();
        assert_eq!(secret.access_key_id_key(), "accessKeyId");
        assert_eq!(secret.secret_access_key_key(), "secretAccessKey");
        assert!(
            serde_json::from_value::<ArtifactStoreSpec>(
                serde_json::json!({"bucket": "b", "acessKey": "x"})
            )
            .is_err()
        );
    }
}
