//! Gateway processes the harness starts beside the stack's own, on the same
//! PKI and with as many worker threads as the stack's, without an access
//! log: one with authentication disabled, one with Kubernetes authentication, and one
//! watching a synthetic control plane.

use std::path::Path;
use std::process::{Child, Command, Stdio};

use anyhow::Context as _;

use crate::paths::Pki;

/// A gateway process started by the harness, killed on drop.
pub(super) struct ExtraGateway {
    child: Child,
    /// Its HTTPS base URL.
    pub(super) url: String,
    /// Its metrics URL (`--metrics-listen`, plain HTTP).
    pub(super) metrics_url: String,
}

impl ExtraGateway {
    /// The process id.
    pub(super) fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for ExtraGateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How an extra gateway authenticates.
pub(super) enum GatewayAuth<'a> {
    /// Disabled.
    None,
    /// TokenReview + SubjectAccessReview with this kubeconfig.
    Kubernetes(&'a Path),
}

/// Starts `krt gateway` on a free port, watching `control_plane`, logging
/// to `log`, on `threads` worker threads (the stack's gateway's).
pub(super) fn start(
    krt: &Path,
    pki: &Pki,
    control_plane: &str,
    auth: GatewayAuth<'_>,
    log: &Path,
    threads: u16,
) -> anyhow::Result<ExtraGateway> {
    let port = kruntimes_testkit::free_port();
    let metrics_port = kruntimes_testkit::free_port();
    let f = |n: &str| pki.file(n).display().to_string();
    let mut cmd = Command::new(krt);
    cmd.args(["gateway", "--exit-with-parent", "--https-listen"])
        .arg(format!("127.0.0.1:{port}"))
        .args([
            "--tls-cert",
            &f("gateway.crt"),
            "--tls-key",
            &f("gateway.key"),
        ])
        .args(["--control-plane", control_plane])
        .args(["--internal-ca", &f("internal-ca.crt")])
        .args([
            "--client-cert",
            &f("gateway-client.crt"),
            "--client-key",
            &f("gateway-client.key"),
        ]);
    match auth {
        GatewayAuth::None => {
            cmd.args(["--auth", "none"]);
        }
        GatewayAuth::Kubernetes(kubeconfig) => {
            cmd.args(["--auth", "kubernetes", "--kubeconfig"])
                .arg(kubeconfig);
        }
    }
    // As many threads as the stack's own gateway; no access log.
    cmd.arg("--threads")
        .arg(threads.to_string())
        .args(["--access-log", "false"])
        .arg("--metrics-listen")
        .arg(format!("127.0.0.1:{metrics_port}"));
    let out = std::fs::File::create(log)?;
    let child = cmd
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        .spawn()
        .context("start an extra gateway")?;
    Ok(ExtraGateway {
        child,
        url: format!("https://127.0.0.1:{port}"),
        metrics_url: format!("http://127.0.0.1:{metrics_port}/metrics"),
    })
}
