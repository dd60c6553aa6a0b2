//! The scenarios, run in one process against one stack so every figure is
//! measured side by side on the same machine at the same time.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, bail};
use indicatif::{ProgressBar, ProgressStyle};
use kruntimes_testkit::{Options, Stack, function_run};
use serde_json::json;

use crate::baselines;
use crate::load::{self, Recorder, Summary};
use crate::paths::{self, Fence, HttpTarget, Pki, Spawn};
use crate::report::Report;
use crate::{Args, Sizes};

/// The echo handler every path calls.
pub const ECHO_PY: &str = "def invoke(request):\n    return request\n";
const ECHO_SH: &str = "echo() {\n  printf '%s\\n' \"$1\"\n}\n";
const INPUT: &str = r#"{"name": "bench"}"#;

struct Ctx {
    report: Report,
    bar: ProgressBar,
}

impl Ctx {
    fn put(&mut self, name: &str, rec: &Recorder, elapsed: Duration) -> Summary {
        let s = rec.summary(elapsed);
        self.report.scenarios.insert(name.to_owned(), s.clone());
        s
    }

    fn tick(&self) -> impl Fn() + Send + Sync + 'static {
        let bar = self.bar.clone();
        move || bar.inc(1)
    }
}

fn sibling(name: &str) -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.join(name)))
        .unwrap_or_else(|| PathBuf::from(name))
}

fn fence(run: &serde_json::Value) -> anyhow::Result<Fence> {
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

/// CPU time (user + system) and peak RSS of a process, from /proc.
fn proc_usage(pid: u32) -> Option<(Duration, u64, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .unwrap_or(100) as u64;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb = |key: &str| {
        status
            .lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    Some((
        Duration::from_millis(ticks * 1000 / hz.max(1)),
        kb("VmRSS:"),
        kb("VmHWM:"),
    ))
}

/// CPU time of a process and its direct children (nginx's workers).
fn tree_cpu(pid: u32) -> Option<Duration> {
    let mut total = proc_usage(pid)?.0;
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(child) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{child}/stat")) else {
            continue;
        };
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(pid)
            && let Some(u) = proc_usage(child)
        {
            total += u.0;
        }
    }
    Some(total)
}

#[derive(serde::Serialize)]
struct Claims<'a> {
    sub: String,
    groups: [&'a str; 1],
    iss: &'a str,
    aud: &'a str,
    exp: u64,
    nbf: u64,
    iat: u64,
}

/// Mints `n` distinct admin tokens with the stack's signing key.
fn mint_tokens(pki: &Pki, n: u64) -> anyhow::Result<Vec<String>> {
    let key =
        jsonwebtoken::EncodingKey::from_ec_pem(&std::fs::read(pki.file("token-signing.key"))?)?;
    let now = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs();
    let header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::ES256);
    (0..n)
        .map(|i| {
            let c = Claims {
                sub: format!("bench-{i}"),
                groups: ["kruntimes:admins"],
                iss: "kruntimes-embedded",
                aud: "kruntimes-gateway",
                exp: now + 3600,
                nbf: now - 60,
                iat: now,
            };
            Ok(jsonwebtoken::encode(&header, &c, &key)?)
        })
        .collect()
}

/// A gateway process started by the harness (auth disabled, or pointed at a
/// synthetic table).
struct ExtraGateway {
    child: Child,
    url: String,
}

impl Drop for ExtraGateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How an extra gateway authenticates.
enum GatewayAuth<'a> {
    /// Disabled.
    None,
    /// TokenReview + SubjectAccessReview with this kubeconfig.
    Kubernetes(&'a Path),
}

fn start_gateway(
    krt: &Path,
    pki: &Pki,
    control_plane: &str,
    auth: GatewayAuth<'_>,
    log: &Path,
) -> anyhow::Result<ExtraGateway> {
    let port = kruntimes_testkit::free_port();
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
    // Like the stack's own gateway in the bench: one thread, no access log.
    cmd.args(["--threads", "1", "--access-log", "false"]);
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
    })
}

async fn wait_until<F, Fut>(timeout: Duration, mut f: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if f().await {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    bail!("condition not met within {timeout:?}")
}

#[allow(clippy::too_many_arguments)]
async fn kube_auth(
    ctx: &mut Ctx,
    krt: &Path,
    pki: &Pki,
    control_plane: &str,
    run: &Fence,
    body: &[u8],
    sizes: &Sizes,
    tmp: &Path,
) -> anyhow::Result<()> {
    use kruntimes_kubetest::{ApiServer, Subject, User};
    let server = ApiServer::start().await?;
    let role = server
        .apply_role_yaml(
            None,
            include_bytes!("../../examples/rbac/gateway-clusterrole.yaml"),
        )
        .await?;
    server
        .bind(None, "gateway", &role, Subject::User(User::Gateway))
        .await?;
    let invoker = server
        .apply_role_yaml(
            Some("default"),
            include_bytes!("../../examples/rbac/run-invoker-role.yaml"),
        )
        .await?;
    server
        .bind(
            Some("default"),
            "alice",
            &invoker,
            Subject::User(User::Alice),
        )
        .await?;
    server.create_service_account("default", "bench").await?;
    server
        .bind(
            Some("default"),
            "bench",
            &invoker,
            Subject::ServiceAccount("default".into(), "bench".into()),
        )
        .await?;
    let mut tokens = Vec::new();
    for _ in 0..10 {
        tokens.push(
            server
                .service_account_token("default", "bench", 3600)
                .await?,
        );
    }
    let kubeconfig = server.write_kubeconfig(User::Gateway)?;
    let g = start_gateway(
        krt,
        pki,
        control_plane,
        GatewayAuth::Kubernetes(&kubeconfig),
        &tmp.join("gateway-kube.log"),
    )?;
    let alice = paths::via_proxy(pki, &g.url, run, Some(server.token(User::Alice)), body)?;
    wait_until(Duration::from_secs(30), || async {
        alice.call().await == Ok(200)
    })
    .await
    .context("the Kubernetes-auth gateway never answered 200")?;
    let (rec, el) =
        load::sequential(sizes.warmup, sizes.requests, || alice.call(), ctx.tick()).await;
    ctx.put("kube-auth-hit", &rec, el);

    // 10 tokens, round robin, sequential: API calls per 10,000 requests.
    let n = sizes.kube_requests;
    let targets: Vec<_> = tokens.iter().map(|t| alice.with_token(t)).collect();
    let tr = server.request_count("tokenreviews", "POST").await?;
    let sar = server.request_count("subjectaccessreviews", "POST").await?;
    let mut rec = Recorder::new();
    let start = Instant::now();
    for i in 0..n {
        let t0 = Instant::now();
        let out = targets[i as usize % targets.len()].call().await;
        rec.record(t0.elapsed(), &out);
        ctx.bar.inc(1);
    }
    let el = start.elapsed();
    ctx.put("kube-auth-10-tokens", &rec, el);
    let tr = server.request_count("tokenreviews", "POST").await? - tr;
    let sar = server.request_count("subjectaccessreviews", "POST").await? - sar;
    // Absolute counts: with 10 tokens the cost is per token and TTL, not
    // per request (the full run sends 10,000 requests).
    let sum = &mut ctx.report.summary;
    sum.insert("kube_requests_10_tokens".into(), json!(n));
    sum.insert("kube_tokenreviews_10_tokens".into(), json!(tr));
    sum.insert("kube_subjectaccessreviews_10_tokens".into(), json!(sar));
    sum.insert(
        "kube_10_tokens_duration_s".into(),
        json!((el.as_secs_f64() * 10.0).round() / 10.0),
    );
    Ok(())
}

/// Runs every scenario.
pub async fn run(args: &Args, sizes: &Sizes) -> anyhow::Result<Report> {
    if let Some(gateway) = &args.gateway {
        return run_remote(args, sizes, gateway).await;
    }
    let krt = args.krt.clone().unwrap_or_else(|| sibling("krt"));
    if !krt.exists() {
        bail!(
            "{} not found: build it with `cargo build --release -p krt` or pass --krt",
            krt.display()
        );
    }
    let mut runs = vec![(
        "echo-sh.yaml".to_owned(),
        function_run("echo-sh", "bash", "echo.echo", "echo.sh", ECHO_SH, ""),
    )];
    runs.push((
        "echo-py.yaml".into(),
        function_run("echo-py", "python", "main.invoke", "main.py", ECHO_PY, ""),
    ));
    // A session on the second runtimed (sessions hold a Pod alone).
    runs.push((
        "sandbox.yaml".into(),
        "apiVersion: kruntimes.io/v1alpha1\nkind: Run\nmetadata:\n  name: sandbox\nspec:\n  runtime: bash\n  mode:\n    session:\n      queueSize: 64\n".into(),
    ));
    let krt2 = krt.clone();
    let stack = tokio::task::spawn_blocking(move || {
        Stack::start(
            &krt2,
            Options {
                runtimed: 2,
                runs,
                // nginx and HAProxy run without access logs too.
                extra_args: vec!["--gateway-access-log".into(), "false".into()],
            },
        )
    })
    .await??;
    let py = stack.wait_phase("echo-py", "Ready").await?;
    let sh = stack.wait_phase("echo-sh", "Ready").await?;
    let (py, sh) = (fence(&py)?, fence(&sh)?);
    let pki = Pki {
        dir: stack.state_dir().join("pki"),
    };
    let procs = stack.processes()?;
    let py_pod = stack.run("echo-py").context("echo-py status")?["assignedPod"]
        .as_str()
        .context("echo-py owner")?
        .to_owned();
    let owner: SocketAddr = procs[&py_pod]["address"]
        .as_str()
        .context("runtimed address")?
        .parse()?;
    let gateway_pid = procs["gateway"]["pid"].as_u64().context("gateway pid")? as u32;
    let body = INPUT.as_bytes();

    let total = sizes.session * 4
        + (sizes.session / 5).max(5) * 2
        + sizes.reps * sizes.requests * 5
        + sizes.open_requests * 4
        + sizes.spawn
        + sizes.auth_misses
        + sizes.kube_requests
        + 3 * sizes.requests;
    let bar = if args.no_progress {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(total)
    };
    bar.set_style(
        ProgressStyle::with_template("{spinner} {msg:<28} [{bar:40}] {pos}/{len} {elapsed}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    let mut ctx = Ctx {
        report: Report::default(),
        bar,
    };
    let cfg = &mut ctx.report.config;
    cfg.insert("quick".into(), json!(args.quick));
    cfg.insert("sequential_requests".into(), json!(sizes.requests));
    cfg.insert("reps".into(), json!(sizes.reps));
    cfg.insert("open_loop_rate".into(), json!(sizes.rate));
    cfg.insert("open_loop_requests".into(), json!(sizes.open_requests));
    cfg.insert(
        "cpus".into(),
        json!(
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
        ),
    );

    let gateway = paths::via_proxy(&pki, &stack.gateway, &py, Some(&stack.token), body)?;
    let gateway_sh = paths::via_proxy(&pki, &stack.gateway, &sh, Some(&stack.token), body)?;
    let direct = paths::direct(&pki, owner, &py, body)?;

    // Baselines in front of the same runtimed.
    let tmp = tempfile::tempdir()?;
    let mut proxies: Vec<(&'static str, HttpTarget, baselines::Baseline)> = Vec::new();
    if !args.no_baselines {
        let threads = 2;
        let started = [
            ("nginx", "nginx", "nginx"),
            ("haproxy", "haproxy", "haproxy"),
        ]
        .map(|(name, bin, pkg)| {
            let port = kruntimes_testkit::free_port();
            let dir = tmp.path().join(name);
            baselines::ensure(bin, pkg, args.install_baselines).and_then(|b| match name {
                "nginx" => baselines::nginx(&b, &dir, &pki, port, owner, &py, threads),
                _ => baselines::haproxy(&b, &dir, &pki, port, owner, &py, threads),
            })
        });
        for (name, b) in ["nginx", "haproxy"].into_iter().zip(started) {
            match b.and_then(|b| Ok((paths::via_proxy(&pki, &b.url, &py, None, body)?, b))) {
                Ok((t, b)) => match t.call().await {
                    Ok(200) => proxies.push((name, t, b)),
                    other => {
                        ctx.report
                            .skipped
                            .insert(name.into(), format!("probe answered {other:?}"));
                    }
                },
                Err(e) => {
                    ctx.report.skipped.insert(name.into(), e.to_string());
                }
            }
        }
    }

    // 1. Sequential, interleaved repetitions.
    ctx.bar.set_message("sequential");
    let mut seq: BTreeMap<String, (Recorder, Duration)> = BTreeMap::new();
    let mut paths_seq: Vec<(String, HttpTarget)> = vec![
        ("direct-python".into(), direct.clone()),
        ("gateway-python".into(), gateway.clone()),
        ("gateway-bash".into(), gateway_sh.clone()),
    ];
    for (name, t, _) in &proxies {
        paths_seq.push((format!("{name}-python"), t.clone()));
    }
    for _ in 0..sizes.reps {
        for (name, t) in &paths_seq {
            let (rec, el) =
                load::sequential(sizes.warmup, sizes.requests, || t.call(), ctx.tick()).await;
            let e = seq
                .entry(name.clone())
                .or_insert_with(|| (Recorder::new(), Duration::ZERO));
            e.0.merge(&rec);
            e.1 += el;
        }
    }
    for (name, (rec, el)) in &seq {
        ctx.put(name, rec, *el);
    }

    // 2. Open loop at a fixed rate (coordinated-omission corrected), with
    //    the gateway's CPU and memory cost.
    let mut open_paths: Vec<(String, HttpTarget, Option<u32>)> = vec![
        ("open-direct".into(), direct.clone(), None),
        ("open-gateway".into(), gateway.clone(), Some(gateway_pid)),
    ];
    for (name, t, b) in &proxies {
        open_paths.push((format!("open-{name}"), t.clone(), Some(b.pid())));
    }
    let mut cost = None;
    let mut proxy_cpu = BTreeMap::new();
    for (name, t, pid) in open_paths {
        ctx.bar.set_message(name.clone());
        let before = proc_usage(gateway_pid);
        let cpu_before = pid.and_then(tree_cpu);
        let t = Arc::new(t);
        let (rec, el) = load::open_loop(
            sizes.rate,
            sizes.open_requests,
            1024,
            move || {
                let t = t.clone();
                async move { t.call().await }
            },
            ctx.tick(),
        )
        .await;
        if name == "open-gateway"
            && let (Some(b), Some(a)) = (before, proc_usage(gateway_pid))
        {
            let cpu_ms = (a.0 - b.0).as_secs_f64() * 1000.0;
            cost = Some((
                cpu_ms * 10_000.0 / sizes.open_requests as f64,
                a.2 as f64 / 1024.0,
            ));
        }
        if let (Some(pid), Some(b)) = (pid, cpu_before)
            && let Some(a) = tree_cpu(pid)
        {
            let per_10k = (a - b).as_secs_f64() * 1000.0 * 10_000.0 / sizes.open_requests as f64;
            proxy_cpu.insert(
                format!("{}_cpu_ms_per_10k", name.trim_start_matches("open-")),
                per_10k,
            );
        }
        ctx.put(&name, &rec, el);
    }

    // Sessions: a trivial command, and 4 KiB / 1 MiB writes and reads.
    ctx.bar.set_message("session");
    match stack.wait_phase("sandbox", "Ready").await {
        Ok(sb) => {
            let base = sb["endpoint"].as_str().unwrap_or_default().to_owned();
            let client = reqwest::Client::builder()
                .add_root_certificate(reqwest::Certificate::from_pem(&std::fs::read(
                    pki.file("public-ca.crt"),
                )?)?)
                .build()?;
            let token = stack.token.clone();
            let post = |body: serde_json::Value| {
                let (client, url, token) = (
                    client.clone(),
                    format!("{base}/operations:execute"),
                    token.clone(),
                );
                async move {
                    let r = client
                        .post(url)
                        .bearer_auth(token)
                        .json(&body)
                        .send()
                        .await
                        .map_err(|e| e.to_string())?;
                    let status = r.status().as_u16();
                    let v: serde_json::Value = r.json().await.map_err(|e| e.to_string())?;
                    Ok(if status == 200 && v["state"] != "Succeeded" {
                        500
                    } else {
                        status
                    })
                }
            };
            let get = |path: &'static str| {
                let (client, url, token) = (
                    client.clone(),
                    format!("{base}/files:content?path={path}"),
                    token.clone(),
                );
                async move {
                    let r = client
                        .get(url)
                        .bearer_auth(token)
                        .send()
                        .await
                        .map_err(|e| e.to_string())?;
                    let status = r.status().as_u16();
                    r.bytes().await.map_err(|e| e.to_string())?;
                    Ok(status)
                }
            };
            use base64::Engine as _;
            let b64 = |n: usize| base64::engine::general_purpose::STANDARD.encode(vec![b'x'; n]);
            let (small, large) = (b64(4096), b64(1024 * 1024));
            let n = sizes.session;
            let m = (n / 5).max(5);
            let (rec, el) = load::sequential(
                10,
                n,
                || post(json!({"command": {"argv": ["true"]}})),
                ctx.tick(),
            )
            .await;
            ctx.put("session-exec-true", &rec, el);
            let (rec, el) = load::sequential(
                5,
                n,
                || post(json!({"writeFile": {"path": "f4k", "contentBase64": small}})),
                ctx.tick(),
            )
            .await;
            ctx.put("session-write-4k", &rec, el);
            let (rec, el) = load::sequential(5, n, || get("f4k"), ctx.tick()).await;
            ctx.put("session-read-4k", &rec, el);
            let (rec, el) = load::sequential(
                2,
                m,
                || post(json!({"writeFile": {"path": "f1m", "contentBase64": large}})),
                ctx.tick(),
            )
            .await;
            ctx.put("session-write-1m", &rec, el);
            let (rec, el) = load::sequential(2, m, || get("f1m"), ctx.tick()).await;
            ctx.put("session-read-1m", &rec, el);
        }
        Err(e) => {
            ctx.report.skipped.insert("session".into(), e.to_string());
        }
    }

    // 3. The original model: an interpreter per call.
    ctx.bar.set_message("spawn-python");
    let spawn = Spawn::new(&tmp.path().join("spawn"), ECHO_PY, INPUT)?;
    let (rec, el) = load::sequential(3, sizes.spawn, || spawn.call(), ctx.tick()).await;
    ctx.put("spawn-python", &rec, el);

    // 4. Decision cache: hits (one token), misses (a new token per request),
    //    and the same invoke through a gateway with auth disabled.
    ctx.bar.set_message("auth");
    let (rec, el) =
        load::sequential(sizes.warmup, sizes.requests, || gateway.call(), ctx.tick()).await;
    ctx.put("auth-hit", &rec, el);
    let tokens = mint_tokens(&pki, sizes.auth_misses)?;
    let mut misses = Recorder::new();
    let start = Instant::now();
    for t in &tokens {
        let target = gateway.with_token(t);
        let t0 = Instant::now();
        let out = target.call().await;
        misses.record(t0.elapsed(), &out);
        ctx.bar.inc(1);
    }
    ctx.put("auth-miss", &misses, start.elapsed());
    let control_plane = serde_json::from_slice::<serde_json::Value>(&std::fs::read(
        stack.state_dir().join("client.json"),
    )?)?["controlPlane"]
        .as_str()
        .context("controlPlane")?
        .to_owned();
    match start_gateway(
        &krt,
        &pki,
        &control_plane,
        GatewayAuth::None,
        &tmp.path().join("gateway-noauth.log"),
    ) {
        Ok(g) => {
            let t = paths::via_proxy(&pki, &g.url, &py, None, body)?;
            if wait_until(Duration::from_secs(30), || async {
                t.call().await == Ok(200)
            })
            .await
            .is_ok()
            {
                let (rec, el) =
                    load::sequential(sizes.warmup, sizes.requests, || t.call(), ctx.tick()).await;
                ctx.put("auth-disabled", &rec, el);
            } else {
                ctx.report.skipped.insert(
                    "auth-disabled".into(),
                    "gateway without auth never routed".into(),
                );
            }
        }
        Err(e) => {
            ctx.report
                .skipped
                .insert("auth-disabled".into(), e.to_string());
        }
    }

    // 4b. Kubernetes auth: TokenReview + SubjectAccessReview against a real
    //     kube-apiserver (kubetest), cache hits versus auth disabled, and the
    //     API calls 10 tokens cost per 10,000 requests.
    ctx.bar.set_message("kubernetes auth");
    if let Err(e) = kube_auth(
        &mut ctx,
        &krt,
        &pki,
        &control_plane,
        &py,
        body,
        sizes,
        tmp.path(),
    )
    .await
    {
        ctx.report
            .skipped
            .insert("kube-auth-hit".into(), format!("{e:#}"));
    }

    // 5. Propagation: a Run file appears → first successful invoke.
    ctx.bar.set_message("propagation");
    let mut prop = Recorder::new();
    let start = Instant::now();
    for i in 0..sizes.propagation {
        let name = format!("prop-{i}");
        let yaml = function_run(&name, "python", "main.invoke", "main.py", ECHO_PY, "");
        let t0 = Instant::now();
        stack.add_run(&format!("{name}.yaml"), &yaml)?;
        let outcome = loop {
            if t0.elapsed() > Duration::from_secs(30) {
                break Err("not invocable within 30 s".to_owned());
            }
            if let Some(r) = stack.run(&name)
                && let Ok(f) = fence(&r).or_else(|_| {
                    Ok::<_, anyhow::Error>(Fence {
                        uid: r["uid"].as_str().unwrap_or_default().to_owned(),
                        pod_uid: String::new(),
                        attempt: 0,
                        namespace: "default".into(),
                        runtime: "python".into(),
                    })
                })
                && !f.uid.is_empty()
            {
                let t = paths::via_proxy(&pki, &stack.gateway, &f, Some(&stack.token), body)?;
                if t.call().await == Ok(200) {
                    break Ok(200);
                }
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        };
        prop.record(t0.elapsed(), &outcome);
        stack.remove_run(&format!("{name}.yaml"))?;
        // Runs arrive one at a time here, not as a burst: let runtimed
        // replace the spare interpreter the registration used.
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let prop = ctx.put("propagation", &prop, start.elapsed());

    // 6. Ownership table memory with a synthetic watch source.
    ctx.bar.set_message("table");
    let table = match table_memory(&krt, &pki, sizes.table_entries, tmp.path()).await {
        Ok(v) => Some(v),
        Err(e) => {
            ctx.report.skipped.insert("table".into(), e.to_string());
            None
        }
    };
    ctx.bar.finish_and_clear();

    // Summary.
    let sc = &ctx.report.scenarios;
    let p = |n: &str, f: fn(&Summary) -> u64| sc.get(n).map(f);
    let mut sum = std::mem::take(&mut ctx.report.summary);
    let added = |proxy: &str, f: fn(&Summary) -> u64| match (p(proxy, f), p("open-direct", f)) {
        (Some(a), Some(b)) => Some(a.saturating_sub(b)),
        _ => None,
    };
    let g50 = added("open-gateway", |s| s.p50_us);
    let g99 = added("open-gateway", |s| s.p99_us);
    let n50 = added("open-nginx", |s| s.p50_us);
    let n99 = added("open-nginx", |s| s.p99_us);
    let h50 = added("open-haproxy", |s| s.p50_us);
    let h99 = added("open-haproxy", |s| s.p99_us);
    sum.insert("gateway_added_p50_us".into(), json!(g50));
    sum.insert("gateway_added_p99_us".into(), json!(g99));
    sum.insert("nginx_added_p50_us".into(), json!(n50));
    sum.insert("nginx_added_p99_us".into(), json!(n99));
    sum.insert("haproxy_added_p50_us".into(), json!(h50));
    sum.insert("haproxy_added_p99_us".into(), json!(h99));
    let ratio = |a: Option<u64>, b: Option<u64>| match (a, b) {
        (Some(a), Some(b)) if b > 0 => json!((a as f64 / b as f64 * 100.0).round() / 100.0),
        _ => json!(null),
    };
    sum.insert("gateway_vs_nginx_added_p50_ratio".into(), ratio(g50, n50));
    sum.insert("gateway_vs_nginx_added_p99_ratio".into(), ratio(g99, n99));
    sum.insert("gateway_vs_haproxy_added_p50_ratio".into(), ratio(g50, h50));
    sum.insert("gateway_vs_haproxy_added_p99_ratio".into(), ratio(g99, h99));
    let seq_added = |proxy: &str| match (p(proxy, |s| s.p50_us), p("direct-python", |s| s.p50_us)) {
        (Some(a), Some(b)) => json!(a.saturating_sub(b)),
        _ => json!(null),
    };
    sum.insert(
        "sequential_gateway_added_p50_us".into(),
        seq_added("gateway-python"),
    );
    sum.insert(
        "sequential_nginx_added_p50_us".into(),
        seq_added("nginx-python"),
    );
    sum.insert(
        "sequential_haproxy_added_p50_us".into(),
        seq_added("haproxy-python"),
    );
    let warm = p("gateway-python", |s| s.p50_us);
    let spawn50 = p("spawn-python", |s| s.p50_us);
    sum.insert("python_warm_p50_us".into(), json!(warm));
    sum.insert(
        "python_warm_p99_us".into(),
        json!(p("gateway-python", |s| s.p99_us)),
    );
    sum.insert(
        "python_direct_p50_us".into(),
        json!(p("direct-python", |s| s.p50_us)),
    );
    sum.insert(
        "python_direct_p99_us".into(),
        json!(p("direct-python", |s| s.p99_us)),
    );
    sum.insert("python_spawn_p50_us".into(), json!(spawn50));
    sum.insert("python_warm_vs_spawn_speedup".into(), ratio(spawn50, warm));
    let hit = p("auth-hit", |s| s.p50_us);
    let off = p("auth-disabled", |s| s.p50_us);
    sum.insert("auth_hit_p50_us".into(), json!(hit));
    sum.insert(
        "auth_miss_p50_us".into(),
        json!(p("auth-miss", |s| s.p50_us)),
    );
    sum.insert("auth_disabled_p50_us".into(), json!(off));
    sum.insert(
        "auth_hit_overhead_pct".into(),
        match (hit, off) {
            (Some(h), Some(o)) if o > 0 => {
                json!(((h as f64 / o as f64 - 1.0) * 1000.0).round() / 10.0)
            }
            _ => json!(null),
        },
    );
    let kube50 = p("kube-auth-hit", |s| s.p50_us);
    let kube99 = p("kube-auth-hit", |s| s.p99_us);
    let off99 = p("auth-disabled", |s| s.p99_us);
    sum.insert("kube_auth_hit_p50_us".into(), json!(kube50));
    sum.insert("kube_auth_hit_p99_us".into(), json!(kube99));
    sum.insert("auth_disabled_p99_us".into(), json!(off99));
    for (key, a, b) in [
        ("kube_auth_hit_overhead_p50_us", kube50, off),
        ("kube_auth_hit_overhead_p99_us", kube99, off99),
    ] {
        sum.insert(
            key.into(),
            match (a, b) {
                (Some(a), Some(b)) => json!(a as i64 - b as i64),
                _ => json!(null),
            },
        );
    }
    sum.insert(
        "propagation_p50_ms".into(),
        json!(prop.p50_us as f64 / 1000.0),
    );
    sum.insert(
        "propagation_p99_ms".into(),
        json!(prop.p99_us as f64 / 1000.0),
    );
    if let Some((bytes_per_run, rss0, rss1)) = table {
        sum.insert("table_bytes_per_run".into(), json!(bytes_per_run));
        sum.insert("table_entries".into(), json!(sizes.table_entries));
        sum.insert("table_gateway_rss_empty_mb".into(), json!(rss0));
        sum.insert("table_gateway_rss_full_mb".into(), json!(rss1));
    }
    for (k, v) in proxy_cpu {
        if k != "gateway_cpu_ms_per_10k" {
            sum.insert(k, json!((v * 10.0).round() / 10.0));
        }
    }
    if let Some((cpu, rss)) = cost {
        sum.insert(
            "gateway_cpu_ms_per_10k".into(),
            json!((cpu * 10.0).round() / 10.0),
        );
        sum.insert(
            "gateway_peak_rss_mb".into(),
            json!((rss * 10.0).round() / 10.0),
        );
    }
    ctx.report.summary = sum;
    drop(proxies);
    drop(stack);
    Ok(ctx.report)
}

/// Memory of a gateway holding `n` synthetic Runs: RSS growth per entry.
async fn table_memory(
    krt: &Path,
    pki: &Pki,
    n: u64,
    tmp: &Path,
) -> anyhow::Result<(u64, f64, f64)> {
    use kruntimes_proto::ownership::v1 as own;
    use kruntimes_proto::watch::Publisher;
    use tonic::transport::{Certificate, Identity, Server, ServerTlsConfig};

    let publisher = Publisher::new(own::SourceKind::ControlPlane, "synthetic", 1 << 20);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let tls = ServerTlsConfig::new()
        .identity(Identity::from_pem(
            std::fs::read(pki.file("control-plane.crt"))?,
            std::fs::read(pki.file("control-plane.key"))?,
        ))
        .client_ca_root(Certificate::from_pem(std::fs::read(
            pki.file("internal-ca.crt"),
        )?));
    let server = Server::builder()
        .tls_config(tls)?
        .add_service(publisher.service());
    let serve = tokio::spawn(server.serve_with_incoming(tokio_stream_listener(listener)));
    let g = start_gateway(
        krt,
        pki,
        &addr.to_string(),
        GatewayAuth::None,
        &tmp.join("gateway-table.log"),
    )?;
    let client = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(&std::fs::read(
            pki.file("public-ca.crt"),
        )?)?)
        .build()?;
    let ready = format!("{}/readyz", g.url);
    wait_until(Duration::from_secs(30), || async {
        client
            .get(&ready)
            .send()
            .await
            .is_ok_and(|r| r.status() == 200)
    })
    .await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let pid = g.child.id();
    let rss0 = proc_usage(pid).context("read gateway memory")?.1;
    for i in 0..n {
        publisher.upsert(own::OwnershipEntry {
            namespace: format!("team-{}", i % 50),
            run_name: format!("run-{i}"),
            run_uid: uuid::Uuid::new_v4().to_string(),
            runtime: "python".into(),
            mode: own::Mode::Function as i32,
            owner: Some(own::Owner {
                pod_name: format!("runtime-python-{}", i % 100),
                pod_uid: format!("00000000-0000-4000-8000-{:012}", i % 100),
                dataplane_address: "127.0.0.1:9".into(),
            }),
            attempt: 1,
            phase: own::Phase::Ready as i32,
            limits: None,
            reason: String::new(),
        });
    }
    let metrics = format!("{}/metrics", g.url);
    let want = format!("kruntimes_gateway_ownership_table_entries{{source=\"control-plane\"}} {n}");
    wait_until(Duration::from_secs(120), || async {
        match client.get(&metrics).send().await {
            Ok(r) => r.text().await.is_ok_and(|t| t.contains(&want)),
            Err(_) => false,
        }
    })
    .await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss1 = proc_usage(pid).context("read gateway memory")?.1;
    serve.abort();
    let per_run = rss1.saturating_sub(rss0) * 1024 / n.max(1);
    Ok((per_run, rss0 as f64 / 1024.0, rss1 as f64 / 1024.0))
}

fn tokio_stream_listener(
    l: tokio::net::TcpListener,
) -> impl futures::Stream<Item = std::io::Result<tokio::net::TcpStream>> {
    futures::stream::unfold(l, |l| async move {
        let r = l.accept().await.map(|(s, _)| s);
        Some((r, l))
    })
}

/// Cluster mode: only the gateway path of an existing deployment.
async fn run_remote(args: &Args, sizes: &Sizes, gateway: &str) -> anyhow::Result<Report> {
    let ca = args.ca.as_ref().context("--ca")?;
    let token = args.token.as_ref().context("--token")?;
    let endpoint = args.endpoint.as_ref().context("--endpoint")?;
    let client = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(&std::fs::read(ca)?)?)
        .build()?;
    let url = format!("{gateway}{endpoint}");
    let token = token.clone();
    let call = move || {
        let (client, url, token) = (client.clone(), url.clone(), token.clone());
        async move {
            let r = client
                .post(url)
                .bearer_auth(token)
                .body(INPUT)
                .send()
                .await
                .map_err(|e| e.to_string())?;
            let s = r.status().as_u16();
            r.bytes().await.map_err(|e| e.to_string())?;
            Ok(s)
        }
    };
    let mut report = Report::default();
    let (rec, el) = load::sequential(sizes.warmup, sizes.requests, &call, || {}).await;
    report.scenarios.insert("gateway".into(), rec.summary(el));
    let (rec, el) = load::open_loop(sizes.rate, sizes.open_requests, 1024, call, || {}).await;
    report
        .scenarios
        .insert("open-gateway".into(), rec.summary(el));
    Ok(report)
}
