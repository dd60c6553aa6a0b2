//! Records the git commit (and build date) this binary was built from, for
//! `krt version`; "unknown" outside a git checkout. Only this leaf crate
//! does it: a commit rebuilds nothing else.

use std::process::Command;

fn run(cmd: &str, args: &[&str]) -> String {
    Command::new(cmd)
        .args(args)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".to_owned())
}

fn main() {
    println!("cargo:rerun-if-changed=../.git/HEAD");
    println!("cargo:rerun-if-changed=../.git/refs/heads");
    let commit = run("git", &["rev-parse", "--short=12", "HEAD"]);
    println!("cargo:rustc-env=KRT_GIT_COMMIT={commit}");
    let date = run("date", &["-u", "+%Y-%m-%dT%H:%M:%SZ"]);
    println!("cargo:rustc-env=KRT_BUILD_DATE={date}");
}
