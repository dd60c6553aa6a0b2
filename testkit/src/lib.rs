//! Test support for end-to-end tests: starts a real `krt up` stack (control
//! plane, runtimed processes, Pingora gateway, real TLS, real Python) in a
//! temporary state directory and offers typed helpers to drive it. The stack
//! is stopped (SIGTERM, then SIGKILL) when the [`Stack`] is dropped.

use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::Value;

mod binary;
pub mod fixtures;
mod paths;
pub mod s3;
pub mod tools;
pub mod wire;

pub use binary::{KRT_VARIABLE, krt_binary};
pub use paths::{checkout, package_dir};
pub use s3::S3Server;

/// What an end-to-end test file imports: the stack, its fixtures and the
/// readers of answers.
pub mod prelude {
    pub use crate::fixtures::*;
    pub use crate::wire::*;
}

/// Waits until `log()` holds every line the gateway at `gateway` logged
/// before the call. The gateway writes its log in batches, in order, up to
/// a second apart: this sends it an invoke of no Run, carrying a fresh
/// invocation id and no credentials — rejected, and access-logged like
/// every invoke — and waits for that id. Checks that read a running
/// gateway's log (no token in it, a rejection logged) call it first, so
/// they read all of it.
pub async fn settle_gateway_log(
    http: &reqwest::Client,
    gateway: &str,
    log: impl Fn() -> String,
) -> anyhow::Result<()> {
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let marker = format!("log-settled-{}-{seq}", std::process::id());
    // A well-formed path of a Run that does not exist.
    let uid = format!("00000000-0000-4000-8000-{:012x}", seq);
    let url = format!("{gateway}/v1/namespaces/kruntimes-test/runtimes/none/runs/{uid}:invoke");
    http.post(url)
        .header(kruntimes_proto::api::HEADER_INVOCATION_ID, &marker)
        .send()
        .await
        .context("the log marker's request")?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while !log().contains(&marker) {
        if Instant::now() > deadline {
            bail!("the gateway never logged {marker} (is its access log off?)");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

/// How to start a stack.
#[derive(Debug, Clone)]
pub struct Options {
    /// runtimed instances at start (the pool's floor).
    pub runtimed: usize,
    /// The pool's ceiling, when it follows demand as `krt up`'s does by
    /// default; `None`: a fixed set of `runtimed` instances, so a test
    /// knows where its Runs can go.
    pub max_runtimed: Option<usize>,
    /// Run manifests written before start: (file name, YAML).
    pub runs: Vec<(String, String)>,
    /// Extra `krt up` flags.
    pub extra_args: Vec<String>,
    /// Extra environment of `krt up` (and so of its runtimed instances;
    /// never of the Runtime Servers, which start with a clean one).
    pub env: Vec<(String, String)>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            runtimed: 2,
            max_runtimed: None,
            runs: Vec::new(),
            extra_args: Vec::new(),
            env: Vec::new(),
        }
    }
}

/// A running embedded stack.
pub struct Stack {
    krt: PathBuf,
    child: Child,
    dir: tempfile::TempDir,
    /// Gateway base URL.
    pub gateway: String,
    /// Admin bearer token.
    pub token: String,
    /// HTTPS client trusting the stack's public CA.
    pub http: reqwest::Client,
    output: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

/// A loopback port that was free a moment ago.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(0)
}

/// Whether process `pid` is gone: no such process, or a zombie waiting for
/// a reaper (an orphan's reaper may be a PID 1 that never reaps).
pub fn process_gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state == "Z" || state == "X"),
    }
}

/// The voluntary context switches of a thread (`/proc/PID/task/TID`, or
/// `/proc/PID` for the main thread): they grow each time it wakes up.
pub fn wake_ups(task: &Path) -> u64 {
    std::fs::read_to_string(task.join("status"))
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or_else(|| panic!("no voluntary_ctxt_switches in {}/status", task.display()))
}

/// Every live descendant of process `pid` (children, grandchildren, …),
/// read from `/proc`.
pub fn descendants(pid: i32) -> Vec<i32> {
    let mut parents: BTreeMap<i32, Vec<i32>> = BTreeMap::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let Some((head, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let mut fields = rest.split_whitespace();
        let (Some(_state), Some(ppid)) = (fields.next(), fields.next()) else {
            continue;
        };
        if let (Ok(child), Ok(ppid)) = (
            head.split_once(" (")
                .map_or("", |h| h.0)
                .trim()
                .parse::<i32>(),
            ppid.parse::<i32>(),
        ) {
            parents.entry(ppid).or_default().push(child);
        }
    }
    let mut out = Vec::new();
    let mut frontier = vec![pid];
    while let Some(p) = frontier.pop() {
        for c in parents.get(&p).into_iter().flatten() {
            if !out.contains(c) && *c != pid {
                out.push(*c);
                frontier.push(*c);
            }
        }
    }
    out.retain(|p| !process_gone(*p));
    out
}

/// Waits until every process of `pids` is gone, for at most `within`
/// (generous: containment is asserted, never its speed); returns the ones
/// still alive.
pub async fn wait_gone(pids: &[i32], within: Duration) -> Vec<i32> {
    let deadline = Instant::now() + within;
    loop {
        let alive: Vec<i32> = pids.iter().copied().filter(|p| !process_gone(*p)).collect();
        if alive.is_empty() || Instant::now() > deadline {
            return alive;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Reads the pids written (one per line, or space-separated) into `path`,
/// waiting up to `within` for the file to hold `count` of them.
pub async fn read_pids(path: &Path, count: usize, within: Duration) -> anyhow::Result<Vec<i32>> {
    let deadline = Instant::now() + within;
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let pids: Vec<i32> = text
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect();
        if pids.len() >= count {
            return Ok(pids);
        }
        if Instant::now() > deadline {
            bail!("{} holds {pids:?}, expected {count} pids", path.display());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A function Run manifest with inline source.
pub fn function_run(
    name: &str,
    runtime: &str,
    handler: &str,
    inline_path: &str,
    source: &str,
    extra_function_fields: &str,
) -> String {
    let indented: String = source.lines().map(|l| format!("      {l}\n")).collect();
    format!(
        "apiVersion: kruntimes.io/v1alpha1\nkind: Run\nmetadata:\n  name: {name}\n  namespace: default\nspec:\n  runtime: {runtime}\n  source:\n    inlinePath: {inline_path}\n    inline: |\n{indented}  mode:\n    function:\n      handler: {handler}\n{extra_function_fields}"
    )
}

impl Stack {
    /// Starts `krt up` and waits for its ready line. The gateway's port was
    /// free when picked, but tests run side by side and another may bind it
    /// first: a start that fails on a taken address is tried again on
    /// another port, a few times.
    pub fn start(krt: &Path, opts: Options) -> anyhow::Result<Self> {
        let mut attempt = 1;
        loop {
            match Self::start_once(krt, &opts) {
                Err(e) if attempt < 4 && format!("{e:#}").contains("Address already in use") => {
                    eprintln!("krt up found an address taken (attempt {attempt}); starting again");
                    attempt += 1;
                }
                r => return r,
            }
        }
    }

    fn start_once(krt: &Path, opts: &Options) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let runs = dir.path().join("runs");
        std::fs::create_dir_all(&runs)?;
        for (file, yaml) in &opts.runs {
            std::fs::write(runs.join(file), yaml)?;
        }
        let port = free_port();
        let mut child = Command::new(krt)
            .arg("--state-dir")
            .arg(dir.path().join("state"))
            .arg("up")
            .arg("--runs")
            .arg(&runs)
            .arg("--gateway-addr")
            .arg(format!("127.0.0.1:{port}"))
            .arg("--runtimed")
            .arg(opts.runtimed.to_string())
            .arg("--max-runtimed")
            .arg(opts.max_runtimed.unwrap_or(opts.runtimed).to_string())
            .arg("--exit-with-parent")
            .args(&opts.extra_args)
            .envs(opts.env.iter().cloned())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("spawn krt up")?;
        let output = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (tx, rx) = mpsc::channel::<String>();
        for stream in [
            child
                .stdout
                .take()
                .map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
            child
                .stderr
                .take()
                .map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
        ]
        .into_iter()
        .flatten()
        {
            let tx = tx.clone();
            let out = output.clone();
            std::thread::spawn(move || {
                for line in std::io::BufReader::new(stream)
                    .lines()
                    .map_while(Result::ok)
                {
                    out.lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push(line.clone());
                    let _ = tx.send(line);
                }
            });
        }
        // Only the readers hold senders: the channel ends with their pipes.
        drop(tx);
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            match rx.recv_timeout(Duration::from_millis(200)) {
                Ok(line) if line.starts_with("kruntimes ready") => break,
                Ok(_) | Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    // Both pipes closed, so krt up has ended and all it
                    // said has been read.
                    let status = child.wait()?;
                    bail!(
                        "krt up exited ({status}) before it was ready:\n{}",
                        output.lock().unwrap_or_else(|p| p.into_inner()).join("\n")
                    );
                }
            }
            if let Some(status) = child.try_wait()? {
                // Its last lines may still be on their way through the
                // readers: the report names the cause (a taken address is
                // retried on it). Bounded: a child of krt's may hold a pipe.
                let drained = Instant::now() + Duration::from_secs(2);
                while Instant::now() < drained {
                    match rx.recv_timeout(Duration::from_millis(50)) {
                        Err(mpsc::RecvTimeoutError::Disconnected) => break,
                        Ok(_) | Err(mpsc::RecvTimeoutError::Timeout) => {}
                    }
                }
                bail!(
                    "krt up exited ({status}) before it was ready:\n{}",
                    output.lock().unwrap_or_else(|p| p.into_inner()).join("\n")
                );
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                bail!("krt up was not ready within 120 s");
            }
        }
        let client: Value =
            serde_json::from_slice(&std::fs::read(dir.path().join("state/client.json"))?)?;
        let ca = std::fs::read(client["caFile"].as_str().context("caFile")?)?;
        let http = reqwest::Client::builder()
            .add_root_certificate(reqwest::Certificate::from_pem(&ca)?)
            .pool_max_idle_per_host(8)
            .build()?;
        Ok(Self {
            krt: krt.to_path_buf(),
            child,
            gateway: client["gateway"].as_str().context("gateway")?.to_owned(),
            token: client["token"].as_str().context("token")?.to_owned(),
            http,
            dir,
            output,
        })
    }

    /// The stack's state directory.
    pub fn state_dir(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    /// The watched runs directory.
    pub fn runs_dir(&self) -> PathBuf {
        self.dir.path().join("runs")
    }

    /// Writes a Run manifest file.
    pub fn add_run(&self, file: &str, yaml: &str) -> anyhow::Result<()> {
        let tmp = self.dir.path().join(format!(".{file}.tmp"));
        std::fs::write(&tmp, yaml)?;
        std::fs::rename(tmp, self.runs_dir().join(file))?;
        Ok(())
    }

    /// Removes a Run manifest file.
    pub fn remove_run(&self, file: &str) -> anyhow::Result<()> {
        Ok(std::fs::remove_file(self.runs_dir().join(file))?)
    }

    /// `runs.json` entries.
    pub fn runs(&self) -> anyhow::Result<Vec<Value>> {
        let v: Value = serde_json::from_slice(&std::fs::read(self.state_dir().join("runs.json"))?)?;
        Ok(v["runs"].as_array().cloned().unwrap_or_default())
    }

    /// The status of a Run, if listed.
    pub fn run(&self, name: &str) -> Option<Value> {
        self.runs().ok()?.into_iter().find(|r| r["name"] == name)
    }

    /// Waits until `pred` holds for the Run's status.
    pub async fn wait_run(
        &self,
        name: &str,
        timeout: Duration,
        pred: impl Fn(&Value) -> bool,
    ) -> anyhow::Result<Value> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(r) = self.run(name)
                && pred(&r)
            {
                return Ok(r);
            }
            if Instant::now() > deadline {
                bail!(
                    "run {name} did not reach the expected state; last: {:?}",
                    self.run(name)
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until the Run is in `phase`; for `Ready`, also until the
    /// gateway routes it (its table converges a moment after `runs.json`).
    pub async fn wait_phase(&self, name: &str, phase: &str) -> anyhow::Result<Value> {
        let run = self
            .wait_run(name, Duration::from_secs(60), |r| r["phase"] == phase)
            .await?;
        if phase == "Ready" {
            self.wait_routable(&run).await?;
        }
        Ok(run)
    }

    /// Polls until the gateway forwards requests for `run` to its owner,
    /// without executing anything: a function gets an invalid JSON body
    /// (the owner answers 400 `InvalidJson`), a session a status read.
    pub async fn wait_routable(&self, run: &Value) -> anyhow::Result<()> {
        let endpoint = run["endpoint"].as_str().context("endpoint")?;
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let session = run["mode"].as_str() == Some("session");
            let routed =
                kruntimes_client::gateway::routes(&self.http, Some(&self.token), endpoint, session)
                    .await;
            if routed {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("the gateway did not route {} within 15 s", run["name"]);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The working directory of a listed Run on its Runtime Server
    /// (`STATE_DIR/work/<assigned runtimed>/<uid>`).
    pub fn work_dir(&self, name: &str) -> anyhow::Result<PathBuf> {
        let run = self
            .run(name)
            .with_context(|| format!("run {name} not listed"))?;
        let pod = run["assignedPod"].as_str().context("assignedPod")?;
        let uid = run["uid"].as_str().context("uid")?;
        Ok(self.state_dir().join("work").join(pod).join(uid))
    }

    /// The invoke URL of a Run.
    pub fn url(&self, namespace: &str, runtime: &str, uid: &str) -> String {
        format!(
            "{}/v1/namespaces/{namespace}/runtimes/{runtime}/runs/{uid}:invoke",
            self.gateway
        )
    }

    /// The invoke URL of a listed Run.
    pub fn endpoint(&self, name: &str) -> anyhow::Result<String> {
        Ok(self
            .run(name)
            .with_context(|| format!("run {name} not listed"))?["endpoint"]
            .as_str()
            .context("endpoint")?
            .to_owned())
    }

    /// POSTs `body` to a Run with the admin token.
    pub async fn invoke(&self, name: &str, body: &str) -> anyhow::Result<reqwest::Response> {
        Ok(self
            .http
            .post(self.endpoint(name)?)
            .bearer_auth(&self.token)
            .body(body.to_owned())
            .send()
            .await?)
    }

    /// Retries an invoke until it answers 200 (for recovery tests).
    pub async fn invoke_until_ok(
        &self,
        name: &str,
        body: &str,
        timeout: Duration,
    ) -> anyhow::Result<reqwest::Response> {
        let deadline = Instant::now() + timeout;
        loop {
            match self.invoke(name, body).await {
                Ok(r) if r.status() == 200 => return Ok(r),
                other => {
                    if Instant::now() > deadline {
                        bail!("no 200 within {timeout:?}; last: {other:?}");
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// `processes.json`: child name → pid and address.
    pub fn processes(&self) -> anyhow::Result<BTreeMap<String, Value>> {
        Ok(serde_json::from_slice(&std::fs::read(
            self.state_dir().join("processes.json"),
        )?)?)
    }

    /// The gateway's metrics URL (`processes.json`: its `--metrics-listen`).
    pub fn metrics_url(&self) -> anyhow::Result<String> {
        let p = self.processes()?;
        let m = p
            .get("gateway")
            .and_then(|g| g["metrics"].as_str())
            .context("no gateway metrics address")?;
        Ok(format!("http://{m}/metrics"))
    }

    /// The gateway's metrics, as Prometheus scrapes them.
    pub async fn metrics(&self) -> anyhow::Result<String> {
        let resp = self.http.get(self.metrics_url()?).send().await?;
        Ok(resp.error_for_status()?.text().await?)
    }

    /// SIGKILLs a child of the stack (e.g. `runtimed-0`).
    pub fn kill(&self, name: &str) -> anyhow::Result<u32> {
        let p = self.processes()?;
        let pid = p
            .get(name)
            .and_then(|v| v["pid"].as_u64())
            .context("no such process")? as u32;
        let status = Command::new("kill")
            .arg("-KILL")
            .arg(pid.to_string())
            .status()?;
        if !status.success() {
            bail!("kill {pid} failed");
        }
        Ok(pid)
    }

    /// Runs the `krt` CLI against this stack.
    pub fn krt(&self, args: &[&str]) -> anyhow::Result<std::process::Output> {
        Ok(Command::new(&self.krt)
            .arg("--state-dir")
            .arg(self.state_dir())
            .args(args)
            .output()?)
    }

    /// Runs the `krt` CLI against this stack with `input` on its stdin.
    pub fn krt_with_input(
        &self,
        args: &[&str],
        input: &[u8],
    ) -> anyhow::Result<std::process::Output> {
        use std::io::Write as _;
        let mut child = Command::new(&self.krt)
            .arg("--state-dir")
            .arg(self.state_dir())
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        let mut stdin = child.stdin.take().context("krt's stdin")?;
        stdin.write_all(input)?;
        drop(stdin);
        Ok(child.wait_with_output()?)
    }

    /// The process id of `krt up` itself (the embedded control plane).
    pub fn up_pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILLs `krt up` itself, giving it no chance to stop its children,
    /// and reaps it.
    pub fn kill_up(&mut self) -> anyhow::Result<()> {
        self.child.kill().context("SIGKILL krt up")?;
        self.child.wait().context("reap krt up")?;
        Ok(())
    }

    /// The log file of one child (`gateway`, `runtimed-0`, …).
    pub fn log_of(&self, name: &str) -> String {
        std::fs::read_to_string(self.state_dir().join("logs").join(format!("{name}.log")))
            .unwrap_or_default()
    }

    /// [`Stack::all_logs`] once every line the gateway logged before the
    /// call is written ([`settle_gateway_log`]).
    pub async fn settled_logs(&self) -> String {
        if let Err(e) =
            settle_gateway_log(&self.http, &self.gateway, || self.log_of("gateway")).await
        {
            panic!("{e}:\n{}", self.log_of("gateway"));
        }
        self.all_logs()
    }

    /// Everything the stack logged so far (its children's log files and
    /// `krt up`'s own output).
    pub fn all_logs(&self) -> String {
        let mut out = self
            .output
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .join("\n");
        if let Ok(dir) = std::fs::read_dir(self.state_dir().join("logs")) {
            for e in dir.flatten() {
                if let Ok(text) = std::fs::read_to_string(e.path()) {
                    out.push('\n');
                    out.push_str(&text);
                }
            }
        }
        out
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        // Already gone (`kill_up`): nothing to stop.
        if let Ok(Some(_)) = self.child.try_wait() {
            return;
        }
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
