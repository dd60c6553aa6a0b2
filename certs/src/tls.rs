//! rustls configurations from PEM files, and peer identity extraction.

use std::path::Path;
use std::sync::Arc;

use rustls::RootCertStore;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;

use crate::{Error, Result};

fn read(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| Error::Read {
        path: path.display().to_string(),
        reason: e.to_string(),
    })
}

/// PEM files of one TLS identity plus the CA it trusts in its peers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// CA bundle peers must chain to.
    pub ca: std::path::PathBuf,
    /// Own certificate.
    pub cert: std::path::PathBuf,
    /// Own key.
    pub key: std::path::PathBuf,
}

/// Loads every certificate of a PEM file.
pub fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>> {
    let data = read(path)?;
    let certs: Vec<_> = rustls_pemfile::certs(&mut data.as_slice())
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| Error::Read {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(Error::Read {
            path: path.display().to_string(),
            reason: "no certificate found".into(),
        });
    }
    Ok(certs)
}

/// Loads the first private key of a PEM file.
pub fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>> {
    let data = read(path)?;
    rustls_pemfile::private_key(&mut data.as_slice())
        .map_err(|e| Error::Read {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?
        .ok_or_else(|| Error::Read {
            path: path.display().to_string(),
            reason: "no private key found".into(),
        })
}

/// Checks a CA bundle the way strict readers take one (Pingora's upstream
/// connector, which panics on a bundle it cannot load): every PEM section
/// is a certificate and each one is a usable trust anchor. Returns how many
/// certificates it holds.
pub fn check_ca_bundle(path: &Path) -> Result<usize> {
    let data = read(path)?;
    let refused = |reason: String| Error::Read {
        path: path.display().to_string(),
        reason,
    };
    let mut store = RootCertStore::empty();
    for item in rustls_pemfile::read_all(&mut data.as_slice()) {
        match item.map_err(|e| refused(e.to_string()))? {
            rustls_pemfile::Item::X509Certificate(c) => store
                .add(c)
                .map_err(|e| refused(format!("a certificate is not a usable CA: {e}")))?,
            _ => {
                return Err(refused(
                    "a CA bundle holds certificates only (it has another PEM section)".into(),
                ));
            }
        }
    }
    if store.is_empty() {
        return Err(refused("no certificate found".into()));
    }
    Ok(store.len())
}

fn roots(ca: &Path) -> Result<RootCertStore> {
    let mut store = RootCertStore::empty();
    for c in load_certs(ca)? {
        store.add(c)?;
    }
    Ok(store)
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// A server configuration; with `client_ca` set, clients must present a
/// certificate issued by it (mTLS). ALPN offers `alpn` in order.
pub fn server_config(
    cert: &Path,
    key: &Path,
    client_ca: Option<&Path>,
    alpn: &[&[u8]],
) -> Result<rustls::ServerConfig> {
    let builder = server_builder(client_ca)?;
    let mut config = builder.with_single_cert(load_certs(cert)?, load_key(key)?)?;
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(config)
}

/// [`server_config`] serving whatever `cert` holds now: rotated files
/// take effect for new handshakes (see [`crate::ReloadingCert::watch`]).
pub fn server_config_reloading(
    cert: Arc<crate::ReloadingCert>,
    client_ca: Option<&Path>,
    alpn: &[&[u8]],
) -> Result<rustls::ServerConfig> {
    let mut config = server_builder(client_ca)?.with_cert_resolver(cert);
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(config)
}

fn server_builder(
    client_ca: Option<&Path>,
) -> Result<rustls::ConfigBuilder<rustls::ServerConfig, rustls::server::WantsServerCert>> {
    let builder = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?;
    Ok(match client_ca {
        Some(ca) => {
            let verifier =
                WebPkiClientVerifier::builder_with_provider(Arc::new(roots(ca)?), provider())
                    .build()
                    .map_err(|e| Error::Verifier(e.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    })
}

/// A client configuration trusting `ca`, presenting `identity` (cert, key)
/// when given.
pub fn client_config(
    ca: &Path,
    identity: Option<(&Path, &Path)>,
    alpn: &[&[u8]],
) -> Result<rustls::ClientConfig> {
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots(ca)?);
    let mut config = match identity {
        Some((cert, key)) => builder.with_client_auth_cert(load_certs(cert)?, load_key(key)?)?,
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(config)
}

/// The subject common name of a DER certificate.
pub fn peer_common_name(der: &[u8]) -> Option<String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    cert.subject()
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())
        .map(str::to_owned)
}

/// Writes a secret file readable by its owner only: created 0600, and an
/// existing file is tightened to 0600 before anything is written to it.
pub fn write_private(path: &Path, contents: &[u8]) -> Result<()> {
    use std::io::Write;
    #[cfg(unix)]
    use std::os::unix::fs::OpenOptionsExt;
    let err = |source| Error::Write {
        path: path.display().to_string(),
        source,
    };
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    opts.mode(0o600);
    let mut f = opts.open(path).map_err(err)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        f.set_permissions(std::fs::Permissions::from_mode(0o600))
            .map_err(err)?;
    }
    f.write_all(contents).map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Ca, LeafSpec};

    fn write(dir: &Path, name: &str, data: &str) -> std::path::PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, data).unwrap();
        p
    }

    #[test]
    fn a_ca_bundle_holds_usable_certificates_only() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let a = Ca::generate("a", 1).unwrap();
        let b = Ca::generate("b", 1).unwrap();
        let two = write(
            dir,
            "two.crt",
            &format!("# comment\n{}{}", a.cert_pem, b.cert_pem),
        );
        assert_eq!(check_ca_bundle(&two).unwrap(), 2);
        let leaf = a.issue(&LeafSpec::client("x", 1)).unwrap();
        let with_key = write(dir, "key.crt", &format!("{}{}", a.cert_pem, leaf.key_pem));
        let e = check_ca_bundle(&with_key).unwrap_err().to_string();
        assert!(e.contains("certificates only"), "{e}");
        let empty = write(dir, "empty.crt", "nothing here\n");
        let e = check_ca_bundle(&empty).unwrap_err().to_string();
        assert!(e.contains("no certificate found"), "{e}");
        assert!(check_ca_bundle(&dir.join("missing.crt")).is_err());
    }

    #[cfg(unix)]
    #[test]
    fn secrets_are_0600_from_creation_and_existing_ones_are_tightened() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let fresh = dir.join("fresh.key");
        write_private(&fresh, b"k").unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&fresh), 0o600);
        let old = dir.join("old.key");
        std::fs::write(&old, b"old").unwrap();
        std::fs::set_permissions(&old, std::fs::Permissions::from_mode(0o644)).unwrap();
        write_private(&old, b"new").unwrap();
        assert_eq!(mode(&old), 0o600);
        assert_eq!(std::fs::read(&old).unwrap(), b"new");
    }

    #[test]
    fn issued_leaf_builds_mtls_configs_and_names_its_subject() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let ca = Ca::generate("test ca", 1).unwrap();
        let leaf = ca
            .issue(&LeafSpec {
                common_name: "kruntimes-gateway".into(),
                dns_names: vec!["localhost".into()],
                ips: vec!["127.0.0.1".parse().unwrap()],
                server: true,
                client: true,
                valid_days: 1,
            })
            .unwrap();
        let ca_p = write(dir, "ca.pem", &ca.cert_pem);
        let cert_p = write(dir, "cert.pem", &leaf.cert_pem);
        let key_p = write(dir, "key.pem", &leaf.key_pem);
        server_config(&cert_p, &key_p, Some(&ca_p), &[b"h2"]).unwrap();
        client_config(&ca_p, Some((&cert_p, &key_p)), &[b"h2"]).unwrap();
        let der = load_certs(&cert_p).unwrap();
        assert_eq!(
            peer_common_name(der[0].as_ref()).as_deref(),
            Some("kruntimes-gateway")
        );
    }

    #[test]
    fn missing_or_empty_pem_is_a_clear_error() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let empty = write(dir, "empty.pem", "");
        let e = load_certs(&empty).unwrap_err().to_string();
        assert!(e.contains("no certificate"), "{e}");
        let e = load_key(&dir.join("absent.pem")).unwrap_err().to_string();
        assert!(e.contains("absent.pem"), "{e}");
    }
}
