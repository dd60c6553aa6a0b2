//! Runs `kruntimes-bench --quick` once to prove the harness works end to end
//! (its own stack, every scenario, JSON and SVG output). No timing is
//! asserted: these machines are shared and noisy.

// Test helpers panic on failure: that is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::Command;

fn krt() -> PathBuf {
    // The bench drives the `krt` binary of this workspace; build it (a no-op
    // when up to date) next to this test's binaries.
    let bench = PathBuf::from(env!("CARGO_BIN_EXE_kruntimes-bench"));
    let dir = bench.parent().expect("binary directory").to_path_buf();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "-p", "krt"])
        .current_dir(kruntimes_testkit::package_dir())
        .status()
        .expect("run cargo build -p krt");
    assert!(status.success(), "cargo build -p krt failed");
    dir.join("krt")
}

#[test]
fn quick_run_produces_every_scenario_and_summary_figure() {
    let krt = krt();
    let out_dir = tempfile::tempdir().unwrap();
    let json = out_dir.path().join("bench.json");
    let svg = out_dir.path().join("bench.svg");
    let trace = out_dir.path().join("trace.tsv");
    let out = Command::new(env!("CARGO_BIN_EXE_kruntimes-bench"))
        .arg("--quick")
        .arg("--no-progress")
        .arg("--krt")
        .arg(&krt)
        .arg("--json")
        .arg(&json)
        .arg("--plot")
        .arg(&svg)
        .arg("--trace")
        .arg(&trace)
        .args(["--requests", "100", "--table-entries", "5000"])
        .output()
        .expect("run kruntimes-bench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "bench failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("| gateway-python |"), "{stdout}");
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    for scenario in [
        "direct-python",
        "gateway-python",
        "gateway-bash",
        "open-gateway",
        "open-direct",
        "spawn-python",
        "auth-hit",
        "auth-miss",
        "kube-auth-hit",
        "kube-auth-10-tokens",
        "propagation",
        "session-exec-true",
        "session-write-4k",
        "session-read-4k",
        "session-write-1m",
        "session-read-1m",
        "pool-warm",
        "pool-cold",
        "task-python",
        "spawn-python-c",
        "tasks-10",
        "spawn-tasks-10",
        "artifact-export",
        "artifact-export-none",
        "artifact-put-object-store",
        "artifact-put-store-upload",
        "artifact-get-gateway",
        "artifact-get-runtimed",
        "artifact-get-s3",
    ] {
        let s = &report["scenarios"][scenario];
        assert!(s["count"].as_u64().unwrap_or(0) > 0, "{scenario} ran: {s}");
        if scenario.starts_with("open-") {
            // Open-loop requests may overlap on the one function Run (one
            // in-flight invocation): 429 is the only acceptable error.
            let errors = s["errors"].as_object().unwrap();
            assert!(
                errors.keys().all(|k| k == "429"),
                "{scenario} had errors: {s}"
            );
            // How many overlap depends on this machine's speed at the
            // moment (a timing, not a property): only that calls succeed.
            assert!(s["ok"].as_u64().unwrap() > 0, "{s}");
            // The path's rounds add up to every request of the quick run.
            assert_eq!(s["count"], 600, "{scenario}: {s}");
        } else {
            assert_eq!(s["count"], s["ok"], "{scenario} had errors: {s}");
        }
    }
    for scenario in ["closed-direct", "closed-gateway"] {
        let s = &report["scenarios"][scenario];
        assert!(s["ok"].as_u64().unwrap_or(0) > 0, "{scenario}: {s}");
        assert_eq!(s["count"], s["ok"], "{scenario} had errors: {s}");
    }
    assert_eq!(
        report["config"]["client_protocol"], "h2 where negotiated",
        "{}",
        report["config"]
    );
    let summary = &report["summary"];
    for key in [
        "gateway_added_p50_us",
        "gateway_added_p99_us",
        "python_warm_p50_us",
        "python_spawn_p50_us",
        "python_warm_vs_spawn_speedup",
        "auth_hit_p50_us",
        "kube_auth_hit_p50_us",
        "kube_auth_hit_overhead_p50_us",
        "kube_tokenreviews_10_tokens",
        "kube_subjectaccessreviews_10_tokens",
        "auth_miss_p50_us",
        "propagation_p99_ms",
        "table_bytes_per_run",
        "gateway_cpu_ms_per_10k",
        "gateway_peak_rss_mb",
        "closed_loop_rps_direct",
        "closed_loop_rps_gateway",
        "artifact_export_vs_object_store_ratio",
        "artifact_get_gateway_vs_s3_ratio",
        "artifact_get_gateway_rss_growth_mib",
    ] {
        assert!(
            !summary[key].is_null(),
            "summary.{key} is missing: {summary}"
        );
    }
    // Ten tokens cost one TokenReview and one SubjectAccessReview each,
    // however many requests they make within the cache TTLs.
    assert_eq!(summary["kube_tokenreviews_10_tokens"], 10, "{summary}");
    // The control plane: the pure pass ran, and a burst on a real API server
    // bound every Run without over-committing a Pod.
    assert!(
        summary["scheduling_us_per_run_median"].as_f64().is_some(),
        "{summary}"
    );
    assert_eq!(summary["burst_over_committed"], 0, "{summary}");
    // The pool refill: every session of both bursts became Ready (counted
    // above), the cold pool started one instance per session, and the warm
    // pool refilled to its five free instances.
    assert_eq!(summary["pool_sessions"], 10, "{summary}");
    assert_eq!(summary["pool_cold_instances_started"], 10, "{summary}");
    assert!(
        summary["pool_warm_refilled_seconds"].as_f64().is_some(),
        "{summary}"
    );
    assert_eq!(summary["burst_runs"], 100, "{summary}");
    // Tasks: every one of the burst and of the series succeeded (counted
    // above), and each timeline part was seen for every task.
    assert_eq!(report["scenarios"]["tasks-10"]["count"], 10);
    assert_eq!(report["scenarios"]["task-python"]["count"], 5);
    for part in ["schedule", "start", "exit", "observe"] {
        let s = &report["scenarios"][format!("tasks-10-{part}")];
        assert_eq!(s["count"], 10, "tasks-10-{part}: {s}");
    }
    assert_eq!(summary["tasks_10_failed"], 0, "{summary}");
    assert!(
        summary["tasks_10_per_sec"]
            .as_f64()
            .is_some_and(|r| r > 0.0),
        "{summary}"
    );
    assert_eq!(
        summary["kube_subjectaccessreviews_10_tokens"], 10,
        "{summary}"
    );
    // nginx/HAProxy figures exist when those proxies are installed here.
    for (proxy, key) in [
        ("nginx", "nginx_added_p50_us"),
        ("haproxy", "haproxy_added_p50_us"),
    ] {
        let skipped = report["skipped"].get(proxy).is_some();
        assert!(
            skipped || !summary[key].is_null(),
            "{proxy}: neither measured nor skipped"
        );
    }
    let svg = std::fs::read_to_string(&svg).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("gateway-python"));

    // `--trace`: a line per open-loop request, as many per path as the
    // report counted, each with a send time, a latency and a status.
    let trace = std::fs::read_to_string(&trace).unwrap();
    let mut lines: std::collections::BTreeMap<&str, u64> = Default::default();
    for line in trace.lines() {
        let f: Vec<&str> = line.split('\t').collect();
        assert_eq!(f.len(), 4, "trace line {line:?}");
        assert!(
            f[1].parse::<f64>().is_ok_and(|t| t > 0.0),
            "send time in {line:?}"
        );
        assert!(f[2].parse::<u64>().is_ok(), "latency in {line:?}");
        assert!(
            f[3] == "error" || f[3].parse::<u16>().is_ok(),
            "status in {line:?}"
        );
        *lines.entry(f[0]).or_default() += 1;
    }
    let open: std::collections::BTreeMap<&str, u64> = report["scenarios"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(name, _)| name.starts_with("open-"))
        .map(|(name, s)| (name.as_str(), s["count"].as_u64().unwrap()))
        .collect();
    assert!(open.contains_key("open-gateway"), "{open:?}");
    assert_eq!(
        lines, open,
        "trace lines per path against the report's counts"
    );
}

/// `--only artifacts` at a small size (the smoke path of the 256 MiB
/// measurement): versitygw and a stack of its own, every upload and
/// download series of every repetition answered whole, each figure there.
#[test]
fn artifacts_alone_at_a_small_size_measure_every_path() {
    let krt = krt();
    let out_dir = tempfile::tempdir().unwrap();
    let json = out_dir.path().join("bench.json");
    let out = Command::new(env!("CARGO_BIN_EXE_kruntimes-bench"))
        .args(["--no-progress", "--only", "artifacts"])
        .args(["--artifact-mib", "8", "--artifact-reps", "2"])
        .arg("--krt")
        .arg(&krt)
        .arg("--json")
        .arg(&json)
        .output()
        .expect("run kruntimes-bench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "bench failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert!(report["skipped"].get("artifacts").is_none(), "{report}");
    assert_eq!(report["config"]["artifact_bytes"], 8 << 20);
    for scenario in [
        "artifact-export",
        "artifact-export-none",
        "artifact-put-object-store",
        "artifact-put-store-upload",
        "artifact-get-gateway",
        "artifact-get-runtimed",
        "artifact-get-s3",
    ] {
        let s = &report["scenarios"][scenario];
        assert_eq!(s["count"], 2, "{scenario}: {s}");
        assert_eq!(s["ok"], 2, "{scenario}: {s}");
    }
    let summary = &report["summary"];
    for key in [
        "artifact_export_mib_per_sec",
        "artifact_put_object_store_mib_per_sec",
        "artifact_put_store_upload_mib_per_sec",
        "artifact_get_gateway_mib_per_sec",
        "artifact_get_runtimed_mib_per_sec",
        "artifact_get_s3_mib_per_sec",
        "artifact_export_vs_object_store_ratio",
        "artifact_get_gateway_vs_s3_ratio",
        "artifact_get_gateway_vs_runtimed_ratio",
    ] {
        assert!(
            summary[key].as_f64().is_some_and(|v| v > 0.0),
            "summary.{key}: {summary}"
        );
    }
    for each in [
        "artifact_export_mib_per_sec_each",
        "artifact_get_gateway_mib_per_sec_each",
    ] {
        assert_eq!(summary[each].as_array().map(Vec::len), Some(2), "{summary}");
    }
    // The processes were sampled while the bytes streamed through them.
    for key in [
        "artifact_get_gateway_rss_samples",
        "artifact_get_runtimed_rss_samples",
        "artifact_export_runtimed_rss_samples",
    ] {
        assert!(
            summary[key].as_u64().is_some_and(|n| n >= 2),
            "summary.{key}: {summary}"
        );
    }
    assert!(
        summary["artifact_get_gateway_rss_base_mib"]
            .as_f64()
            .is_some_and(|m| m > 0.0)
    );
    let protocols = &report["config"]["artifact_get_protocols"];
    assert_eq!(protocols["gateway"], "HTTP/2.0", "{protocols}");
    assert_eq!(protocols["s3"], "HTTP/1.1", "{protocols}");
}

/// `--client-http1`: the sequential paths, gateway and direct, answered over
/// HTTP/1.1 clients without an error, and the report says which protocol.
#[test]
fn client_http1_runs_the_paths_over_http1_and_records_it() {
    let krt = krt();
    let out_dir = tempfile::tempdir().unwrap();
    let json = out_dir.path().join("bench.json");
    let out = Command::new(env!("CARGO_BIN_EXE_kruntimes-bench"))
        .args([
            "--quick",
            "--no-progress",
            "--no-baselines",
            "--client-http1",
        ])
        .args(["--only", "sequential", "--requests", "50", "--reps", "1"])
        .arg("--krt")
        .arg(&krt)
        .arg("--json")
        .arg(&json)
        .output()
        .expect("run kruntimes-bench");
    assert!(
        out.status.success(),
        "bench failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(report["config"]["client_protocol"], "http/1.1");
    for scenario in ["direct-python", "gateway-python", "gateway-bash"] {
        let s = &report["scenarios"][scenario];
        assert!(s["count"].as_u64().unwrap_or(0) > 0, "{scenario} ran: {s}");
        assert_eq!(s["count"], s["ok"], "{scenario} had errors: {s}");
    }
    // Only the selected group ran.
    assert!(report["scenarios"].get("open-gateway").is_none());
}
