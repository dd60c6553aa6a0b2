//! A real single-node cluster for end-to-end tests: `kubetest/node/cluster.sh`
//! wrapped for Rust.
//!
//! [`NodeCluster::up`] runs `cluster.sh up` in a fresh directory (etcd, the
//! API server, controller manager, scheduler, kubelet with containerd + runc,
//! kube-proxy and CoreDNS, the node in a network namespace of its own, the
//! project's images imported) and reads the addresses it wrote to
//! `cluster.env`; dropping it runs `cluster.sh down`. A test that failed
//! (the thread is panicking) keeps the directory and prints where its logs
//! are; `KRT_KEEP_NODE=1` keeps it always, with the cluster running.

use std::collections::BTreeMap;
use std::io::Write;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, bail};

use crate::helm::Helm;
use crate::process::tail;

/// A running single-node cluster (see the module documentation).
pub struct NodeCluster {
    dir: PathBuf,
    env: BTreeMap<String, String>,
    keep: bool,
}

/// Where the cluster script lives.
pub fn cluster_script() -> PathBuf {
    kruntimes_testkit::checkout().join("kubetest/node/cluster.sh")
}

/// The standard-library client a client Pod runs (`kubetest/node/client.py`).
pub fn client_script() -> PathBuf {
    kruntimes_testkit::checkout().join("kubetest/node/client.py")
}

impl NodeCluster {
    /// Brings a cluster up in a new directory under the system's temporary
    /// directory (short, so containerd's socket paths stay within bounds).
    pub fn up() -> anyhow::Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("krt-node-")
            .tempdir_in("/tmp")?
            .keep();
        let out = Command::new("bash")
            .arg(cluster_script())
            .arg("up")
            .arg(&dir)
            .stdin(Stdio::null())
            .output()
            .context("run kubetest/node/cluster.sh up")?;
        if !out.status.success() {
            bail!(
                "cluster.sh up {} failed ({}); logs in {}/logs:\n{}",
                dir.display(),
                out.status,
                dir.display(),
                tail(&String::from_utf8_lossy(&out.stderr), 60)
            );
        }
        let env = parse_env(&std::fs::read_to_string(dir.join("cluster.env"))?);
        Ok(Self {
            dir,
            env,
            keep: std::env::var_os("KRT_KEEP_NODE").is_some(),
        })
    }

    /// The cluster's directory (logs in `logs/`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A key of `cluster.env` (`NODE_IP`, `POD_CIDR`, `BIN`, …).
    pub fn env(&self, key: &str) -> anyhow::Result<&str> {
        self.env
            .get(key)
            .map(String::as_str)
            .with_context(|| format!("cluster.env has no {key}"))
    }

    /// The node's InternalIP: its NodePorts are reached there.
    pub fn node_ip(&self) -> anyhow::Result<Ipv4Addr> {
        Ok(self.env("NODE_IP")?.parse()?)
    }

    /// The admin kubeconfig.
    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.join("kubeconfig")
    }

    /// A client with the admin's credentials.
    pub async fn client(&self) -> anyhow::Result<kube::Client> {
        let kubeconfig = kube::config::Kubeconfig::read_from(self.kubeconfig())?;
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
        Ok(kube::Client::try_from(config)?)
    }

    /// `kubectl ARGS` as the admin, returning stdout; a failure carries stderr.
    pub fn kubectl(&self, args: &[&str]) -> anyhow::Result<String> {
        self.kubectl_with_stdin(args, None)
    }

    /// `kubectl apply -f -` of `yaml`.
    pub fn apply(&self, yaml: &str) -> anyhow::Result<String> {
        self.kubectl_with_stdin(&["apply", "-f", "-"], Some(yaml))
    }

    fn kubectl_with_stdin(&self, args: &[&str], stdin: Option<&str>) -> anyhow::Result<String> {
        let kubectl = Path::new(self.env("BIN")?).join("kubectl");
        let mut child = Command::new(kubectl)
            .arg("--kubeconfig")
            .arg(self.kubeconfig())
            .args(args)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("run kubectl {args:?}"))?;
        if let Some(text) = stdin {
            child
                .stdin
                .take()
                .context("kubectl stdin")?
                .write_all(text.as_bytes())?;
        }
        let out = child.wait_with_output()?;
        if !out.status.success() {
            bail!(
                "kubectl {args:?} failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8(out.stdout)?)
    }

    /// `helm ARGS --kubeconfig …` (helm built by [`Helm::new`]), returning stdout.
    pub fn helm(&self, helm: &Helm, args: &[&str]) -> anyhow::Result<String> {
        let kubeconfig = self.kubeconfig();
        let mut all: Vec<&str> = args.to_vec();
        all.extend([
            "--kubeconfig",
            kubeconfig.to_str().context("kubeconfig path")?,
        ]);
        helm.run(&all)
    }

    /// The last `lines` lines of a component's log (`kubelet`, `kube-apiserver`, …).
    pub fn log(&self, component: &str, lines: usize) -> String {
        std::fs::read_to_string(self.dir.join("logs").join(format!("{component}.log")))
            .map(|text| tail(&text, lines))
            .unwrap_or_default()
    }

    /// Stops the cluster now (as drop does), reporting what `down` said.
    pub fn down(mut self) -> anyhow::Result<()> {
        let result = self.run_down();
        self.keep = true; // already down: drop does nothing more
        result?;
        std::fs::remove_dir_all(&self.dir).ok();
        Ok(())
    }

    fn run_down(&self) -> anyhow::Result<()> {
        let out = Command::new("bash")
            .arg(cluster_script())
            .arg("down")
            .arg(&self.dir)
            .stdin(Stdio::null())
            .output()
            .context("run kubetest/node/cluster.sh down")?;
        if !out.status.success() {
            bail!(
                "cluster.sh down {} failed: {}",
                self.dir.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(())
    }
}

impl Drop for NodeCluster {
    fn drop(&mut self) {
        if self.keep {
            return;
        }
        if let Err(e) = self.run_down() {
            eprintln!("{e:#}");
        }
        if std::thread::panicking() {
            eprintln!("node cluster logs kept in {}/logs", self.dir.display());
        } else {
            std::fs::remove_dir_all(&self.dir).ok();
        }
    }
}

/// `KEY=VALUE` lines (comments and blank lines skipped).
fn parse_env(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_lines_are_parsed_and_comments_skipped() {
        let env = parse_env("# header\n\nNODE_IP=10.213.0.2\nAPISERVER=https://10.213.0.2:6443\n");
        assert_eq!(env.len(), 2);
        assert_eq!(env["NODE_IP"], "10.213.0.2");
        assert_eq!(env["APISERVER"], "https://10.213.0.2:6443");
    }
}
