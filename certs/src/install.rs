//! The TLS material of one kruntimes installation, written as PEM files into
//! a directory (keys readable by their owner only): a public CA and the
//! gateway's serving certificate, an internal CA and the certificates of
//! runtimed, the gateway's client identity and the control plane. `krt up`
//! and the Kubernetes test harness both use it.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use crate::{Ca, LeafSpec, Result, write_private};

/// TLS server name on every runtimed certificate.
pub const RUNTIMED_SERVER_NAME: &str = "runtimed.kruntimes.internal";
/// Subject CN and server name of the control plane.
pub const CONTROL_PLANE_NAME: &str = "kruntimes-control-plane";
/// Subject CN of the gateway's client certificate.
pub const GATEWAY_CLIENT_NAME: &str = "kruntimes-gateway";

/// Paths of the generated files.
#[derive(Debug, Clone)]
pub struct InstallPki {
    /// Public CA (clients trust it for the gateway).
    pub public_ca: PathBuf,
    /// Gateway serving certificate (localhost and loopback).
    pub gateway_cert: PathBuf,
    /// Gateway serving key.
    pub gateway_key: PathBuf,
    /// Internal CA.
    pub internal_ca: PathBuf,
    /// runtimed serving certificate.
    pub runtimed_cert: PathBuf,
    /// runtimed key.
    pub runtimed_key: PathBuf,
    /// Gateway client certificate (to runtimed and the control plane).
    pub gateway_client_cert: PathBuf,
    /// Gateway client key.
    pub gateway_client_key: PathBuf,
    /// Control plane certificate (serving its watch, client of runtimed).
    pub control_cert: PathBuf,
    /// Control plane key.
    pub control_key: PathBuf,
}

fn leaf(ca: &Ca, dir: &Path, name: &str, spec: LeafSpec) -> Result<(PathBuf, PathBuf)> {
    let l = ca.issue(&spec)?;
    let cert = dir.join(format!("{name}.crt"));
    let key = dir.join(format!("{name}.key"));
    std::fs::write(&cert, &l.cert_pem).map_err(|source| crate::Error::Write {
        path: cert.display().to_string(),
        source,
    })?;
    write_private(&key, l.key_pem.as_bytes())?;
    Ok((cert, key))
}

impl InstallPki {
    /// Generates fresh CAs and certificates into `dir` (created if needed);
    /// `label` names the CAs, e.g. "kruntimes embedded". The CAs' keys are
    /// written nowhere.
    pub fn generate(dir: &Path, label: &str, valid_days: i64) -> Result<Self> {
        Self::generate_keeping_internal_ca(dir, label, valid_days).map(|(pki, _)| pki)
    }

    /// [`Self::generate`], also returning the internal CA (in memory only),
    /// for a harness that rotates the internal leaves.
    pub fn generate_keeping_internal_ca(
        dir: &Path,
        label: &str,
        valid_days: i64,
    ) -> Result<(Self, Ca)> {
        let write_err = |path: &Path| {
            let path = path.display().to_string();
            move |source| crate::Error::Write { path, source }
        };
        std::fs::create_dir_all(dir).map_err(write_err(dir))?;
        let loopback: Vec<IpAddr> = vec![
            IpAddr::from([127, 0, 0, 1]),
            IpAddr::from([0, 0, 0, 0, 0, 0, 0, 1]),
        ];
        let public = Ca::generate(&format!("{label} public CA"), valid_days)?;
        let internal = Ca::generate(&format!("{label} internal CA"), valid_days)?;
        let public_ca = dir.join("public-ca.crt");
        let internal_ca = dir.join("internal-ca.crt");
        std::fs::write(&public_ca, &public.cert_pem).map_err(write_err(&public_ca))?;
        std::fs::write(&internal_ca, &internal.cert_pem).map_err(write_err(&internal_ca))?;
        let (gateway_cert, gateway_key) = leaf(
            &public,
            dir,
            "gateway",
            LeafSpec {
                common_name: "kruntimes-gateway".into(),
                dns_names: vec!["localhost".into()],
                ips: loopback.clone(),
                server: true,
                valid_days,
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
                valid_days,
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
                valid_days,
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
                valid_days,
            },
        )?;
        Ok((
            Self {
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
            },
            internal,
        ))
    }

    /// Issues new runtimed and gateway-client leaves from `internal` (the
    /// same names and uses) and puts them in place of the old ones, each
    /// file replaced whole (written beside it, then renamed).
    pub fn rotate_internal_leaves(&self, internal: &Ca, valid_days: i64) -> Result<()> {
        let loopback: Vec<IpAddr> = vec![
            IpAddr::from([127, 0, 0, 1]),
            IpAddr::from([0, 0, 0, 0, 0, 0, 0, 1]),
        ];
        for (spec, cert, key) in [
            (
                LeafSpec {
                    common_name: "runtimed".into(),
                    dns_names: vec![RUNTIMED_SERVER_NAME.into()],
                    ips: loopback,
                    server: true,
                    valid_days,
                    ..Default::default()
                },
                &self.runtimed_cert,
                &self.runtimed_key,
            ),
            (
                LeafSpec {
                    common_name: GATEWAY_CLIENT_NAME.into(),
                    client: true,
                    valid_days,
                    ..Default::default()
                },
                &self.gateway_client_cert,
                &self.gateway_client_key,
            ),
        ] {
            let l = internal.issue(&spec)?;
            for (path, pem, private) in [(key, &l.key_pem, true), (cert, &l.cert_pem, false)] {
                let tmp = path.with_extension("rotating");
                if private {
                    write_private(&tmp, pem.as_bytes())?;
                } else {
                    std::fs::write(&tmp, pem).map_err(|source| crate::Error::Write {
                        path: tmp.display().to_string(),
                        source,
                    })?;
                }
                std::fs::rename(&tmp, path).map_err(|source| crate::Error::Write {
                    path: path.display().to_string(),
                    source,
                })?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generates_every_file_with_the_expected_identities() {
        let dir = std::env::temp_dir().join(format!("install-pki-{}", std::process::id()));
        let pki = InstallPki::generate(&dir, "test", 1).unwrap();
        for p in [&pki.public_ca, &pki.gateway_key, &pki.control_key] {
            assert!(p.is_file(), "{}", p.display());
        }
        let cn = |p: &Path| {
            let der = crate::load_certs(p).unwrap();
            crate::peer_common_name(der[0].as_ref()).unwrap()
        };
        assert_eq!(cn(&pki.gateway_client_cert), GATEWAY_CLIENT_NAME);
        assert_eq!(cn(&pki.control_cert), CONTROL_PLANE_NAME);
        let _ = std::fs::remove_dir_all(dir);
    }
}
