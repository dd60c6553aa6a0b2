//! `--soak`: constant open-loop load over function Runs and a session Run
//! for `--duration`, with faults injected at fixed fractions of it:
//!
//! | at | fault | errors it may explain |
//! | --- | --- | --- |
//! | 1/5 | the runtimed owning the function Runs is SIGKILLed (`krt up` restarts it) | 503, and 429 `Busy` from the calls held for the new owner meeting the one-in-flight rule, until every Run answered 200 again, + 2 s |
//! | 2/5 | every TCP connection to the control plane is reset (`ss -K`) | none |
//! | 3/5 | the gateway's certificate is replaced by one from a second CA the clients also trust | none |
//! | 4/5 | a burst of unauthenticated connections: idle sockets, partial ClientHellos, made-up tokens | none |
//! | 9/10 | the same burst again (the memory the first left is reused, not added to) | none |
//!
//! The function stream spreads over ten function Runs (one invocation in
//! flight each). A third stream opens a **new connection** per request (twice a second),
//! so the rotated certificate and the flood are seen by fresh handshakes.
//! The report: answers by class per minute with p50/p99, the faults and
//! their spans, errors no fault explains, the seconds that had errors, and
//! RSS and open descriptors of every component at the start, before each
//! fault, after the first burst and at the end.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::io::AsyncWriteExt as _;

use kruntimes_testkit::function_run;

use super::local::{Local, fence};
use super::procfs::proc_usage;
use super::sessions::Session;
use super::support::https_client;
use super::{BODY, ECHO_PY, MAX_OUTSTANDING};
use crate::load::Outcome;
use crate::paths;
use crate::report::Report;
use crate::soak::{self, Answer, Fault, Usage};

/// Function Runs the function stream spreads over.
const FUNCTION_RUNS: usize = 10;

/// Margin after an owner's recovery in which its 503s still count as its.
const SETTLE: Duration = Duration::from_secs(2);

/// Runs the soak for `duration` at `rate` requests per second on the
/// function stream (a tenth of it on the session stream).
pub(super) async fn run(
    krt: std::path::PathBuf,
    duration: Duration,
    rate: f64,
) -> anyhow::Result<Report> {
    // Room for the function Runs beside the echo Runs on one runtimed; the
    // gateway on one thread, as `krt up` runs it.
    let local = Local::start_with(krt, 1, false, vec!["--capacity".into(), "16".into()]).await?;
    let sandbox = local.stack.wait_phase("sandbox", "Ready").await?;
    let rotation_ca = kruntimes_certs::Ca::generate("kruntimes soak rotation CA", 2)?;
    let bundle = {
        let mut pem = std::fs::read(local.pki.file("public-ca.crt"))?;
        pem.extend_from_slice(rotation_ca.cert_pem.as_bytes());
        pem
    };
    let session = Arc::new(Session {
        client: https_client(&local.pki.file("public-ca.crt"))?,
        base: sandbox["endpoint"].as_str().unwrap_or_default().to_owned(),
        token: local.stack.token.clone(),
    });
    // One invocation in flight per function Run (a second one is 429
    // `Busy`): the function stream spreads over several Runs so that its
    // own overlaps during latency spikes are rare.
    let mut targets = vec![local.gateway.clone()];
    for i in 0..FUNCTION_RUNS - 1 {
        let name = format!("soak-{i}");
        local.stack.add_run(
            &format!("{name}.yaml"),
            &function_run(&name, "python", "main.invoke", "main.py", ECHO_PY, ""),
        )?;
    }
    for i in 0..FUNCTION_RUNS - 1 {
        let run = local
            .stack
            .wait_phase(&format!("soak-{i}"), "Ready")
            .await?;
        targets.push(paths::via_proxy(
            &local.pki,
            &local.stack.gateway,
            &fence(&run)?,
            Some(&local.stack.token),
            BODY,
        )?);
    }
    let function = Arc::new(targets);
    let sh = fence(&local.stack.wait_phase("echo-sh", "Ready").await?)?;
    // The new-connection stream calls the Bash Run (its own one in flight).
    let url: Arc<str> = format!("{}{}", local.stack.gateway, sh.path()).into();
    let py_url = format!("{}{}", local.stack.gateway, local.py.path());
    let token: Arc<str> = local.stack.token.clone().into();
    let bundle: Arc<[u8]> = bundle.into();

    // Warm every path once, then take the components' first reading.
    for _ in 0..20 {
        for t in function.iter() {
            let _ = t.call().await;
        }
        let _ = session.execute(exec_true()).await;
    }
    let start_usage = usage(&local);
    let start = Instant::now();

    let f = {
        let function = function.clone();
        let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        tokio::spawn(stream(start, duration, rate, move || {
            let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % function.len();
            let t = function[i].clone();
            (i, async move { t.call().await })
        }))
    };
    let s = {
        let session = session.clone();
        tokio::spawn(stream(start, duration, (rate / 10.0).max(1.0), move || {
            let s = session.clone();
            (0, async move { s.execute(exec_true()).await })
        }))
    };
    let n = {
        let (url, token, bundle) = (url.clone(), token.clone(), bundle.clone());
        tokio::spawn(stream(start, duration, 2.0, move || {
            let (url, token, bundle) = (url.clone(), token.clone(), bundle.clone());
            (
                0,
                async move { fresh_connection(&url, &token, &bundle).await },
            )
        }))
    };

    let mut faults = Vec::new();
    // The components' resources just before each fault, and at the end.
    let mut readings = vec![("start".to_owned(), start_usage)];
    let at = |k: u32| start + duration * k / 5;
    tokio::time::sleep_until(at(1).into()).await;
    readings.push(("before runtimed-killed".into(), usage(&local)));
    faults.push(kill_owner(&local, start));
    tokio::time::sleep_until(at(2).into()).await;
    readings.push(("before control-plane-stream-dropped".into(), usage(&local)));
    faults.push(drop_control_plane(&local, start));
    tokio::time::sleep_until(at(3).into()).await;
    readings.push(("before gateway-certificate-rotated".into(), usage(&local)));
    faults.push(rotate_certificate(&local, &rotation_ca, start));
    tokio::time::sleep_until(at(4).into()).await;
    readings.push(("before unauthenticated-burst".into(), usage(&local)));
    let (fault, unauthenticated) = flood(&local, &py_url, &bundle, start).await;
    faults.push(fault);
    // The same burst again once the first one's sockets are closed: memory
    // a burst leaves behind is reused by the next, not added to.
    tokio::time::sleep_until((start + duration * 9 / 10).into()).await;
    readings.push(("after the burst".into(), usage(&local)));
    let (mut fault, again) = flood(&local, &py_url, &bundle, start).await;
    fault.name = "unauthenticated-burst-2".into();
    faults.push(fault);
    let mut unauthenticated = unauthenticated;
    for (class, n) in again {
        *unauthenticated.entry(class).or_default() += n;
    }

    let function = f.await?;
    let session = s.await?;
    let fresh = n.await?;
    let elapsed = start.elapsed();
    // Let the flood's sockets be cut off before the last reading.
    tokio::time::sleep(Duration::from_secs(12)).await;
    readings.push(("end".into(), usage(&local)));

    // The owner restart explains the function stream's 503s until it
    // answered again.
    for fault in &mut faults {
        if fault.expected.is_empty() {
            continue;
        }
        let after = Duration::from_secs_f64(fault.at_s);
        fault.until_s = soak::recovered_at(&function, after)
            .map(|t| (t + SETTLE).as_secs_f64())
            .unwrap_or(elapsed.as_secs_f64());
    }

    let mut report = Report::default();
    let cfg = &mut report.config;
    cfg.insert("soak_duration_s".into(), json!(duration.as_secs()));
    cfg.insert("soak_function_rate".into(), json!(rate));
    cfg.insert("soak_session_rate".into(), json!((rate / 10.0).max(1.0)));
    cfg.insert("soak_new_connection_rate".into(), json!(2.0));
    let mut unexpected_total = 0;
    let mut timelines = BTreeMap::new();
    let mut error_seconds: BTreeMap<&str, Vec<(u64, String, u64)>> = BTreeMap::new();
    for (name, answers) in [
        ("function", &function),
        ("session", &session),
        ("new-connection", &fresh),
    ] {
        let rows = soak::timeline(answers, &faults, Duration::from_secs(60));
        unexpected_total += rows.iter().map(|r| r.unexpected).sum::<u64>();
        report
            .scenarios
            .insert(format!("soak-{name}"), summary(answers, elapsed));
        timelines.insert(name, rows);
        error_seconds.insert(name, soak::error_seconds(answers));
    }
    let s = &mut report.summary;
    s.insert("soak_unexpected_errors".into(), json!(unexpected_total));
    s.insert("soak_faults".into(), json!(faults));
    s.insert("soak_timeline".into(), json!(timelines));
    s.insert("soak_error_seconds".into(), json!(error_seconds));
    s.insert("soak_unauthenticated".into(), json!(unauthenticated));
    s.insert("soak_resources".into(), json!(readings));
    for f in &faults {
        if f.name == "runtimed-killed" {
            s.insert(
                "soak_owner_recovery_s".into(),
                json!(((f.until_s - SETTLE.as_secs_f64() - f.at_s) * 1000.0).round() / 1000.0),
            );
        }
    }
    Ok(report)
}

/// The Markdown rendering of a soak report: per-minute rows of each
/// stream, the faults, and the resources.
pub fn markdown(report: &Report) -> String {
    use std::fmt::Write as _;
    let mut out = report.markdown();
    let s = &report.summary;
    if let Some(timelines) = s.get("soak_timeline").and_then(|v| v.as_object()) {
        for (stream, rows) in timelines {
            let _ = writeln!(
                out,
                "\n{stream}\n\n| minute | requests | ok | errors | unexpected | p50 ms | p99 ms | max ms |\n|---:|---:|---:|---|---:|---:|---:|---:|"
            );
            for r in rows.as_array().into_iter().flatten() {
                let errors = r["errors"]
                    .as_object()
                    .map(|m| {
                        m.iter()
                            .map(|(k, v)| format!("{k}: {v}"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    })
                    .filter(|e| !e.is_empty())
                    .unwrap_or_else(|| "-".into());
                let ms = |k: &str| r[k].as_u64().unwrap_or(0) as f64 / 1000.0;
                let _ = writeln!(
                    out,
                    "| {} | {} | {} | {errors} | {} | {:.3} | {:.3} | {:.3} |",
                    r["start_s"].as_u64().unwrap_or(0) / 60,
                    r["requests"],
                    r["ok"],
                    r["unexpected"],
                    ms("p50_us"),
                    ms("p99_us"),
                    ms("max_us"),
                );
            }
        }
    }
    if let Some(streams) = s.get("soak_error_seconds").and_then(|v| v.as_object()) {
        out.push_str("\nerrors by second (second since start: class × count)\n\n");
        for (stream, seconds) in streams {
            let list: Vec<String> = seconds
                .as_array()
                .into_iter()
                .flatten()
                .map(|e| format!("{}s {}×{}", e[0], e[1].as_str().unwrap_or("?"), e[2]))
                .collect();
            let shown = if list.len() > 40 {
                format!("{} … ({} more)", list[..40].join(", "), list.len() - 40)
            } else if list.is_empty() {
                "none".to_owned()
            } else {
                list.join(", ")
            };
            let _ = writeln!(out, "- {stream}: {shown}");
        }
    }
    if let Some(faults) = s.get("soak_faults").and_then(|v| v.as_array()) {
        out.push_str("\n| fault | at s | expected errors until s | note |\n|---|---:|---:|---|\n");
        for f in faults {
            let _ = writeln!(
                out,
                "| {} | {:.1} | {:.1} | {} |",
                f["name"].as_str().unwrap_or(""),
                f["at_s"].as_f64().unwrap_or(0.0),
                f["until_s"].as_f64().unwrap_or(0.0),
                f["note"].as_str().unwrap_or(""),
            );
        }
    }
    if let Some(readings) = s.get("soak_resources").and_then(|v| v.as_array()) {
        // One row per component, one column per reading: RSS MiB / fds.
        let names: Vec<String> = readings
            .first()
            .and_then(|r| r[1].as_object())
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default();
        out.push_str("\nRSS MiB / open fds (a changed pid is marked *)\n\n| component |");
        for r in readings {
            let _ = write!(out, " {} |", r[0].as_str().unwrap_or(""));
        }
        out.push_str("\n|---|");
        for _ in readings {
            out.push_str("---:|");
        }
        out.push('\n');
        for name in &names {
            let _ = write!(out, "| {name} |");
            let first_pid = readings[0][1][name]["pid"].as_u64();
            for r in readings {
                let u = &r[1][name];
                let moved = if u["pid"].as_u64() != first_pid {
                    "*"
                } else {
                    ""
                };
                let _ = write!(
                    out,
                    " {:.1} / {}{moved} |",
                    u["rss_kib"].as_u64().unwrap_or(0) as f64 / 1024.0,
                    u["fds"],
                );
            }
            out.push('\n');
        }
    }
    out
}

fn exec_true() -> serde_json::Value {
    json!({"command": {"argv": ["true"]}})
}

/// An open loop at `rate` from `start` for `duration`: each answer at its
/// intended time. At most [`MAX_OUTSTANDING`] in flight; more are
/// recorded as `dropped`.
async fn stream<F, Fut>(start: Instant, duration: Duration, rate: f64, call: F) -> Vec<Answer>
where
    F: Fn() -> (usize, Fut) + Send + Sync + 'static,
    Fut: std::future::Future<Output = Outcome> + Send + 'static,
{
    let answers = Arc::new(Mutex::new(Vec::new()));
    let limit = Arc::new(tokio::sync::Semaphore::new(MAX_OUTSTANDING));
    let n = (duration.as_secs_f64() * rate) as u64;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Instant>();
    // A thread keeps the schedule (tokio's timer has millisecond steps).
    let pacer = std::thread::spawn(move || {
        for i in 0..n {
            let intended = start + crate::load::intended_offset(i, rate);
            let now = Instant::now();
            if intended > now {
                std::thread::sleep(intended - now);
            }
            if tx.send(intended).is_err() {
                return;
            }
        }
    });
    let mut tasks = tokio::task::JoinSet::new();
    while let Some(intended) = rx.recv().await {
        let Ok(permit) = limit.clone().try_acquire_owned() else {
            push(&answers, start, intended, 0, &Err("dropped".into()));
            continue;
        };
        let (target, fut) = call();
        let answers = answers.clone();
        tasks.spawn(async move {
            let out = fut.await;
            push(&answers, start, intended, target, &out);
            drop(permit);
        });
        // Reap finished tasks as we go: the set stays as small as what is
        // in flight.
        while tasks.try_join_next().is_some() {}
    }
    let _ = pacer.join();
    while tasks.join_next().await.is_some() {}
    let mut v = std::mem::take(&mut *answers.lock().unwrap_or_else(|p| p.into_inner()));
    v.sort_by_key(|a| a.at);
    v
}

fn push(
    answers: &Mutex<Vec<Answer>>,
    start: Instant,
    intended: Instant,
    target: usize,
    out: &Outcome,
) {
    let class = match out {
        Err(e) if e == "dropped" => "dropped".to_owned(),
        other => soak::class(other),
    };
    answers
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(Answer {
            at: intended.saturating_duration_since(start),
            latency: intended.elapsed(),
            class,
            target,
        });
}

/// The scenario summary of a stream (for the common table).
fn summary(answers: &[Answer], elapsed: Duration) -> crate::load::Summary {
    let mut rec = crate::load::Recorder::new();
    for a in answers {
        let out: Outcome = match a.class.as_str() {
            "ok" => Ok(200),
            c => c.parse::<u16>().map_err(|_| c.to_owned()),
        };
        rec.record(a.latency, &out);
    }
    rec.summary(elapsed)
}

/// A client trusting every CA of `bundle`; `pooled` false opens a new
/// connection per request.
fn bundle_client(bundle: &[u8], pooled: bool) -> Result<reqwest::Client, String> {
    let mut b = reqwest::Client::builder();
    if !pooled {
        b = b.pool_max_idle_per_host(0);
    }
    for cert in reqwest::Certificate::from_pem_bundle(bundle).map_err(|e| e.to_string())? {
        b = b.add_root_certificate(cert);
    }
    b.build().map_err(|e| e.to_string())
}

/// One invoke over a new client (new TCP connection, new TLS handshake)
/// trusting the stack's CA and the rotation CA.
async fn fresh_connection(url: &str, token: &str, bundle: &[u8]) -> Outcome {
    let client = bundle_client(bundle, false)?;
    paths::send(
        client
            .post(url)
            .bearer_auth(token)
            .header("content-type", "application/json")
            .body(BODY.to_vec()),
    )
    .await
}

fn since(start: Instant) -> f64 {
    (start.elapsed().as_secs_f64() * 1000.0).round() / 1000.0
}

fn fault(name: &str, start: Instant, expected: &[&str], note: String) -> Fault {
    let at_s = since(start);
    Fault {
        name: name.into(),
        at_s,
        expected: expected.iter().map(|c| (*c).to_owned()).collect(),
        until_s: at_s,
        note,
    }
}

/// SIGKILLs the runtimed owning the function Run.
fn kill_owner(local: &Local, start: Instant) -> Fault {
    let owner = local
        .stack
        .run("echo-py")
        .and_then(|r| r["assignedPod"].as_str().map(str::to_owned))
        .unwrap_or_else(|| "runtimed-0".into());
    let note = match local.stack.kill(&owner) {
        Ok(pid) => format!("SIGKILL {owner} (pid {pid})"),
        Err(e) => format!("not injected: {e}"),
    };
    // 503 while the owner is gone; 429 `Busy` when the calls the gateway
    // held for the new owner meet the one-in-flight rule together.
    fault("runtimed-killed", start, &["503", "429"], note)
}

/// Resets every TCP connection to the control plane (the gateway's and
/// runtimed's watch streams).
fn drop_control_plane(local: &Local, start: Instant) -> Fault {
    let addr = local
        .control_plane
        .trim_start_matches("https://")
        .trim_start_matches("http://")
        .to_owned();
    let note = match addr.rsplit_once(':') {
        Some((host, port)) => {
            let out = std::process::Command::new("ss")
                .args([
                    "-K",
                    "dst",
                    host.trim_matches(['[', ']']),
                    "dport",
                    "=",
                    &format!(":{port}"),
                ])
                .output();
            match out {
                Ok(o) => {
                    let killed = String::from_utf8_lossy(&o.stdout)
                        .lines()
                        .filter(|l| l.contains("ESTAB"))
                        .count();
                    if killed > 0 {
                        format!("ss -K dst {addr}: {killed} connections reset")
                    } else {
                        format!(
                            "not injected: ss -K reset nothing ({})",
                            String::from_utf8_lossy(&o.stderr).trim()
                        )
                    }
                }
                Err(e) => format!("not injected: ss: {e}"),
            }
        }
        None => format!("not injected: control plane address {addr:?}"),
    };
    fault("control-plane-stream-dropped", start, &[], note)
}

/// Replaces the gateway's certificate with one of `ca` (which the
/// new-connection stream trusts beside the original CA).
fn rotate_certificate(local: &Local, ca: &kruntimes_certs::Ca, start: Instant) -> Fault {
    let note = match write_leaf(&local.pki.dir, ca) {
        Ok(()) => "gateway.crt/.key replaced by a leaf of the rotation CA".to_owned(),
        Err(e) => format!("not injected: {e}"),
    };
    fault("gateway-certificate-rotated", start, &[], note)
}

fn write_leaf(dir: &Path, ca: &kruntimes_certs::Ca) -> anyhow::Result<()> {
    let leaf = ca.issue(&kruntimes_certs::LeafSpec {
        common_name: "kruntimes-gateway".into(),
        dns_names: vec!["localhost".into()],
        ips: vec!["127.0.0.1".parse()?, "::1".parse()?],
        server: true,
        valid_days: 2,
        ..Default::default()
    })?;
    for (name, pem) in [
        ("gateway.key", &leaf.key_pem),
        ("gateway.crt", &leaf.cert_pem),
    ] {
        let tmp = dir.join(format!("{name}.soak"));
        kruntimes_certs::write_private(&tmp, pem.as_bytes())?;
        std::fs::rename(&tmp, dir.join(name))?;
    }
    Ok(())
}

/// 500 idle sockets, 500 partial ClientHellos and 300 requests with
/// made-up tokens at the gateway; returns the fault and the made-up
/// tokens' answers by class.
async fn flood(
    local: &Local,
    url: &str,
    bundle: &[u8],
    start: Instant,
) -> (Fault, BTreeMap<String, u64>) {
    let gateway = local
        .stack
        .gateway
        .trim_start_matches("https://")
        .to_owned();
    let mut sockets = Vec::new();
    let mut failed = 0u64;
    for i in 0..1000 {
        match tokio::net::TcpStream::connect(&gateway).await {
            Ok(mut s) => {
                if i % 2 == 1 {
                    let _ = s.write_all(&[0x16, 0x03, 0x01, 0x02, 0x00]).await;
                }
                sockets.push(s);
            }
            Err(_) => failed += 1,
        }
    }
    let f = fault(
        "unauthenticated-burst",
        start,
        &[],
        format!(
            "{} idle or partial-TLS sockets held ({failed} refused), 300 made-up tokens",
            sockets.len()
        ),
    );
    // The made-up tokens share one connection: the handshake storm is the
    // sockets' part, this is the authentication's.
    let client = bundle_client(bundle, true);
    let mut answers = BTreeMap::new();
    if let Ok(client) = client {
        let mut set = tokio::task::JoinSet::new();
        for i in 0..300 {
            let (client, url) = (client.clone(), url.to_owned());
            set.spawn(async move {
                paths::send(
                    client
                        .post(url)
                        .bearer_auth(format!("made-up-{i}"))
                        .body(BODY.to_vec()),
                )
                .await
            });
        }
        while let Some(r) = set.join_next().await {
            if let Ok(out) = r {
                *answers.entry(soak::class(&out)).or_default() += 1;
            }
        }
    }
    // The sockets stay open until the gateway's handshake deadline closes
    // them (or the soak ends).
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(15)).await;
        drop(sockets);
    });
    (f, answers)
}

/// RSS and open descriptors of every component: `krt up` (the control
/// plane) and each child in `processes.json` (gateway, runtimed and
/// Runtime Servers).
fn usage(local: &Local) -> BTreeMap<String, Usage> {
    let mut out = BTreeMap::new();
    let Ok(procs) = local.stack.processes() else {
        return out;
    };
    let mut read = |name: String, pid: u32| {
        if let Some((_, rss, _)) = proc_usage(pid) {
            let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
                .map(|d| d.count() as u64)
                .unwrap_or(0);
            out.insert(
                name,
                Usage {
                    pid,
                    rss_kib: rss,
                    fds,
                },
            );
        }
    };
    let mut parent = None;
    for (name, p) in &procs {
        let Some(pid) = p["pid"].as_u64().map(|p| p as u32) else {
            continue;
        };
        parent = parent.or_else(|| ppid(pid));
        read(name.clone(), pid);
    }
    if let Some(pid) = parent {
        read("krt-up (control plane)".into(), pid);
    }
    out
}

fn ppid(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}
