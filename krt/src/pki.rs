//! Certificate, key and token material of an embedded stack, generated at
//! `krt up` into `STATE_DIR/pki` (keys readable by the owner only).

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use kruntimes_certs::install::InstallPki;
use kruntimes_certs::write_private;
use serde::Serialize;

pub use kruntimes_certs::install::RUNTIMED_SERVER_NAME;
/// Issuer of embedded tokens.
pub const TOKEN_ISSUER: &str = "kruntimes-embedded";
/// Audience of embedded tokens.
pub const TOKEN_AUDIENCE: &str = "kruntimes-gateway";
/// Group every embedded admin token carries.
pub const ADMIN_GROUP: &str = "kruntimes:admins";

/// Paths of the generated material.
#[derive(Debug, Clone)]
pub struct Pki {
    /// The installation's CAs and certificates.
    pub tls: InstallPki,
    /// ES256 public key verifying tokens.
    pub jwt_public: PathBuf,
    /// ES256 private key signing tokens.
    pub jwt_private: PathBuf,
    /// Authorization policy.
    pub policy: PathBuf,
}

/// Generates fresh CAs, certificates, signing keys and the policy.
pub fn generate(dir: &Path) -> anyhow::Result<Pki> {
    let tls =
        InstallPki::generate(dir, "kruntimes embedded", 30).context("generate the embedded PKI")?;
    let signing = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
    let jwt_private = dir.join("token-signing.key");
    let jwt_public = dir.join("token-signing.pub");
    write_private(&jwt_private, signing.serialize_pem().as_bytes())?;
    std::fs::write(&jwt_public, signing.public_key_pem())?;
    // The policy is the user's once written: kept across restarts, so
    // rules added for other subjects stay.
    let policy = dir.join("policy.yaml");
    if !policy.exists() {
        std::fs::write(
            &policy,
            format!(
                "# Embedded authorization policy: who may call Runs in which namespaces.\n# Read by the gateway at start: edit, then restart krt up. Kept across restarts.\nrules:\n  - groups: [\"{ADMIN_GROUP}\"]\n    namespaces: [\"*\"]\n    verbs: [invoke, session, artifacts]\n"
            ),
        )?;
    }
    Ok(Pki {
        tls,
        jwt_public,
        jwt_private,
        policy,
    })
}

#[derive(Serialize)]
struct Claims<'a> {
    sub: &'a str,
    groups: &'a [String],
    iss: &'a str,
    aud: &'a str,
    exp: u64,
    nbf: u64,
    iat: u64,
}

/// Signs an embedded-mode token.
pub fn issue_token(
    private_key: &Path,
    subject: &str,
    groups: &[String],
    ttl: Duration,
) -> anyhow::Result<String> {
    let key =
        std::fs::read(private_key).with_context(|| format!("read {}", private_key.display()))?;
    let now = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs();
    let claims = Claims {
        sub: subject,
        groups,
        iss: TOKEN_ISSUER,
        aud: TOKEN_AUDIENCE,
        exp: now + ttl.as_secs(),
        nbf: now.saturating_sub(60),
        iat: now,
    };
    let header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::ES256);
    Ok(jsonwebtoken::encode(
        &header,
        &claims,
        &jsonwebtoken::EncodingKey::from_ec_pem(&key)?,
    )?)
}

#[cfg(test)]
mod tests {
    use super::generate;

    #[test]
    fn keys_are_new_at_every_start_and_the_policy_stays_the_users() {
        let dir = tempfile::tempdir().unwrap();
        let first = generate(dir.path()).unwrap();
        let written = std::fs::read_to_string(&first.policy).unwrap();
        assert!(written.contains("kruntimes:admins"), "{written}");
        let key = std::fs::read(&first.jwt_private).unwrap();
        let edited = format!(
            "{written}  - subjects: [\"alice\"]\n    namespaces: [\"default\"]\n    verbs: [invoke]\n"
        );
        std::fs::write(&first.policy, &edited).unwrap();
        let second = generate(dir.path()).unwrap();
        assert_eq!(std::fs::read_to_string(&second.policy).unwrap(), edited);
        assert_ne!(std::fs::read(&second.jwt_private).unwrap(), key);
    }
}
