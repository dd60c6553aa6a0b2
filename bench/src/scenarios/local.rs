//! The embedded stack every local scenario measures: `krt up` with two
//! runtimed (echo function Runs in Python and Bash on one, a session on the
//! other), the fencing values and owner of the Runs, and the three request
//! paths built on them (gateway, gateway to Bash, direct to runtimed).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use kruntimes_testkit::{Options, Stack, function_run};

use super::{BODY, ECHO_PY};
use crate::paths::{self, Fence, HttpTarget, Pki};

/// The Bash echo handler.
const ECHO_SH: &str = "echo() {\n  printf '%s\\n' \"$1\"\n}\n";

/// A session on the second runtimed (sessions hold a Pod alone).
const SANDBOX_YAML: &str = "apiVersion: kruntimes.io/v1alpha1\nkind: Run\nmetadata:\n  name: sandbox\nspec:\n  runtime: bash\n  mode:\n    session:\n      queueSize: 64\n";

/// The running stack and what the scenarios need to know about it.
pub(super) struct Local {
    /// The `krt` binary (extra gateways run it too).
    pub(super) krt: PathBuf,
    /// The stack (stopped on drop).
    pub(super) stack: Stack,
    /// The stack's PKI files.
    pub(super) pki: Pki,
    /// The Python echo Run.
    pub(super) py: Fence,
    /// The owner runtimed's dataplane address.
    pub(super) owner: SocketAddr,
    /// The stack's gateway process.
    pub(super) gateway_pid: u32,
    /// The control plane's watch address, for extra gateways.
    pub(super) control_plane: String,
    /// Python echo through the stack's gateway.
    pub(super) gateway: HttpTarget,
    /// Bash echo through the stack's gateway.
    pub(super) gateway_sh: HttpTarget,
    /// Python echo straight to the owner runtimed.
    pub(super) direct: HttpTarget,
    /// Worker threads of the gateway; bare Pingora gets as many.
    pub(super) gateway_threads: u16,
    /// Scratch space: baseline configs, logs, the spawn handler. Declared
    /// after the stack, so removed after it stopped.
    pub(super) tmp: tempfile::TempDir,
}

impl Local {
    /// Starts the stack with `krt`, its gateway on `gateway_threads`
    /// worker threads, and waits for the echo Runs; the paths' clients are
    /// held to HTTP/1.1 with `http1_only`.
    pub(super) async fn start(
        krt: PathBuf,
        gateway_threads: u16,
        http1_only: bool,
    ) -> anyhow::Result<Self> {
        Self::start_with(krt, gateway_threads, http1_only, Vec::new()).await
    }

    /// [`Self::start`] with more `krt up` flags.
    pub(super) async fn start_with(
        krt: PathBuf,
        gateway_threads: u16,
        http1_only: bool,
        mut extra: Vec<String>,
    ) -> anyhow::Result<Self> {
        extra.extend(["--gateway-threads".into(), gateway_threads.to_string()]);
        if !krt.exists() {
            bail!(
                "{} not found: build it with `cargo build --release -p krt` or pass --krt",
                krt.display()
            );
        }
        let runs = vec![
            (
                "echo-sh.yaml".to_owned(),
                function_run("echo-sh", "bash", "echo.echo", "echo.sh", ECHO_SH, ""),
            ),
            (
                "echo-py.yaml".to_owned(),
                function_run("echo-py", "python", "main.invoke", "main.py", ECHO_PY, ""),
            ),
            ("sandbox.yaml".to_owned(), SANDBOX_YAML.to_owned()),
        ];
        let krt2 = krt.clone();
        let stack = tokio::task::spawn_blocking(move || {
            Stack::start(
                &krt2,
                Options {
                    env: Vec::new(),
                    runtimed: 2,
                    max_runtimed: None,
                    runs,
                    // The gateway as `krt up` configures it (access log on);
                    // nginx and HAProxy run without access logs.
                    extra_args: extra,
                },
            )
        })
        .await??;
        let py = fence(&stack.wait_phase("echo-py", "Ready").await?)?;
        let sh = fence(&stack.wait_phase("echo-sh", "Ready").await?)?;
        let pki = Pki {
            dir: stack.state_dir().join("pki"),
            http1_only,
        };
        let procs = stack.processes()?;
        let owner = owner_address(&stack, &stack.run("echo-py").context("echo-py status")?)?;
        let gateway_pid = procs["gateway"]["pid"].as_u64().context("gateway pid")? as u32;
        let control_plane = control_plane(&stack.state_dir())?;
        let gateway = paths::via_proxy(&pki, &stack.gateway, &py, Some(&stack.token), BODY)?;
        let gateway_sh = paths::via_proxy(&pki, &stack.gateway, &sh, Some(&stack.token), BODY)?;
        let direct = paths::direct(&pki, owner, &py, BODY)?;
        Ok(Self {
            krt,
            stack,
            pki,
            py,
            owner,
            gateway_pid,
            control_plane,
            gateway,
            gateway_sh,
            direct,
            gateway_threads,
            tmp: tempfile::tempdir()?,
        })
    }
}

/// The fencing values of a Run from the stack's status of it.
pub(super) fn fence(run: &serde_json::Value) -> anyhow::Result<Fence> {
    Ok(Fence {
        uid: run["uid"].as_str().context("uid")?.to_owned(),
        pod_uid: run["assignedPodUid"]
            .as_str()
            .context("assignedPodUid")?
            .to_owned(),
        attempt: run["attempt"].as_u64().context("attempt")?,
        namespace: run["namespace"].as_str().context("namespace")?.to_owned(),
        runtime: run["runtime"].as_str().context("runtime")?.to_owned(),
    })
}

/// The dataplane address of the runtimed that owns `run` (its status).
pub(super) fn owner_address(stack: &Stack, run: &serde_json::Value) -> anyhow::Result<SocketAddr> {
    let pod = run["assignedPod"].as_str().context("owner of the Run")?;
    Ok(stack.processes()?[pod]["address"]
        .as_str()
        .context("runtimed address")?
        .parse()?)
}

/// The control plane's address from the stack's `client.json`.
fn control_plane(state_dir: &Path) -> anyhow::Result<String> {
    let client: serde_json::Value =
        serde_json::from_slice(&std::fs::read(state_dir.join("client.json"))?)?;
    Ok(client["controlPlane"]
        .as_str()
        .context("controlPlane")?
        .to_owned())
}
