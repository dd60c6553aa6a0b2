//! The untrusted side links nothing of the cluster side: no Kubernetes
//! client or types, no CRD crate, no HTTP framework, no metrics registry —
//! read off the dependency graph cargo resolves for this crate alone.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::process::Command;

/// Crates the Runtime Server must never link.
const FORBIDDEN: &[&str] = &[
    "kube",
    "kube-client",
    "kube-core",
    "kube-runtime",
    "k8s-openapi",
    "schemars",
    "axum",
    "axum-core",
    "prometheus",
    "jsonwebtoken",
    "kruntimes-api",
    "kruntimes-support",
    "kruntimes-operator",
    "kruntimes-runtimed",
    "kruntimes-gateway",
    "kruntimes-certs",
];

#[test]
fn the_runtime_server_links_no_kube_crd_or_http_framework_crate() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "tree",
            "-p",
            "kruntimes-runtime-server",
            "-e",
            "normal",
            "--prefix",
            "none",
            "--format",
            "{p}",
        ])
        .current_dir(kruntimes_testkit::package_dir())
        .output()
        .expect("run cargo tree");
    assert!(
        out.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let crates: BTreeSet<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .collect();
    // The graph was read: what the server does link is there.
    for needed in [
        "kruntimes-runtime-server",
        "kruntimes-proto",
        "kruntimes-process",
        "tonic",
    ] {
        assert!(crates.contains(needed), "{needed} missing from {crates:?}");
    }
    let linked: Vec<&&str> = FORBIDDEN.iter().filter(|c| crates.contains(**c)).collect();
    assert!(
        linked.is_empty(),
        "kruntimes-runtime-server links {linked:?}: the untrusted side needs none of it"
    );
}
