//! docs/architecture.md's crate map against `cargo metadata`: every
//! workspace crate has a row in the table, and every crate's (normal and
//! build) dependencies on workspace crates are listed below it — the rule
//! the page states. `krt`, the bench and the test kits may use anything.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};

/// May use any crate of the workspace.
const ANYTHING: &[&str] = &[
    "krt",
    "kruntimes-bench",
    "kruntimes-testkit",
    "kruntimes-kubetest",
];

/// The crates of the table's rows, top to bottom.
fn table_order(page: &str) -> Vec<String> {
    let table = page
        .split("| Folder | Crate | Responsible for |")
        .nth(1)
        .expect("the crate table");
    let mut order = Vec::new();
    for line in table.lines().skip(2) {
        if !line.starts_with('|') {
            break;
        }
        let crate_cell = line.split('|').nth(2).unwrap_or_default().trim();
        if crate_cell == "test support" {
            order.extend([
                "kruntimes-testkit".to_owned(),
                "kruntimes-kubetest".to_owned(),
            ]);
        } else {
            order.push(crate_cell.trim_matches('`').to_owned());
        }
    }
    order
}

/// Each workspace crate's normal and build dependencies on workspace crates.
fn workspace_dependencies() -> BTreeMap<String, BTreeSet<String>> {
    let out = std::process::Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(kruntimes_testkit::package_dir())
        .output()
        .expect("run cargo metadata");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let packages = meta["packages"].as_array().unwrap();
    let names: BTreeSet<String> = packages
        .iter()
        .map(|p| p["name"].as_str().unwrap().to_owned())
        .collect();
    packages
        .iter()
        .map(|p| {
            let deps = p["dependencies"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|d| d["kind"].as_str() != Some("dev"))
                .map(|d| d["name"].as_str().unwrap().to_owned())
                .filter(|d| names.contains(d))
                .collect();
            (p["name"].as_str().unwrap().to_owned(), deps)
        })
        .collect()
}

#[test]
fn the_crate_map_lists_every_crate_and_dependencies_point_down_it() {
    let page = std::fs::read_to_string(kruntimes_testkit::checkout().join("docs/architecture.md"))
        .unwrap();
    let order = table_order(&page);
    let deps = workspace_dependencies();
    let listed: BTreeSet<&String> = order.iter().collect();
    let missing: Vec<&String> = deps.keys().filter(|c| !listed.contains(c)).collect();
    assert!(
        missing.is_empty(),
        "crates without a row in docs/architecture.md: {missing:?}"
    );
    let stale: Vec<&String> = order.iter().filter(|c| !deps.contains_key(*c)).collect();
    assert!(
        stale.is_empty(),
        "rows naming no workspace crate: {stale:?}"
    );
    let position = |c: &str| order.iter().position(|o| o == c).unwrap();
    let mut upward = Vec::new();
    for (krate, uses) in &deps {
        if ANYTHING.contains(&krate.as_str()) {
            continue;
        }
        for dep in uses {
            if position(dep) <= position(krate) {
                upward.push(format!("{krate} -> {dep}"));
            }
        }
    }
    assert!(
        upward.is_empty(),
        "dependencies on crates listed above (or beside) their user: {upward:?}"
    );
}

#[test]
fn the_table_is_read_row_by_row() {
    let page = "x\n| Folder | Crate | Responsible for |\n| --- | --- | --- |\n| `a/` | `a` | A. |\n| `t/` | test support | T. |\n\nafter\n";
    assert_eq!(
        table_order(page),
        ["a", "kruntimes-testkit", "kruntimes-kubetest"]
    );
}
