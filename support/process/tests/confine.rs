//! Confinement, checked in a child process (it cannot be undone): the test
//! binary runs itself with only the probe selected and reads its report.

use std::path::Path;
use std::process::Command;

use kruntimes_process::confine::{Confinement, confine, forbid_inspection};

const PROBE_ENV: &str = "KRUNTIMES_CONFINE_PROBE_DIR";

fn can_read(p: &Path) -> bool {
    std::fs::read(p).is_ok()
}

/// Runs only when the parent test asks for it: confines itself, then
/// reports what it can still reach.
#[test]
fn probe() {
    let Ok(dir) = std::env::var(PROBE_ENV) else {
        return;
    };
    let dir = Path::new(&dir);
    let allowed = dir.join("allowed");
    let c = Confinement::with_system(&[], std::slice::from_ref(&allowed));
    let confined = confine(&c).expect("confine");
    forbid_inspection().expect("forbid inspection");
    let report = [
        ("landlock", confined.landlock),
        ("secret", can_read(&dir.join("secret/key.pem"))),
        (
            "write-allowed",
            std::fs::write(allowed.join("out.txt"), b"x").is_ok(),
        ),
        (
            "write-outside",
            std::fs::write(dir.join("elsewhere.txt"), b"x").is_ok(),
        ),
        (
            "system",
            can_read(Path::new("/etc/hostname")) || can_read(Path::new("/usr/bin/env")),
        ),
        ("proc", can_read(Path::new("/proc/1/cmdline"))),
        (
            "capabilities",
            !caps::read(None, caps::CapSet::Effective)
                .expect("read capabilities")
                .is_empty()
                || !caps::read(None, caps::CapSet::Bounding)
                    .expect("read capabilities")
                    .is_empty(),
        ),
        ("dumpable", nix::sys::prctl::get_dumpable().unwrap_or(true)),
    ];
    for (what, yes) in report {
        println!("PROBE {what}={yes}");
    }
}

#[test]
fn a_confined_process_reaches_only_its_work_root_and_the_system() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("allowed")).unwrap();
    std::fs::create_dir_all(dir.path().join("secret")).unwrap();
    std::fs::write(dir.path().join("secret/key.pem"), b"-----KEY-----").unwrap();
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "probe", "--nocapture", "--test-threads=1"])
        .env(PROBE_ENV, dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "probe failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let get = |what: &str| {
        stdout
            .lines()
            .find_map(|l| {
                let (_, rest) = l.split_once(&format!("PROBE {what}="))?;
                rest.split_whitespace().next()
            })
            .unwrap_or_else(|| panic!("probe did not report {what}:\n{stdout}"))
            .to_owned()
    };
    assert_eq!(get("landlock"), "true", "this kernel supports Landlock");
    assert_eq!(get("secret"), "false", "a file outside the allowlist");
    assert_eq!(get("write-allowed"), "true");
    assert_eq!(get("write-outside"), "false");
    assert_eq!(get("system"), "true");
    assert_eq!(get("proc"), "false", "other processes are out of reach");
    assert_eq!(get("capabilities"), "false", "no capability is left");
    assert_eq!(get("dumpable"), "false");
    assert!(dir.path().join("allowed/out.txt").exists());
    assert!(!dir.path().join("elsewhere.txt").exists());
}
