//! Certificate, key and token material of an embedded stack, generated at
//! `krt up` into `STATE_DIR/pki` (keys readable by the owner only).

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use kruntimes_certs::{Ca, LeafSpec, write_private};
use serde::Serialize;

/// TLS server name on every runtimed certificate.
pub const RUNTIMED_SERVER_NAME: &str = "runtimed.kruntimes.internal";
/// Subject CN and server name of the control plane.
pub const CONTROL_PLANE_NAME: &str = "kruntimes-control-plane";
/// Subject CN of the gateway's client certificate.
pub const GATEWAY_CLIENT_NAME: &str = "kruntimes-gateway";
/// Issuer of embedded tokens.
pub const TOKEN_ISSUER: &str = "kruntimes-embedded";
/// Audience of embedded tokens.
pub const TOKEN_AUDIENCE: &str = "kruntimes-gateway";
/// Group every embedded admin token carries.
pub const ADMIN_GROUP: &str = "kruntimes:admins";

/// Paths of the generated material.
#[derive(Debug, Clone)]
pub struct Pki {
    /// Public CA (clients trust it for the gateway).
    pub public_ca: PathBuf,
    /// Gateway serving certificate and key.
    pub gateway_cert: PathBuf,
    /// Gateway serving key.
    pub gateway_key: PathBuf,
    /// Internal CA.
    pub internal_ca: PathBuf,
    /// runtimed serving certificate.
    pub runtimed_cert: PathBuf,
    /// runtimed key.
    pub runtimed_key: PathBuf,
    /// Gateway client certificate (to runtimed).
    pub gateway_client_cert: PathBuf,
    /// Gateway client key.
    pub gateway_client_key: PathBuf,
    /// Control plane certificate (server and client).
    pub control_cert: PathBuf,
    /// Control plane key.
    pub control_key: PathBuf,
    /// ES256 public key verifying tokens.
    pub jwt_public: PathBuf,
    /// ES256 private key signing tokens.
    pub jwt_private: PathBuf,
    /// Authorization policy.
    pub policy: PathBuf,
}

fn leaf(ca: &Ca, dir: &Path, name: &str, spec: LeafSpec) -> anyhow::Result<(PathBuf, PathBuf)> {
    let l = ca
        .issue(&spec)
        .with_context(|| format!("issue {name} certificate"))?;
    let cert = dir.join(format!("{name}.crt"));
    let key = dir.join(format!("{name}.key"));
    std::fs::write(&cert, &l.cert_pem)?;
    write_private(&key, l.key_pem.as_bytes())?;
    Ok((cert, key))
}

/// Generates fresh CAs, certificates, signing keys and the policy.
pub fn generate(dir: &Path) -> anyhow::Result<Pki> {
    std::fs::create_dir_all(dir)?;
    let loopback: Vec<IpAddr> = vec!["127.0.0.1".parse()?, "::1".parse()?];
    let public = Ca::generate("kruntimes embedded public CA", 30)?;
    let internal = Ca::generate("kruntimes embedded internal CA", 30)?;
    let public_ca = dir.join("public-ca.crt");
    let internal_ca = dir.join("internal-ca.crt");
    std::fs::write(&public_ca, &public.cert_pem)?;
    std::fs::write(&internal_ca, &internal.cert_pem)?;
    let (gateway_cert, gateway_key) = leaf(
        &public,
        dir,
        "gateway",
        LeafSpec {
            common_name: "kruntimes-gateway".into(),
            dns_names: vec!["localhost".into()],
            ips: loopback.clone(),
            server: true,
            valid_days: 30,
            ..Default::default()
        },
    )?;
    let (runtimed_cert, runtimed_key) = leaf(
        &internal,
        dir,
        "runtimed",
        LeafSpec {
            common_name: "runtimed".into(),
            dns_names: vec![RUNTIMED_SERVER_NAME.into()],
            ips: loopback.clone(),
            server: true,
            valid_days: 30,
            ..Default::default()
        },
    )?;
    let (gateway_client_cert, gateway_client_key) = leaf(
        &internal,
        dir,
        "gateway-client",
        LeafSpec {
            common_name: GATEWAY_CLIENT_NAME.into(),
            client: true,
            valid_days: 30,
            ..Default::default()
        },
    )?;
    let (control_cert, control_key) = leaf(
        &internal,
        dir,
        "control-plane",
        LeafSpec {
            common_name: CONTROL_PLANE_NAME.into(),
            dns_names: vec![CONTROL_PLANE_NAME.into()],
            ips: loopback,
            server: true,
            client: true,
            valid_days: 30,
        },
    )?;
    let signing = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
    let jwt_private = dir.join("token-signing.key");
    let jwt_public = dir.join("token-signing.pub");
    write_private(&jwt_private, signing.serialize_pem().as_bytes())?;
    std::fs::write(&jwt_public, signing.public_key_pem())?;
    let policy = dir.join("policy.yaml");
    std::fs::write(
        &policy,
        format!(
            "# Embedded authorization policy: who may invoke which namespaces.\nrules:\n  - groups: [\"{ADMIN_GROUP}\"]\n    namespaces: [\"*\"]\n    verbs: [invoke, session]\n"
        ),
    )?;
    Ok(Pki {
        public_ca,
        gateway_cert,
        gateway_key,
        internal_ca,
        runtimed_cert,
        runtimed_key,
        gateway_client_cert,
        gateway_client_key,
        control_cert,
        control_key,
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
