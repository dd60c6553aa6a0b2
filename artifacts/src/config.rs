//! Where a store is and how to reach it. The non-secret part travels as
//! JSON (a flag, an environment variable); the credentials only ever come
//! from runtimed's (or the operator's) own environment.

use std::path::PathBuf;

use secrecy::SecretString;
use serde::{Deserialize, Serialize};

/// The environment variable holding a [`StoreConfig`] as JSON.
pub const STORE_ENV: &str = "KRUNTIMES_RUNTIMED_ARTIFACT_STORE";
/// The environment variable holding the S3 access key id.
pub const ACCESS_KEY_ID_ENV: &str = "KRUNTIMES_ARTIFACT_ACCESS_KEY_ID";
/// The environment variable holding the S3 secret access key.
pub const SECRET_ACCESS_KEY_ENV: &str = "KRUNTIMES_ARTIFACT_SECRET_ACCESS_KEY";

/// A store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub enum StoreConfig {
    /// A local directory (`krt up`'s default), created if missing.
    Directory {
        /// The directory.
        path: PathBuf,
    },
    /// An S3-compatible bucket.
    S3(S3Config),
}

/// An S3-compatible bucket (`Runtime.spec.artifactStore` without its
/// credentials).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct S3Config {
    /// `https://host[:port]` (`http://` accepted); `None`: AWS S3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// The bucket.
    pub bucket: String,
    /// Key prefix (default `kruntimes`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    /// Region (default `us-east-1`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// Path-style requests (default `true`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_style: Option<bool>,
}

impl S3Config {
    /// The bucket of a Runtime's `spec.artifactStore`.
    pub fn of(spec: &kruntimes_api::ArtifactStoreSpec) -> Self {
        Self {
            endpoint: spec.endpoint.clone(),
            bucket: spec.bucket.clone(),
            prefix: spec.prefix.clone(),
            region: spec.region.clone(),
            path_style: spec.path_style,
        }
    }
}

/// Credentials of an S3 store.
#[derive(Clone)]
pub struct Credentials {
    /// Access key id.
    pub access_key_id: String,
    /// Secret access key.
    pub secret_access_key: SecretString,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials").finish_non_exhaustive()
    }
}

impl Credentials {
    /// The credentials in this process's environment
    /// ([`ACCESS_KEY_ID_ENV`], [`SECRET_ACCESS_KEY_ENV`]); `None` when
    /// neither is set (the Pod's own identity is used then). One without
    /// the other is an error.
    pub fn from_env() -> Result<Option<Self>, String> {
        let id = std::env::var(ACCESS_KEY_ID_ENV)
            .ok()
            .filter(|s| !s.is_empty());
        let secret = std::env::var(SECRET_ACCESS_KEY_ENV)
            .ok()
            .filter(|s| !s.is_empty());
        match (id, secret) {
            (None, None) => Ok(None),
            (Some(access_key_id), Some(secret)) => Ok(Some(Self {
                access_key_id,
                secret_access_key: SecretString::from(secret),
            })),
            _ => Err(format!(
                "set both {ACCESS_KEY_ID_ENV} and {SECRET_ACCESS_KEY_ENV}, or neither"
            )),
        }
    }
}

impl StoreConfig {
    /// The store named by [`STORE_ENV`] in this process's environment;
    /// `None` when it is unset or empty.
    pub fn from_env() -> Result<Option<Self>, String> {
        match std::env::var(STORE_ENV) {
            Ok(s) if !s.trim().is_empty() => Self::parse(&s).map(Some),
            _ => Ok(None),
        }
    }

    /// A store from its JSON (`{"directory":{"path":"/d"}}`,
    /// `{"s3":{"endpoint":"…","bucket":"…"}}`).
    pub fn parse(json: &str) -> Result<Self, String> {
        serde_json::from_str(json).map_err(|e| format!("invalid artifact store: {e}"))
    }

    /// The JSON [`Self::parse`] reads.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configs_round_trip_through_json_and_refuse_unknown_fields() {
        let dir = StoreConfig::Directory {
            path: "/var/lib/a".into(),
        };
        assert_eq!(StoreConfig::parse(&dir.to_json()), Ok(dir));
        let s3 = StoreConfig::parse(
            r#"{"s3":{"endpoint":"http://127.0.0.1:9000","bucket":"b","pathStyle":true}}"#,
        )
        .unwrap();
        assert_eq!(StoreConfig::parse(&s3.to_json()), Ok(s3));
        let err = StoreConfig::parse(r#"{"s3":{"bucket":"b","secretAccessKey":"x"}}"#).unwrap_err();
        assert!(err.contains("unknown field"), "{err}");
        assert!(!err.contains("\"x\""), "no value echoed: {err}");
    }

    #[test]
    fn credentials_never_print() {
        let c = Credentials {
            access_key_id: "AKIDEXAMPLE".into(),
            secret_access_key: SecretString::from("wJalrXUtnFEMI"),
        };
        let shown = format!("{c:?}");
        assert!(
            !shown.contains("AKID") && !shown.contains("wJal"),
            "{shown}"
        );
    }
}
