//! The two processes of a test API server: the command lines of etcd and
//! kube-apiserver, free loopback ports for them, stopping them, and the tail
//! of a log for error messages.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::pki;
use crate::pki::{API_AUDIENCE, SA_ISSUER};
use crate::server::ApiServerOptions;

/// A free loopback TCP port.
pub(crate) fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Starts etcd with its data in `dir`, serving clients on `url` and peers on
/// `peer_port`; it logs warnings to `dir/etcd.log`.
pub(crate) fn start_etcd(
    bins: &Path,
    dir: &Path,
    url: &str,
    peer_port: u16,
) -> anyhow::Result<Child> {
    Command::new(bins.join("etcd"))
        .arg("--name=kubetest")
        .arg(format!("--data-dir={}", dir.join("etcd").display()))
        .arg(format!("--listen-client-urls={url}"))
        .arg(format!("--advertise-client-urls={url}"))
        .arg(format!("--listen-peer-urls=http://127.0.0.1:{peer_port}"))
        .arg(format!(
            "--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}"
        ))
        .arg(format!(
            "--initial-cluster=kubetest=http://127.0.0.1:{peer_port}"
        ))
        .arg("--unsafe-no-fsync")
        .arg("--log-level=warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("etcd.log"))?)
        .spawn()
        .context("start etcd")
}

/// Starts kube-apiserver on `port` over the etcd at `etcd_url`, with the
/// credentials [`pki::write`] put in `dir`; it appends to
/// `dir/kube-apiserver.log` (a restart keeps the earlier lines). The
/// default admission plugins run (`PodSecurity` among them), the
/// `ServiceAccount` one only when `options` ask for it.
pub(crate) fn start_kube_apiserver(
    bins: &Path,
    dir: &Path,
    etcd_url: &str,
    port: u16,
    options: ApiServerOptions,
) -> anyhow::Result<Child> {
    let file = |name: &str| dir.join(name).display().to_string();
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("kube-apiserver.log"))?;
    let mut command = Command::new(bins.join("kube-apiserver"));
    if !options.service_account_admission {
        // No controller manager creates `default` ServiceAccounts here.
        command.arg("--disable-admission-plugins=ServiceAccount");
    }
    command
        .arg(format!("--etcd-servers={etcd_url}"))
        .arg("--bind-address=127.0.0.1")
        .arg("--advertise-address=127.0.0.1")
        .arg(format!("--secure-port={port}"))
        .arg(format!("--cert-dir={}", file("certs")))
        .arg(format!("--tls-cert-file={}", file(pki::SERVING_CERT)))
        .arg(format!("--tls-private-key-file={}", file(pki::SERVING_KEY)))
        .arg(format!("--token-auth-file={}", file(pki::TOKENS_CSV)))
        .arg("--authorization-mode=RBAC")
        .arg(format!("--service-account-issuer={SA_ISSUER}"))
        .arg(format!("--api-audiences={API_AUDIENCE}"))
        .arg(format!("--service-account-key-file={}", file(pki::SA_PUB)))
        .arg(format!(
            "--service-account-signing-key-file={}",
            file(pki::SA_KEY)
        ))
        .arg("--service-cluster-ip-range=10.96.0.0/24")
        .arg("--allow-privileged=true")
        .arg("--v=1")
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .context("start kube-apiserver")
}

/// Stops `child`: SIGTERM first so etcd and the API server shut down
/// cleanly, SIGKILL after 10 s.
pub(crate) fn stop(child: &mut Child) {
    let pid = child.id() as i32;
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(pid.to_string())
        .status();
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if matches!(child.try_wait(), Ok(Some(_))) {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// The last `n` lines of `text`.
pub(crate) fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_keeps_the_last_lines() {
        assert_eq!(tail("a\nb\nc", 2), "b\nc");
        assert_eq!(tail("a", 5), "a");
        assert_eq!(tail("", 3), "");
    }
}
