//! The credentials a test API server starts with, written into its
//! directory: a serving certificate for 127.0.0.1 from a fresh CA, an ES256
//! service-account signing key, and a static token file with one random
//! token per [`User`].

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;

use crate::users::User;

/// The service-account token issuer the API server is configured with.
pub const SA_ISSUER: &str = "https://kubernetes.default.svc.cluster.local";
/// The default audience of service-account tokens.
pub const API_AUDIENCE: &str = "https://kubernetes.default.svc.cluster.local";

/// The serving CA's certificate (PEM), read by clients.
pub(crate) const CA_CERT: &str = "ca.crt";
/// The serving certificate (PEM).
pub(crate) const SERVING_CERT: &str = "apiserver.crt";
/// The serving certificate's key (PEM, mode 0600).
pub(crate) const SERVING_KEY: &str = "apiserver.key";
/// The service-account signing key (PKCS#8 PEM, mode 0600).
pub(crate) const SA_KEY: &str = "sa.key";
/// The service-account verification key (PEM).
pub(crate) const SA_PUB: &str = "sa.pub";
/// The static token file (`token,user,uid,"groups"`, mode 0600).
pub(crate) const TOKENS_CSV: &str = "tokens.csv";

/// What the harness keeps of the credentials it wrote.
pub(crate) struct Credentials {
    /// The CA that signed the serving certificate (PEM).
    pub(crate) ca_pem: String,
    /// The static token of every user.
    pub(crate) tokens: BTreeMap<User, String>,
    /// The service-account signing key (PKCS#8 PEM).
    pub(crate) sa_key_pem: String,
}

/// Generates the credentials and writes them into `dir`.
pub(crate) fn write(dir: &Path) -> anyhow::Result<Credentials> {
    let ca = kruntimes_certs::Ca::generate("kubetest-ca", 2)?;
    let serving = ca.issue(&kruntimes_certs::LeafSpec {
        common_name: "kube-apiserver".into(),
        dns_names: vec!["localhost".into(), "kubernetes.default.svc".into()],
        ips: vec![IpAddr::V4(Ipv4Addr::LOCALHOST)],
        server: true,
        client: false,
        valid_days: 2,
    })?;
    std::fs::write(dir.join(CA_CERT), &ca.cert_pem)?;
    std::fs::write(dir.join(SERVING_CERT), &serving.cert_pem)?;
    kruntimes_certs::write_private(&dir.join(SERVING_KEY), serving.key_pem.as_bytes())?;

    let sa = rcgen::KeyPair::generate()?;
    kruntimes_certs::write_private(&dir.join(SA_KEY), sa.serialize_pem().as_bytes())?;
    std::fs::write(dir.join(SA_PUB), sa.public_key_pem())?;

    let mut tokens = BTreeMap::new();
    let mut csv = String::new();
    for user in User::ALL {
        let token = format!("kt-{}", uuid::Uuid::new_v4().simple());
        let _ = writeln!(
            csv,
            "{token},{},uid-{},\"{}\"",
            user.name(),
            user.name(),
            user.groups()
        );
        tokens.insert(user, token);
    }
    kruntimes_certs::write_private(&dir.join(TOKENS_CSV), csv.as_bytes())?;

    Ok(Credentials {
        ca_pem: ca.cert_pem,
        tokens,
        sa_key_pem: sa.serialize_pem(),
    })
}
