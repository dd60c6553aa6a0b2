//! Artifacts (`docs/artifacts.md`): how fast a large artifact goes into the
//! store and comes back out through kruntimes, beside the store's own
//! client on the same machine, and whether the gateway and runtimed stream
//! it or hold it.
//!
//! A stack of its own: versitygw on loopback (`kruntimes_testkit::S3Server`,
//! the S3 server the tests run) and `krt up --artifacts s3://…` against it
//! with one runtimed. With `--artifact-mib` (256 by default) and
//! `--artifact-reps` (5) repetitions, interleaved, order rotating:
//!
//! - **Upload.** `artifact-export`: a Bash task writes the random file into
//!   its working directory, moves it into `$KRUNTIME_ARTIFACTS_DIR` (a
//!   rename) and prints the time; from that time to the Run's `Succeeded`
//!   in `runs.json` (read every 10 ms) — the task's exit, the Runtime
//!   Server streaming the file to runtimed over gRPC, runtimed's upload
//!   with its SHA-256, the manifest, the status. `artifact-export-none`:
//!   the same task without the move, so the part that is not the export
//!   (exit, status, the read of `runs.json`) can be taken out. Beside them,
//!   the store's own client uploads the same bytes from a file:
//!   `artifact-put-object-store`, the `object_store` crate's S3 client
//!   that `kruntimes-artifacts` is built on, a multipart PUT with
//!   runtimed's part size and parts in flight, fed 1 MiB at a time as
//!   runtimed is; `artifact-put-store-upload`, `kruntimes-artifacts`'
//!   `Store::upload` (the same PUT with the SHA-256 runtimed computes).
//! - **Download.** One artifact, read whole and discarded as it arrives:
//!   `artifact-get-gateway` (client → gateway → runtimed → store, HTTPS,
//!   HTTP/2 where negotiated), `artifact-get-runtimed` (straight to
//!   runtimed with the gateway's client certificate: the path without the
//!   gateway), `artifact-get-s3` (a signed GET straight from versitygw).
//! - **Memory.** `VmRSS` of the gateway and of runtimed every 50 ms
//!   ([`rss`]) from before the first download to after the last (and of
//!   runtimed over the uploads): the largest reading less the first, and
//!   how far `VmHWM` rose.
//! - **CPU.** The CPU-time clocks of the gateway, runtimed, the Runtime
//!   Server, versitygw and this client around every transfer ([`cpu`]),
//!   per GiB moved: where a path's time goes on a machine it saturates.
//!
//! Throughput is the artifact's size over the median time of a series.

mod clients;
mod cpu;
mod rss;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, bail, ensure};
use kruntimes_proto::api;
use kruntimes_testkit::{Options, S3Server, Stack};
use serde_json::{Value, json};

use self::clients::{Bucket, Got};
use self::cpu::{Usage, Watched};
use self::rss::Sampler;
use super::context::Ctx;
use crate::load::{Recorder, rotation};
use crate::{Args, Sizes};

/// The bucket the stack's store and the baselines use.
const BUCKET: &str = "artifacts";
/// The stack's key prefix (`s3://BUCKET/PREFIX`).
const PREFIX: &str = "bench";
/// The namespace of the task Runs.
const NAMESPACE: &str = "default";
/// The artifact's name.
const NAME: &str = "big.bin";
/// How long one task may take, its export included.
const WITHIN: Duration = Duration::from_secs(600);
/// How often `runs.json` is read while a task runs.
const POLL: Duration = Duration::from_millis(10);
/// Bytes in a MiB.
const MIB: f64 = 1_048_576.0;
/// Bytes in a GiB.
const GIB: f64 = 1_073_741_824.0;

/// Records the `artifact-*` series and figures, or skips `artifacts` with
/// the reason.
pub(super) async fn run(ctx: &mut Ctx, krt: &Path, args: &Args, sizes: &Sizes) {
    ctx.bar.set_message("artifacts");
    if let Err(e) = measure(ctx, krt, args, sizes).await {
        ctx.skip("artifacts", format!("{e:#}"));
    }
}

/// The times of one series, and the CPU its transfers took.
#[derive(Default)]
struct Series {
    took: Vec<Duration>,
    cpu: Usage,
}

impl Series {
    /// Records one transfer: it took `took`, and the watched processes'
    /// CPU went from `before` to `after`.
    fn push(&mut self, took: Duration, before: &Usage, after: &Usage) {
        self.took.push(took);
        cpu::add(&mut self.cpu, before, after);
    }

    /// CPU ms per GiB of `bytes`-byte transfers, by role.
    fn cpu_ms_per_gib(&self, bytes: u64) -> BTreeMap<&'static str, f64> {
        let gib = self.took.len() as f64 * bytes as f64 / GIB;
        self.cpu
            .iter()
            .map(|(role, d)| (*role, round(d.as_secs_f64() * 1e3 / gib.max(1e-12))))
            .collect()
    }

    /// The median time, s.
    fn median_secs(&self) -> f64 {
        median(self.took.iter().map(Duration::as_secs_f64).collect())
    }

    /// MiB/s of `bytes` over each time, in order.
    fn each_mib_per_sec(&self, bytes: u64) -> Vec<f64> {
        self.took
            .iter()
            .map(|d| round(bytes as f64 / MIB / d.as_secs_f64().max(1e-9)))
            .collect()
    }

    /// MiB/s of `bytes` over the median time.
    fn mib_per_sec(&self, bytes: u64) -> f64 {
        bytes as f64 / MIB / self.median_secs().max(1e-9)
    }

    /// As a scenario of the report (each time a request).
    fn recorder(&self) -> (Recorder, Duration) {
        let mut rec = Recorder::new();
        for d in &self.took {
            rec.record(*d, &Ok(200));
        }
        (rec, self.took.iter().sum())
    }
}

/// The median of `v` (the mean of the middle two of an even count).
fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// `x` to three decimals, for the report.
fn round(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// Now, Unix seconds.
fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// The time a script printed last (`date +%s.%N`).
fn printed_time(stdout: &str) -> Option<f64> {
    stdout
        .lines()
        .rev()
        .find_map(|l| l.trim().parse::<f64>().ok())
        .filter(|t| *t > 1e9)
}

/// The task: `bytes` random bytes written into its working directory,
/// moved into its artifacts directory when `export`, then the time.
fn script(bytes: u64, export: bool) -> String {
    let moved = if export {
        format!("mv {NAME} \"$KRUNTIME_ARTIFACTS_DIR/{NAME}\"\n")
    } else {
        String::new()
    };
    format!("set -e\nhead -c {bytes} /dev/urandom > {NAME}\n{moved}date +%s.%N\n")
}

/// Starts `krt up` with its store in `s3`'s bucket [`BUCKET`] and one
/// runtimed.
async fn start_stack(krt: &Path, s3: &S3Server, gateway_threads: u16) -> anyhow::Result<Stack> {
    let krt = krt.to_path_buf();
    let extra_args = vec![
        "--artifacts".into(),
        format!("s3://{BUCKET}/{PREFIX}"),
        "--artifacts-endpoint".into(),
        s3.endpoint(),
        "--gateway-threads".into(),
        gateway_threads.to_string(),
    ];
    let env = vec![
        (
            "KRUNTIMES_ARTIFACT_ACCESS_KEY_ID".into(),
            s3.access_key().to_owned(),
        ),
        (
            "KRUNTIMES_ARTIFACT_SECRET_ACCESS_KEY".into(),
            s3.secret_key().to_owned(),
        ),
    ];
    tokio::task::spawn_blocking(move || {
        Stack::start(
            &krt,
            Options {
                runtimed: 1,
                max_runtimed: None,
                runs: Vec::new(),
                extra_args,
                env,
            },
        )
    })
    .await?
}

/// The pid of child `name` of the stack (`processes.json`).
fn pid(stack: &Stack, name: &str) -> anyhow::Result<u32> {
    let procs = stack.processes()?;
    let pid = procs
        .get(name)
        .and_then(|p| p["pid"].as_u64())
        .with_context(|| format!("no {name} in processes.json"))?;
    Ok(u32::try_from(pid)?)
}

/// One task Run ([`script`]): created, followed until it ended; the time
/// from the moment it printed to its `Succeeded` read in `runs.json`, and
/// its status.
async fn task(
    stack: &Stack,
    name: &str,
    bytes: u64,
    export: bool,
) -> anyhow::Result<(Duration, Value)> {
    let doc = json!({
        "apiVersion": "kruntimes.io/v1alpha1",
        "kind": "Run",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "runtime": "bash",
            "source": {"inline": script(bytes, export)},
            "mode": {"task": {}},
        },
    });
    stack.add_run(&format!("{name}.yaml"), &doc.to_string())?;
    let deadline = Instant::now() + WITHIN;
    let run = loop {
        if let Some(run) = stack.run(name)
            && ["Succeeded", "Failed", "Timeout", "Cancelled"]
                .contains(&run["phase"].as_str().unwrap_or_default())
        {
            break run;
        }
        if Instant::now() > deadline {
            bail!("task {name} had not ended after {} s", WITHIN.as_secs());
        }
        tokio::time::sleep(POLL).await;
    };
    let seen = now();
    ensure!(
        run["phase"] == "Succeeded",
        "task {name} ended {}/{}: {}",
        run["phase"],
        run["reason"],
        run["message"]
    );
    let printed = printed_time(run["task"]["stdoutTail"].as_str().unwrap_or_default())
        .with_context(|| format!("task {name} printed no time: {}", run["task"]))?;
    let refs = run["artifacts"].as_array().cloned().unwrap_or_default();
    if export {
        ensure!(
            refs.len() == 1 && refs[0]["size"] == bytes,
            "task {name} exported {refs:?}, not one file of {bytes} bytes"
        );
    } else {
        ensure!(refs.is_empty(), "task {name} exported {refs:?}");
    }
    Ok((Duration::from_secs_f64((seen - printed).max(0.0)), run))
}

/// The key of a Run's artifact in the bucket.
fn export_key(uid: &str) -> String {
    format!("{PREFIX}/{NAMESPACE}/{uid}/files/{NAME}")
}

/// The uploads: `artifact-export`, `artifact-export-none` and the two
/// baselines, `reps` each; returns the UID of the Run whose artifact is
/// kept for the downloads, and the series in that order.
async fn uploads(
    stack: &Stack,
    bucket: &Bucket,
    watched: &Watched,
    source: &Path,
    bytes: u64,
    reps: usize,
) -> anyhow::Result<(String, [Series; 4])> {
    // Unrecorded: runtimed's and the baselines' first connections to the
    // store, the first Bash.
    task(stack, "warm", 1 << 20, true).await?;
    stack.remove_run("warm.yaml")?;
    bucket
        .delete(&bucket.put_store(source, "warm").await?.1)
        .await?;
    bucket.put_raw(source, "baseline/warm-raw").await?;
    bucket.delete("baseline/warm-raw").await?;

    let mut series: [Series; 4] = Default::default();
    let mut kept: Option<String> = None;
    for i in 0..reps {
        for k in rotation(4, i) {
            let before = watched.now();
            match k {
                0 => {
                    let name = format!("export-{i}");
                    let (took, run) = task(stack, &name, bytes, true).await?;
                    series[0].push(took, &before, &watched.now());
                    let uid = run["uid"].as_str().context("uid")?.to_owned();
                    if kept.is_none() {
                        kept = Some(uid);
                    } else {
                        // Deleting a Run leaves its artifacts in the store.
                        stack.remove_run(&format!("{name}.yaml"))?;
                        bucket.delete(&export_key(&uid)).await?;
                    }
                }
                1 => {
                    let name = format!("none-{i}");
                    let took = task(stack, &name, bytes, false).await?.0;
                    series[1].push(took, &before, &watched.now());
                    stack.remove_run(&format!("{name}.yaml"))?;
                }
                2 => {
                    let key = format!("baseline/raw-{i}");
                    let took = bucket.put_raw(source, &key).await?;
                    series[2].push(took, &before, &watched.now());
                    bucket.delete(&key).await?;
                }
                _ => {
                    let (took, key) = bucket.put_store(source, &format!("store-{i}")).await?;
                    series[3].push(took, &before, &watched.now());
                    bucket.delete(&key).await?;
                }
            }
        }
    }
    Ok((kept.context("no export ran")?, series))
}

/// The three download paths of Run `uid`'s artifact.
struct Downloads<'a> {
    stack: &'a Stack,
    s3: &'a S3Server,
    gateway: reqwest::Client,
    gateway_url: String,
    runtimed: reqwest::Client,
    runtimed_url: String,
    s3_path: String,
    bytes: u64,
}

impl Downloads<'_> {
    /// Path `k`: 0 the gateway, 1 runtimed, 2 the store.
    async fn get(&self, k: usize) -> anyhow::Result<Got> {
        let what = ["the gateway", "runtimed", "the store"][k];
        let got = match k {
            0 => {
                let req = self
                    .gateway
                    .get(&self.gateway_url)
                    .bearer_auth(&self.stack.token);
                clients::download(async { Ok(req.send().await?) }, self.bytes).await
            }
            1 => {
                // What the gateway adds that runtimed requires of every
                // request: the hop marker and an invocation id. No
                // fencing headers: the artifacts route is not fenced.
                let req = self
                    .runtimed
                    .get(&self.runtimed_url)
                    .header(api::HEADER_HOP, api::HOP_GATEWAY)
                    .header(
                        api::HEADER_INVOCATION_ID,
                        uuid::Uuid::new_v4().simple().to_string(),
                    );
                clients::download(async { Ok(req.send().await?) }, self.bytes).await
            }
            _ => {
                let send = self.s3.signed_request(
                    reqwest::Method::GET,
                    &self.s3_path,
                    Vec::new(),
                    self.s3.access_key(),
                    self.s3.secret_key(),
                );
                clients::download(send, self.bytes).await
            }
        };
        got.with_context(|| format!("download from {what}"))
    }
}

async fn measure(ctx: &mut Ctx, krt: &Path, args: &Args, sizes: &Sizes) -> anyhow::Result<()> {
    let (bytes, reps) = (sizes.artifact_bytes, sizes.artifact_reps);
    if !krt.exists() {
        bail!(
            "{} not found: build it with `cargo build --release -p krt` or pass --krt",
            krt.display()
        );
    }
    let s3 = S3Server::start().await?;
    s3.create_bucket(BUCKET).await?;
    let stack = start_stack(krt, &s3, args.gateway_threads).await?;
    let (gateway_pid, runtimed_pid) = (pid(&stack, "gateway")?, pid(&stack, "runtimed-0")?);
    let port = s3
        .endpoint()
        .rsplit(':')
        .next()
        .unwrap_or_default()
        .to_owned();
    let watched = Watched::new(vec![
        ("gateway", gateway_pid),
        ("runtimed", runtimed_pid),
        ("runtime_server", pid(&stack, "runtime-server-0")?),
        (
            "store",
            cpu::versitygw_pid(&port).context("versitygw's pid")?,
        ),
        ("client", std::process::id()),
    ]);
    let bucket = Bucket::open(&s3, BUCKET, PREFIX)?;
    let scratch = tempfile::tempdir()?;
    let source = scratch.path().join(NAME);
    clients::random_file(&source, bytes)?;

    let export_rss = Sampler::start(&[runtimed_pid])?;
    let (uid, [exports, nones, raws, stores]) =
        uploads(&stack, &bucket, &watched, &source, bytes, reps).await?;
    let export_rss = export_rss.finish();
    // The baselines' source is not needed any more.
    drop(scratch);

    let run = stack
        .runs()?
        .into_iter()
        .find(|r| r["uid"] == uid.as_str())
        .context("the kept export's Run")?;
    let owner = super::local::owner_address(&stack, &run)?;
    let pki = stack.state_dir().join("pki");
    let route = format!("/v1/namespaces/{NAMESPACE}/runtimes/bash/runs/{uid}/artifacts/{NAME}");
    let paths = Downloads {
        stack: &stack,
        s3: &s3,
        gateway: clients::https_client(&pki.join("public-ca.crt"), args.client_http1)?,
        gateway_url: format!("{}{route}", stack.gateway),
        runtimed: clients::runtimed_client(&pki, owner, args.client_http1)?,
        runtimed_url: format!("https://{}:{}{route}", clients::RUNTIMED_HOST, owner.port()),
        s3_path: format!("/{BUCKET}/{}", export_key(&uid)),
        bytes,
    };
    let sampler = Sampler::start(&[gateway_pid, runtimed_pid])?;
    // Unrecorded: each path's connection, the store's file into the page
    // cache. Sampled: the first download through a process counts too.
    let mut versions = Vec::new();
    for k in 0..3 {
        versions.push(format!("{:?}", paths.get(k).await?.version));
    }
    let mut gets: [Series; 3] = Default::default();
    for i in 0..reps {
        for k in rotation(3, i) {
            let before = watched.now();
            let took = paths.get(k).await?.took;
            gets[k].push(took, &before, &watched.now());
        }
    }
    let peaks = sampler.finish();
    drop(paths);

    let cfg = &mut ctx.report.config;
    cfg.insert("artifact_bytes".into(), json!(bytes));
    cfg.insert("artifact_reps".into(), json!(reps));
    cfg.insert(
        "artifact_store".into(),
        json!(format!(
            "versitygw (posix backend, {}) on 127.0.0.1",
            s3.data_dir().display()
        )),
    );
    cfg.insert(
        "artifact_put_baseline".into(),
        json!(format!(
            "object_store S3 multipart PUT, {} MiB parts, {} in flight, {} KiB writes",
            clients::PART_BYTES >> 20,
            clients::PARTS_IN_FLIGHT,
            kruntimes_proto::runtime::ARTIFACT_CHUNK_BYTES >> 10
        )),
    );
    cfg.insert(
        "artifact_get_protocols".into(),
        json!({"gateway": versions[0], "runtimed": versions[1], "s3": versions[2]}),
    );

    let [gateway, runtimed, store] = gets;
    for (name, s) in [
        ("artifact-export", &exports),
        ("artifact-export-none", &nones),
        ("artifact-put-object-store", &raws),
        ("artifact-put-store-upload", &stores),
        ("artifact-get-gateway", &gateway),
        ("artifact-get-runtimed", &runtimed),
        ("artifact-get-s3", &store),
    ] {
        let (rec, elapsed) = s.recorder();
        ctx.put(name, &rec, elapsed);
        let key = name.replace('-', "_");
        if name == "artifact-export-none" {
            // Nothing was exported: its time is `artifact_export_fixed_ms`.
            continue;
        }
        ctx.figure(
            &format!("{key}_cpu_ms_per_gib"),
            json!(s.cpu_ms_per_gib(bytes)),
        );
        ctx.figure(
            &format!("{key}_mib_per_sec"),
            json!(round(s.mib_per_sec(bytes))),
        );
        ctx.figure(
            &format!("{key}_mib_per_sec_each"),
            json!(s.each_mib_per_sec(bytes)),
        );
    }
    // The export less what a task without one takes from its print to its
    // status read.
    let fixed = nones.median_secs();
    let net = exports.median_secs() - fixed;
    ctx.figure("artifact_export_fixed_ms", json!(round(fixed * 1e3)));
    if net > 0.0 {
        let net_rate = bytes as f64 / MIB / net;
        ctx.figure("artifact_export_net_mib_per_sec", json!(round(net_rate)));
        ctx.figure(
            "artifact_export_net_vs_object_store_ratio",
            json!(round(net_rate / raws.mib_per_sec(bytes))),
        );
    }
    for (key, a, b) in [
        ("artifact_export_vs_object_store_ratio", &exports, &raws),
        (
            "artifact_store_upload_vs_object_store_ratio",
            &stores,
            &raws,
        ),
        ("artifact_get_gateway_vs_s3_ratio", &gateway, &store),
        (
            "artifact_get_gateway_vs_runtimed_ratio",
            &gateway,
            &runtimed,
        ),
        ("artifact_get_runtimed_vs_s3_ratio", &runtimed, &store),
    ] {
        ctx.figure(
            key,
            json!(round(a.mib_per_sec(bytes) / b.mib_per_sec(bytes))),
        );
    }
    for (key, peak) in [
        ("artifact_get_gateway", peaks.first()),
        ("artifact_get_runtimed", peaks.get(1)),
        ("artifact_export_runtimed", export_rss.first()),
    ] {
        let peak = peak.copied().unwrap_or_default();
        ctx.figure(
            &format!("{key}_rss_base_mib"),
            json!(round(peak.base_kib as f64 / 1024.0)),
        );
        ctx.figure(
            &format!("{key}_rss_max_mib"),
            json!(round(peak.max_kib as f64 / 1024.0)),
        );
        ctx.figure(
            &format!("{key}_rss_growth_mib"),
            json!(round(peak.growth_mib())),
        );
        ctx.figure(
            &format!("{key}_hwm_growth_mib"),
            json!(round(peak.hwm_growth_mib())),
        );
        ctx.figure(&format!("{key}_rss_samples"), json!(peak.samples));
    }
    drop(stack);
    drop(s3);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_median_is_the_middle_or_the_mean_of_the_middle_two() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(Vec::new()), 0.0);
    }

    #[test]
    fn the_script_moves_the_file_only_when_it_exports() {
        let s = script(1024, true);
        assert!(s.contains("head -c 1024 /dev/urandom > big.bin"), "{s}");
        assert!(s.contains("mv big.bin \"$KRUNTIME_ARTIFACTS_DIR/big.bin\""));
        assert!(s.trim_end().ends_with("date +%s.%N"), "{s}");
        assert!(!script(1024, false).contains("mv "));
        assert_eq!(printed_time("x\n1765112345.5\n"), Some(1_765_112_345.5));
        assert_eq!(printed_time("12\n"), None);
    }

    #[test]
    fn a_series_rate_is_its_size_over_its_median_time() {
        let mut s = Series::default();
        for secs in [1, 4, 2] {
            let before = Usage::from([("gateway", Duration::ZERO)]);
            let after = Usage::from([("gateway", Duration::from_millis(secs * 100))]);
            s.push(Duration::from_secs(secs), &before, &after);
        }
        // 3 × 4 MiB is 3/256 GiB, for 700 ms of the gateway's CPU.
        assert_eq!(s.cpu_ms_per_gib(4 << 20)["gateway"], 59_733.333);
        assert_eq!(s.mib_per_sec(4 << 20), 2.0);
        assert_eq!(s.each_mib_per_sec(4 << 20), vec![4.0, 1.0, 2.0]);
    }
}
