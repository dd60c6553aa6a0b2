//! `krt logs RUN [-f] [-o text|json]`: the owner's log lines about one Run
//! — runtimed's and its Runtime Server's records (lifecycle and
//! invocations: neither logs payloads), and under `krt up` the Run's own
//! log of handler output (`STATE_DIR/work/<instance>/.logs/<uid>.log`,
//! stdout and stderr) — from `STATE_DIR/logs/` under `krt up`, from the
//! owner Pod's `runtimed` and `runtime` containers through the API server
//! on a cluster. Without `-f` the two are merged in timestamp order; with
//! it, lines print as they come. Printed for people by default ([`pretty`]),
//! as the JSON lines themselves with `-o json`.

use std::io::{BufRead as _, Seek as _};
use std::pin::Pin;
use std::time::Duration;

use anyhow::{Context as _, bail};
use futures::{AsyncBufReadExt as _, Stream, StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt as _;
use kube::api::{Api, ListParams, LogParams};

use kruntimes_client::{RunInfo, Target};

type Lines = Pin<Box<dyn Stream<Item = anyhow::Result<String>> + Send>>;

/// How `krt logs` prints a line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// For people: time, source, level, message and fields.
    Text,
    /// The JSON line as logged.
    Json,
}

impl LogFormat {
    fn render(self, line: &str) -> String {
        match self {
            Self::Text => pretty(line),
            Self::Json => line.to_owned(),
        }
    }
}

/// Prints the owner's lines that name the Run's UID; with `follow`, keeps
/// printing new ones.
pub async fn logs(
    t: &Target,
    namespace: &str,
    name: &str,
    follow: bool,
    format: LogFormat,
) -> anyhow::Result<()> {
    let (run, _) = t.run(namespace, name).await?;
    let Some(pod) = run.assigned_pod.clone() else {
        bail!("run {namespace}/{name} has no owner yet ({})", run.phase);
    };
    let sources = match t {
        Target::Embedded(e) => {
            let mut s = embedded(e.log_dir(), &pod, follow)?;
            s.extend(run_log(&e.run_log_dir(&pod), &run.uid, follow));
            s
        }
        Target::Cluster(c) => cluster(c.client(), &pod, follow).await?,
    };
    let mine = |r: &anyhow::Result<String>| {
        let keep = match r {
            Ok(line) => mentions(line, &run),
            Err(_) => true,
        };
        futures::future::ready(keep)
    };
    if follow {
        let mut all = futures::stream::select_all(sources).filter(mine);
        while let Some(line) = all.next().await {
            println!("{}", format.render(&line?));
        }
        return Ok(());
    }
    let mut lines = Vec::new();
    for source in sources {
        lines.extend(source.filter(mine).try_collect::<Vec<_>>().await?);
    }
    for line in merge_by_time(lines) {
        println!("{}", format.render(&line));
    }
    Ok(())
}

/// A log line for people. The stack's JSON records read
/// `TIME SOURCE LEVEL message key=value…` (fields in key order; the Run's
/// UID left out: it is
/// the Run asked for), the Run's own output `TIME stdout|stderr text`;
/// any other line prints as it is.
fn pretty(line: &str) -> String {
    use serde_json::Value;
    let Ok(Value::Object(v)) = serde_json::from_str::<Value>(line) else {
        return line.to_owned();
    };
    let text = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("");
    let time = text("timestamp");
    if let Some(stream) = v.get("stream").and_then(Value::as_str) {
        return format!("{time} {stream} {}", text("line"));
    }
    let target = text("target");
    let source = if target.starts_with("kruntimes_runtime_server") {
        "runtime-server"
    } else if target.starts_with("kruntimes_runtimed") {
        "runtimed"
    } else {
        target.split("::").next().unwrap_or(target)
    };
    let mut out = format!("{time} {source} {}", text("level"));
    if let Some(Value::Object(fields)) = v.get("fields") {
        if let Some(m) = fields.get("message").and_then(Value::as_str) {
            out.push(' ');
            out.push_str(m);
        }
        // In key order, whatever order the JSON map keeps.
        let mut rest: Vec<_> = fields
            .iter()
            .filter(|(k, _)| *k != "message" && *k != "run_uid")
            .collect();
        rest.sort_by(|a, b| a.0.cmp(b.0));
        for (k, value) in rest {
            match value {
                Value::String(s) if !s.is_empty() && !s.contains(char::is_whitespace) => {
                    out.push_str(&format!(" {k}={s}"));
                }
                other => out.push_str(&format!(" {k}={other}")),
            }
        }
    }
    out
}

/// Orders lines of several logs by their JSON `timestamp` (RFC 3339 in UTC
/// sorts as text); lines without one keep their place after the previous
/// line.
fn merge_by_time(lines: Vec<String>) -> Vec<String> {
    let mut last = String::new();
    let mut keyed: Vec<(String, usize, String)> = lines
        .into_iter()
        .enumerate()
        .map(|(i, line)| {
            if let Some(ts) = timestamp(&line) {
                last = ts;
            }
            (last.clone(), i, line)
        })
        .collect();
    keyed.sort();
    keyed.into_iter().map(|(_, _, l)| l).collect()
}

fn timestamp(line: &str) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(line).ok()?;
    v.get("timestamp")?.as_str().map(str::to_owned)
}

fn mentions(line: &str, run: &RunInfo) -> bool {
    line.contains(&run.uid)
}

/// The log files of `pod` (`runtimed-N`) and of its Runtime Server
/// (`runtime-server-N`).
fn embedded(dir: std::path::PathBuf, pod: &str, follow: bool) -> anyhow::Result<Vec<Lines>> {
    let server = format!("runtime-server-{}", pod.trim_start_matches("runtimed-"));
    let mut out = Vec::new();
    for (i, name) in [pod, server.as_str()].into_iter().enumerate() {
        let path = dir.join(format!("{name}.log"));
        match std::fs::File::open(&path) {
            Ok(f) => out.push(tail(f, follow)),
            // runtimed's log is required; a server's may not exist yet.
            Err(e) if i == 0 => {
                return Err(e).with_context(|| format!("open {}", path.display()));
            }
            Err(_) => {}
        }
    }
    Ok(out)
}

/// The lines of `file`; with `follow`, then the lines appended to it.
fn tail(file: std::fs::File, follow: bool) -> Lines {
    let reader = std::io::BufReader::new(file);
    Box::pin(futures::stream::try_unfold(
        reader,
        move |mut reader| async move {
            let mut line = String::new();
            loop {
                line.clear();
                let n = reader.read_line(&mut line)?;
                if n > 0 && line.ends_with('\n') {
                    line.pop();
                    return Ok(Some((line, reader)));
                }
                if n > 0 {
                    // A line being written: read it again once complete.
                    let pos = reader.stream_position()?;
                    reader.seek(std::io::SeekFrom::Start(pos - n as u64))?;
                }
                if !follow {
                    return Ok(if n > 0 { Some((line, reader)) } else { None });
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        },
    ))
}

/// The Run's own log of handler output (`<uid>.log.1`, then `<uid>.log`),
/// when it has one.
fn run_log(dir: &std::path::Path, uid: &str, follow: bool) -> Vec<Lines> {
    let path = dir.join(format!("{uid}.log"));
    let mut out = Vec::new();
    if let Ok(f) = std::fs::File::open(path.with_extension("log.1")) {
        out.push(tail(f, false));
    }
    if let Ok(f) = std::fs::File::open(&path) {
        out.push(tail(f, follow));
    }
    out
}

/// The `runtimed` and `runtime` containers' logs of the owner Pod.
async fn cluster(client: &kube::Client, pod: &str, follow: bool) -> anyhow::Result<Vec<Lines>> {
    // The owner Pod lives in its Runtime's namespace; find it by name.
    let found = Api::<Pod>::all(client.clone())
        .list(&ListParams::default().labels(kruntimes_api::RUNTIME_LABEL))
        .await?
        .items
        .into_iter()
        .find(|p| p.name_any() == pod)
        .with_context(|| format!("owner Pod {pod} not found"))?;
    let api = Api::<Pod>::namespaced(client.clone(), &found.namespace().unwrap_or_default());
    let mut out = Vec::new();
    for container in ["runtimed", "runtime"] {
        let params = LogParams {
            container: Some(container.into()),
            follow,
            ..Default::default()
        };
        let lines = api
            .log_stream(pod, &params)
            .await
            .with_context(|| format!("logs of {pod}/{container}"))?
            .lines()
            .map_err(anyhow::Error::from);
        out.push(Box::pin(lines) as Lines);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_print_for_people_and_other_lines_as_they_are() {
        let rec = r#"{"timestamp":"2026-12-07T04:29:24.579Z","level":"INFO","fields":{"message":"invocation finished","run_uid":"u-1","invocation_id":"inv 1","backend":"python","duration_ms":12},"target":"kruntimes_runtimed::function::invoke"}"#;
        assert_eq!(
            pretty(rec),
            r#"2026-12-07T04:29:24.579Z runtimed INFO invocation finished backend=python duration_ms=12 invocation_id="inv 1""#
        );
        let server = r#"{"timestamp":"T","level":"WARN","fields":{"message":"m"},"target":"kruntimes_runtime_server::function"}"#;
        assert_eq!(pretty(server), "T runtime-server WARN m");
        let printed = r#"{"timestamp":"T","stream":"stdout","line":"hello","run_uid":"u-1"}"#;
        assert_eq!(pretty(printed), "T stdout hello");
        let raised = r#"{"timestamp":"T","stream":"stderr","line":"Traceback (most recent call last):","run_uid":"u-1"}"#;
        assert_eq!(
            pretty(raised),
            "T stderr Traceback (most recent call last):"
        );
        for plain in ["Traceback", "[1, 2]", "", "{not json"] {
            assert_eq!(pretty(plain), plain);
        }
        assert_eq!(LogFormat::Json.render(rec), rec);
    }

    #[test]
    fn two_logs_merge_in_timestamp_order_and_plain_lines_stay_put() {
        let a = r#"{"timestamp":"2026-12-01T10:00:01Z","m":"a1"}"#;
        let b = r#"{"timestamp":"2026-12-01T10:00:00Z","m":"b1"}"#;
        let plain = "Traceback (most recent call last):";
        let c = r#"{"timestamp":"2026-12-01T10:00:02Z","m":"b2"}"#;
        let got = merge_by_time(vec![a.into(), b.into(), plain.into(), c.into()]);
        assert_eq!(got, vec![b, plain, a, c]);
    }
}
