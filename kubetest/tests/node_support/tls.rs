//! The certificates a node test looks at: the gateway's internal identity
//! (to reach runtimed as the gateway does), the serials in Secrets and the
//! serials served by a handshake.

use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use base64::Engine as _;

use super::{FULLNAME, Installed, NAMESPACE, RUNTIMED_HOST, diagnose, get_json};

impl Installed {
    /// A client for a runtimed's dataplane at `pod_ip:7443` with the gateway's
    /// internal identity (the Secret the operator keeps), as the gateway calls it.
    pub fn runtimed_client(&self, pod_ip: &str) -> reqwest::Client {
        let (ca, cert, key) = self.internal_gateway_identity();
        let mut pem = cert.into_bytes();
        pem.extend(key.into_bytes());
        reqwest::Client::builder()
            .add_root_certificate(reqwest::Certificate::from_pem(ca.as_bytes()).unwrap())
            .tls_built_in_root_certs(false)
            .identity(reqwest::Identity::from_pem(&pem).unwrap())
            .resolve(
                RUNTIMED_HOST,
                SocketAddr::new(pod_ip.parse().unwrap(), 7443),
            )
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap()
    }

    fn internal_gateway_identity(&self) -> (String, String, String) {
        let s = get_json(
            &self.node,
            &[
                "get",
                "secret",
                "-n",
                NAMESPACE,
                &format!("{FULLNAME}-internal-gateway"),
            ],
        );
        let field = |k: &str| {
            String::from_utf8(
                base64::engine::general_purpose::STANDARD
                    .decode(s["data"][k].as_str().unwrap_or_else(|| panic!("no {k}")))
                    .unwrap(),
            )
            .unwrap()
        };
        (field("ca.crt"), field("tls.crt"), field("tls.key"))
    }

    /// The serial number of `tls.crt` in a Secret of the release namespace
    /// (empty while the Secret is missing).
    pub fn secret_serial(&self, name: &str) -> String {
        let Ok(pem) = self.node.kubectl(&[
            "get",
            "secret",
            "-n",
            NAMESPACE,
            name,
            "-o",
            "jsonpath={.data.tls\\.crt}",
        ]) else {
            return String::new();
        };
        let pem = base64::engine::general_purpose::STANDARD
            .decode(pem.trim())
            .unwrap_or_default();
        openssl_serial(&pem)
    }

    pub async fn wait_secret_serial_changes(&self, name: &str, old: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let serial = self.secret_serial(name);
            if !serial.is_empty() && serial != old {
                return serial;
            }
            assert!(
                Instant::now() < deadline,
                "the operator did not reissue {name}\n{}",
                diagnose(&self.node)
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// The serial number of the certificate served at `ip:port` for `sni`
    /// (`openssl s_client`, with the gateway's internal identity so runtimed
    /// completes the handshake too).
    pub fn served_serial(&self, ip: &str, port: u16, sni: &str) -> String {
        let (_, cert, key) = self.internal_gateway_identity();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("c.pem"), cert).unwrap();
        std::fs::write(dir.path().join("k.pem"), key).unwrap();
        let out = Command::new("openssl")
            .args([
                "s_client",
                "-connect",
                &format!("{ip}:{port}"),
                "-servername",
                sni,
                "-showcerts",
            ])
            .arg("-cert")
            .arg(dir.path().join("c.pem"))
            .arg("-key")
            .arg(dir.path().join("k.pem"))
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let Some(start) = text.find("-----BEGIN CERTIFICATE-----") else {
            return String::new();
        };
        openssl_serial(text[start..].as_bytes())
    }
}

fn openssl_serial(pem: &[u8]) -> String {
    use std::io::Write as _;
    let mut child = Command::new("openssl")
        .args(["x509", "-noout", "-serial"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(pem).ok();
    let out = child.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}
