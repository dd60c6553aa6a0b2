//! The shim with real processes: whatever a user process starts —
//! background jobs, double forks, `setsid` sessions — is gone when the
//! process exits, when the server lets go of it, or after SIGTERM and its
//! grace period. Verified by PID.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use kruntimes_runtime_server::contain::{Contained, Launch, Shim, tree};
use kruntimes_testkit::{read_pids, wait_gone};

/// Starts five processes that try to outlive the script in every way, each
/// writing its pid to `pids`, then the script's own pid, then `rest`.
fn escaping_tree(rest: &str) -> String {
    format!(
        "sleep 300 & echo $! >> pids; \
         setsid bash -c 'sleep 301 & echo $! >> pids; exec sleep 302' & echo $! >> pids; \
         (sleep 303 & echo $! >> pids); \
         (setsid sleep 304 & echo $! >> pids) ; \
         until [ \"$(wc -l < pids)\" -ge 5 ]; do sleep 0.01; done; \
         echo $$ >> pids; {rest}"
    )
}

fn spawn(dir: &Path, script: &str, grace: Duration) -> Contained {
    let shim = Shim::new(env!("CARGO_BIN_EXE_runtime-server"), &[]);
    let env = BTreeMap::from([("PATH".to_owned(), std::env::var("PATH").unwrap())]);
    shim.spawn(Launch {
        argv: &["bash".into(), "-c".into(), script.into()],
        cwd: dir,
        env: &env,
        grace,
        stdio: [Stdio::null(), Stdio::null(), Stdio::inherit()],
        pass: None,
    })
    .unwrap()
}

const WITHIN: Duration = Duration::from_secs(20);

#[tokio::test]
async fn when_the_process_exits_everything_it_started_is_killed() {
    let dir = tempfile::tempdir().unwrap();
    let mut tree = spawn(dir.path(), &escaping_tree("exit 3"), Duration::ZERO);
    let status = tree.wait().await.unwrap();
    assert_eq!(
        status.code(),
        Some(3),
        "the child's exit code passes through"
    );
    let pids = read_pids(&dir.path().join("pids"), 6, WITHIN)
        .await
        .unwrap();
    assert_eq!(wait_gone(&pids, WITHIN).await, Vec::<i32>::new());
}

#[tokio::test]
async fn when_the_server_lets_go_the_whole_tree_is_killed() {
    let dir = tempfile::tempdir().unwrap();
    let tree = spawn(dir.path(), &escaping_tree("sleep 305"), Duration::ZERO);
    let pids = read_pids(&dir.path().join("pids"), 6, WITHIN)
        .await
        .unwrap();
    let shim = tree.id().unwrap() as i32;
    drop(tree);
    let mut all = pids.clone();
    all.push(shim);
    assert_eq!(wait_gone(&all, WITHIN).await, Vec::<i32>::new());
}

#[tokio::test]
async fn sigterm_gives_the_tree_its_grace_then_kills_what_ignores_it() {
    let dir = tempfile::tempdir().unwrap();
    let script = escaping_tree(
        "trap 'echo term >> got; exit 0' TERM; \
         bash -c 'trap \"\" TERM; echo $$ >> pids; sleep 306' & \
         sleep 307 & wait",
    );
    let mut tree = spawn(dir.path(), &script, Duration::from_millis(300));
    let pids = read_pids(&dir.path().join("pids"), 7, WITHIN)
        .await
        .unwrap();
    tree.terminate();
    let status = tree.wait().await.unwrap();
    assert_eq!(status.code(), Some(0), "the script handled SIGTERM");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("got")).unwrap(),
        "term\n"
    );
    assert_eq!(wait_gone(&pids, WITHIN).await, Vec::<i32>::new());
}

#[tokio::test]
async fn a_signal_death_is_reported_as_128_plus_the_signal() {
    let dir = tempfile::tempdir().unwrap();
    let mut tree = spawn(dir.path(), "kill -KILL $$", Duration::ZERO);
    assert_eq!(tree.wait().await.unwrap().code(), Some(137));
    let mut missing = spawn(dir.path(), "exec /no/such/program", Duration::ZERO);
    assert_eq!(missing.wait().await.unwrap().code(), Some(127));
}

#[tokio::test]
async fn only_stdio_is_inherited_by_the_user_process() {
    let dir = tempfile::tempdir().unwrap();
    let mut tree = spawn(
        dir.path(),
        "exec python3 -c \"import os; open('fds', 'w').write(' '.join(os.listdir('/proc/self/fd')))\"",
        Duration::ZERO,
    );
    tree.wait().await.unwrap();
    let fds = std::fs::read_to_string(dir.path().join("fds")).unwrap();
    // 0-2, plus the two Python has open itself (the directory it lists and
    // the file it writes): anything else would have leaked from the server.
    let extra: Vec<i32> = fds
        .split_whitespace()
        .filter_map(|f| f.parse().ok())
        .filter(|f| *f > 4)
        .collect();
    assert!(extra.is_empty(), "inherited descriptors: {fds}");
}

/// The wake-ups of every thread of process `pid`.
fn wake_ups(pid: i32) -> u64 {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
        .map(|t| kruntimes_testkit::wake_ups(&t.path()))
        .sum()
}

/// The children of `pid` that exited and were not reaped.
fn zombie_children(pid: i32) -> Vec<i32> {
    tree::snapshot()
        .into_iter()
        .filter(|p| p.ppid == pid && p.dead)
        .map(|p| p.pid)
        .collect()
}

#[tokio::test]
async fn an_idle_shim_sleeps_until_its_tree_does_something() {
    let dir = tempfile::tempdir().unwrap();
    let tree = spawn(
        dir.path(),
        "echo $$ >> pids; exec sleep 300",
        Duration::ZERO,
    );
    read_pids(&dir.path().join("pids"), 1, WITHIN)
        .await
        .unwrap();
    let shim = tree.id().unwrap() as i32;
    // Past the shim's start-up (its runtime, the child's spawn).
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = wake_ups(shim);
    // A reaper on a timer (it read the whole process table every second)
    // would have woken at least twice.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(wake_ups(shim), before, "the shim woke up at rest");
}

#[tokio::test]
async fn orphans_that_exit_are_reaped_and_the_childs_status_still_passes_through() {
    let dir = tempfile::tempdir().unwrap();
    // Three orphans re-parented to the shim, which exit while the child
    // runs, then three more racing the child's own exit.
    let script = "for i in 1 2 3; do (sleep 0.05 & echo $! >> pids); done; \
                  echo $$ >> pids; \
                  until [ -e go ]; do sleep 0.01; done; \
                  for i in 1 2 3; do (sleep 0.01 &); done; exit 7";
    let mut tree = spawn(dir.path(), script, Duration::ZERO);
    let shim = tree.id().unwrap() as i32;
    let pids = read_pids(&dir.path().join("pids"), 4, WITHIN)
        .await
        .unwrap();
    let orphans = &pids[..3];
    let deadline = std::time::Instant::now() + WITHIN;
    loop {
        let zombies = zombie_children(shim);
        let gone = orphans
            .iter()
            .all(|p| !std::path::Path::new(&format!("/proc/{p}")).exists());
        if gone && zombies.is_empty() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "orphans {orphans:?} not reaped: zombies {zombies:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    std::fs::write(dir.path().join("go"), "").unwrap();
    assert_eq!(tree.wait().await.unwrap().code(), Some(7));
}
