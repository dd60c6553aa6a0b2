//! nginx, HAProxy and bare Pingora as TLS reverse proxies in front of the
//! same runtimed, with the same certificates and keep-alive to the upstream,
//! adding the same fencing headers (statically: they do no routing). The
//! harness finds the binaries (or installs nginx and HAProxy with apt-get
//! when asked; bare Pingora is `kruntimes-pingora-baseline`, built with the
//! bench) and writes configs.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

use crate::paths::{Fence, Pki, direct_headers};

/// A running baseline proxy.
pub struct Baseline {
    /// `nginx`, `haproxy` or `pingora`.
    pub name: &'static str,
    /// Base URL.
    pub url: String,
    child: Child,
}

impl Baseline {
    /// The main process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Baseline {
    fn drop(&mut self) {
        // SIGTERM lets the master stop its workers (SIGKILL would orphan
        // nginx's workers); force it only if that does not happen in time.
        if let Ok(pid) = i32::try_from(self.child.id()) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn find(bin: &str) -> Option<PathBuf> {
    ["/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin"]
        .iter()
        .map(|d| Path::new(d).join(bin))
        .find(|p| p.exists())
}

/// Finds a binary, installing `package` with apt-get when `install` is set.
pub fn ensure(bin: &str, package: &str, install: bool) -> anyhow::Result<PathBuf> {
    if let Some(p) = find(bin) {
        return Ok(p);
    }
    if !install {
        bail!("{bin} not found (install {package}, or pass --install-baselines)");
    }
    let ok = Command::new("apt-get")
        .args(["install", "-y", "--no-install-recommends", package])
        .env("DEBIAN_FRONTEND", "noninteractive")
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !ok {
        let _ = Command::new("apt-get").arg("update").status();
        Command::new("apt-get")
            .args(["install", "-y", "--no-install-recommends", package])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()?;
    }
    find(bin).with_context(|| format!("{bin} still missing after installing {package}"))
}

fn wait_port(addr: SocketAddr, child: &mut Child, name: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if std::net::TcpStream::connect(addr).is_ok() {
            return Ok(());
        }
        if let Some(status) = child.try_wait()? {
            bail!("{name} exited during start-up ({status})");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    bail!("{name} did not listen on {addr}")
}

/// Starts a proxy in the foreground and waits until it listens on `port`.
fn launch(name: &'static str, mut cmd: Command, port: u16) -> anyhow::Result<Baseline> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("start {name}"))?;
    wait_port(SocketAddr::from(([127, 0, 0, 1], port)), &mut child, name)?;
    Ok(Baseline {
        name,
        url: format!("https://127.0.0.1:{port}"),
        child,
    })
}

/// Starts nginx (HTTPS + HTTP/2 downstream, TLS + keep-alive upstream).
pub fn nginx(
    bin: &Path,
    dir: &Path,
    pki: &Pki,
    port: u16,
    owner: SocketAddr,
    fence: &Fence,
    workers: usize,
) -> anyhow::Result<Baseline> {
    std::fs::create_dir_all(dir.join("logs"))?;
    let set_headers: String = direct_headers(fence)
        .iter()
        .filter(|(k, _)| *k != "content-type")
        .map(|(k, v)| format!("      proxy_set_header {k} \"{v}\";\n"))
        .collect();
    let conf = format!(
        r#"worker_processes {workers};
daemon off;
pid {dir}/nginx.pid;
error_log {dir}/logs/error.log warn;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  client_body_temp_path {dir}/body;
  proxy_temp_path {dir}/proxy;
  upstream runtimed {{
    server {owner};
    keepalive 64;
  }}
  server {{
    listen 127.0.0.1:{port} ssl http2;
    ssl_certificate {cert};
    ssl_certificate_key {key};
    ssl_protocols TLSv1.3;
    keepalive_requests 1000000;
    location / {{
      proxy_pass https://runtimed;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Authorization "";
{set_headers}      proxy_ssl_certificate {client_cert};
      proxy_ssl_certificate_key {client_key};
      proxy_ssl_trusted_certificate {ca};
      proxy_ssl_verify on;
      proxy_ssl_name runtimed.kruntimes.internal;
      proxy_ssl_server_name on;
      proxy_ssl_session_reuse on;
      proxy_buffering off;
    }}
  }}
}}
"#,
        dir = dir.display(),
        cert = pki.file("gateway.crt").display(),
        key = pki.file("gateway.key").display(),
        client_cert = pki.file("gateway-client.crt").display(),
        client_key = pki.file("gateway-client.key").display(),
        ca = pki.file("internal-ca.crt").display(),
    );
    let path = dir.join("nginx.conf");
    std::fs::write(&path, conf)?;
    let mut cmd = Command::new(bin);
    cmd.arg("-c").arg(&path).arg("-p").arg(dir);
    launch("nginx", cmd, port)
}

/// Starts HAProxy (HTTPS + HTTP/2 downstream, TLS + HTTP/2 upstream).
pub fn haproxy(
    bin: &Path,
    dir: &Path,
    pki: &Pki,
    port: u16,
    owner: SocketAddr,
    fence: &Fence,
    threads: usize,
) -> anyhow::Result<Baseline> {
    std::fs::create_dir_all(dir)?;
    let combine = |cert: &str, key: &str, out: &str| -> anyhow::Result<PathBuf> {
        let mut pem = std::fs::read(pki.file(cert))?;
        pem.extend(std::fs::read(pki.file(key))?);
        let p = dir.join(out);
        std::fs::write(&p, pem)?;
        Ok(p)
    };
    let front = combine("gateway.crt", "gateway.key", "front.pem")?;
    let back = combine("gateway-client.crt", "gateway-client.key", "back.pem")?;
    let set_headers: String = direct_headers(fence)
        .iter()
        .filter(|(k, _)| *k != "content-type")
        .map(|(k, v)| format!("  http-request set-header {k} \"{v}\"\n"))
        .collect();
    let conf = format!(
        r#"global
  nbthread {threads}
  tune.ssl.default-dh-param 2048
defaults
  mode http
  timeout connect 2s
  timeout client 60s
  timeout server 60s
  timeout http-keep-alive 60s
frontend fe
  bind 127.0.0.1:{port} ssl crt {front} alpn h2,http/1.1
  http-request del-header authorization
{set_headers}  default_backend be
backend be
  http-reuse always
  server rt {owner} ssl verify required ca-file {ca} crt {back} sni str(runtimed.kruntimes.internal) alpn h2
"#,
        front = front.display(),
        back = back.display(),
        ca = pki.file("internal-ca.crt").display(),
    );
    let path = dir.join("haproxy.cfg");
    std::fs::write(&path, conf)?;
    let mut cmd = Command::new(bin);
    cmd.arg("-f").arg(&path).arg("-db");
    launch("haproxy", cmd, port)
}

/// Starts bare Pingora (`kruntimes-pingora-baseline`: the gateway's Pingora
/// and TLS, HTTP/2 downstream, `upstream_protocol` with mTLS upstream, no
/// auth, routing, limits or metrics) on `threads` worker threads.
pub fn pingora(
    bin: &Path,
    pki: &Pki,
    port: u16,
    owner: SocketAddr,
    fence: &Fence,
    upstream_protocol: &str,
    threads: u16,
) -> anyhow::Result<Baseline> {
    let mut cmd = Command::new(bin);
    cmd.arg("--listen")
        .arg(format!("127.0.0.1:{port}"))
        .arg("--cert")
        .arg(pki.file("gateway.crt"))
        .arg("--key")
        .arg(pki.file("gateway.key"))
        .arg("--upstream")
        .arg(owner.to_string())
        .arg("--upstream-ca")
        .arg(pki.file("internal-ca.crt"))
        .arg("--client-cert")
        .arg(pki.file("gateway-client.crt"))
        .arg("--client-key")
        .arg(pki.file("gateway-client.key"))
        .arg("--server-name")
        .arg("runtimed.kruntimes.internal")
        .arg("--upstream-protocol")
        .arg(upstream_protocol)
        .arg("--threads")
        .arg(threads.to_string());
    for (k, v) in direct_headers(fence) {
        if k != "content-type" {
            cmd.arg("--header").arg(format!("{k}={v}"));
        }
    }
    launch("pingora", cmd, port)
}
