//! The `krt` verbs as a user runs them, against a live `krt up` and against
//! a real API server with the operator, the gateway and runtimed Pods
//! (kubetest's harness): apply, runs, get, wait, invoke (with typed errors
//! and their exit codes), session create/exec/cp/ls/close, runtime list,
//! logs, delete, version; kubeconfig tokens and an exec credential plugin.

// Test helpers panic on failure: that is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Output;

use kruntimes_kubetest::cluster::Cluster;
use kruntimes_kubetest::{ApiServer, Subject, User};
use serde_json::Value;

use kruntimes_testkit::prelude::PY;

const KRT: &str = env!("CARGO_BIN_EXE_krt");

fn text(o: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn ok(o: Output) -> String {
    assert!(o.status.success(), "{}", text(&o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn fails_with(o: Output, code: i32, needle: &str) {
    assert_eq!(o.status.code(), Some(code), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(needle),
        "stderr lacks {needle:?}:\n{}",
        text(&o)
    );
}

fn manifest(dir: &Path, name: &str, namespace: &str) -> PathBuf {
    let indented: String = PY.lines().map(|l| format!("      {l}\n")).collect();
    let yaml = format!(
        "apiVersion: kruntimes.io/v1alpha1\nkind: Run\nmetadata:\n  name: {name}\n  namespace: {namespace}\nspec:\n  runtime: python\n  source:\n    inlinePath: main.py\n    inline: |\n{indented}  mode:\n    function:\n      handler: main.invoke\n      invocationTimeoutSeconds: 2\n"
    );
    let path = dir.join(format!("{name}.yaml"));
    std::fs::write(&path, yaml).unwrap();
    path
}

/// `krt` with `args` after the target flags `base`.
fn krt(base: &[&str], args: &[&str]) -> Output {
    std::process::Command::new(KRT)
        .args(base)
        .args(args)
        .output()
        .unwrap()
}

/// The verbs every mode shares, on Run `name` of `ns`.
fn function_verbs(base: &[&str], dir: &Path, name: &str, ns: &str) {
    let file = manifest(dir, name, ns);
    let applied = ok(krt(
        base,
        &["-n", ns, "apply", "-f", file.to_str().unwrap()],
    ));
    assert!(
        applied.contains(&format!("run.kruntimes.io/{name}")),
        "{applied}"
    );
    let wait = |phase: &str, timeout: &str| {
        krt(
            base,
            &[
                "-n",
                ns,
                "wait",
                "run",
                name,
                "--for",
                phase,
                "--timeout",
                timeout,
            ],
        )
    };
    let waited = ok(wait("Ready", "60s"));
    assert!(waited.contains("Ready"), "{waited}");
    // A wait that runs out says what it saw last, and why.
    fails_with(
        wait("Succeeded", "1s"),
        1,
        "within 1s (phase Ready, Registered",
    );
    let runs = ok(krt(base, &["-n", ns, "runs", "-o", "json"]));
    let runs: Vec<Value> = serde_json::from_str(&runs).unwrap();
    let me = runs.iter().find(|r| r["name"] == name).expect("listed");
    assert_eq!(me["phase"], "Ready");
    assert_eq!(me["mode"], "function");
    let got = ok(krt(base, &["-n", ns, "get", "run", name, "-o", "yaml"]));
    assert!(got.contains(&format!("name: {name}")), "{got}");

    // The gateway may still be converging right after Ready.
    let mut out = krt(
        base,
        &["-n", ns, "invoke", name, "--data", r#"{"name": "cli"}"#],
    );
    for _ in 0..50 {
        if out.status.success() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
        out = krt(
            base,
            &["-n", ns, "invoke", name, "--data", r#"{"name": "cli"}"#],
        );
    }
    let body: Value = serde_json::from_str(&ok(out)).unwrap();
    assert_eq!(body["message"], "hello cli");

    // Typed errors: code, message, invocation id, one exit code per code.
    fails_with(
        krt(
            base,
            &[
                "-n",
                ns,
                "invoke",
                name,
                "--data",
                r#"{"raise": 7}"#,
                "--invocation-id",
                "inv-raise",
            ],
        ),
        26,
        // The line docs/cli.md shows.
        "error: 500 FunctionError: ValueError: bad 7 (invocation inv-raise)",
    );
    fails_with(
        krt(base, &["-n", ns, "invoke", name, "--data", "not json"]),
        11,
        "400 InvalidJson",
    );
    fails_with(
        krt(
            base,
            &["-n", ns, "invoke", name, "--data", r#"{"sleep": 5}"#],
        ),
        29,
        "504 DeadlineExceeded",
    );
    fails_with(
        krt(base, &["-n", ns, "invoke", "no-such-run"]),
        1,
        "not found",
    );
    fails_with(
        krt(
            &[base, &["--token", "made-up"]].concat(),
            &["-n", ns, "invoke", name],
        ),
        15,
        "401 Unauthenticated",
    );

    let rts = ok(krt(base, &["runtime", "list", "-o", "json"]));
    let rts: Vec<Value> = serde_json::from_str(&rts).unwrap();
    assert!(
        rts.iter().any(|r| r["runsInUse"].as_u64() >= Some(1)),
        "{rts:?}"
    );
}

/// `krt logs` on `krt up`: the owner's lines about the Run, and only those —
/// runtimed's and its Runtime Server's, and the handler's own prints,
/// labelled stdout — as JSON with `-o json` and for people by default.
fn logs_verb(base: &[&str], name: &str, ns: &str) {
    let (info, _) = run_json(base, name, ns);
    let uid = info["uid"].as_str().unwrap().to_owned();
    ok(krt(
        base,
        &[
            "-n",
            ns,
            "invoke",
            name,
            "--data",
            r#"{"print": "printed-line"}"#,
        ],
    ));
    let raw = ok(krt(base, &["-n", ns, "logs", name, "-o", "json"]));
    assert!(raw.lines().count() >= 1, "no line about {uid}");
    assert!(raw.lines().all(|l| l.contains(&uid)), "{raw}");
    for process in ["kruntimes_runtimed", "kruntimes_runtime_server"] {
        assert!(raw.contains(process), "no line of {process}: {raw}");
    }
    let text = ok(krt(base, &["-n", ns, "logs", name]));
    assert_eq!(text.lines().count(), raw.lines().count(), "{text}");
    assert!(
        text.lines().any(|l| l.contains(" runtimed INFO ")) && !text.contains("Some("),
        "{text}"
    );
    assert!(
        text.lines().any(|l| l.ends_with(" stdout printed-line")),
        "{text}"
    );
    assert!(!text.contains("stderr printed-line"), "{text}");
}

fn run_json(base: &[&str], name: &str, ns: &str) -> (Value, Value) {
    let all: Vec<Value> =
        serde_json::from_str(&ok(krt(base, &["-n", ns, "runs", "-o", "json"]))).unwrap();
    let me = all.into_iter().find(|r| r["name"] == name).expect("listed");
    let raw: Value = serde_json::from_str(&ok(krt(
        base,
        &["-n", ns, "get", "run", name, "-o", "json"],
    )))
    .unwrap();
    (me, raw)
}

fn session_verbs(base: &[&str], dir: &Path, ns: &str) {
    let url = ok(krt(
        base,
        &[
            "-n",
            ns,
            "session",
            "create",
            "cli-box",
            "--env",
            "GREETING=hi",
        ],
    ));
    assert!(url.trim().contains("/sessions/"), "{url}");
    let out = krt(
        base,
        &[
            "-n",
            ns,
            "session",
            "exec",
            "cli-box",
            "--shell",
            "echo $GREETING; exit 3",
        ],
    );
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hi\n");
    let local = dir.join("up.txt");
    std::fs::write(&local, b"payload").unwrap();
    ok(krt(
        base,
        &[
            "-n",
            ns,
            "session",
            "cp",
            local.to_str().unwrap(),
            "cli-box:up.txt",
        ],
    ));
    let listing = ok(krt(base, &["-n", ns, "session", "ls", "cli-box"]));
    assert!(listing.contains("up.txt"), "{listing}");
    let back = dir.join("down.txt");
    ok(krt(
        base,
        &[
            "-n",
            ns,
            "session",
            "cp",
            "cli-box:up.txt",
            back.to_str().unwrap(),
        ],
    ));
    assert_eq!(std::fs::read(&back).unwrap(), b"payload");
    // A file over the 32 MiB a session takes is refused before it is sent,
    // in the limit's own words.
    let big = dir.join("big.bin");
    std::fs::File::create(&big)
        .unwrap()
        .set_len(40 * 1024 * 1024)
        .unwrap();
    fails_with(
        krt(
            base,
            &[
                "-n",
                ns,
                "session",
                "cp",
                big.to_str().unwrap(),
                "cli-box:big.bin",
            ],
        ),
        1,
        "is 41943040 bytes: a session file is at most 32 MiB (33554432 bytes)",
    );
    let closed = ok(krt(base, &["-n", ns, "session", "close", "cli-box"]));
    assert!(closed.contains("Succeeded"), "{closed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_verb_works_against_krt_up() {
    let stack = kruntimes_testkit::fixtures::start(2, vec![], &[]);
    let state = stack.state_dir().display().to_string();
    let dir = tempfile::tempdir().unwrap();
    let dir_path = dir.path().to_owned();
    let (runs_dir, own_dir) = (stack.runs_dir(), stack.state_dir().join("runs"));
    tokio::task::spawn_blocking(move || {
        let base_ref = ["--state-dir", state.as_str()];
        function_verbs(&base_ref, &dir_path, "cli-fn", "default");
        logs_verb(&base_ref, "cli-fn", "default");
        session_verbs(&base_ref, &dir_path, "default");
        // A sandbox made by the CLI is kept where the SDKs keep theirs, so
        // either may close it — in the state directory: the user's own
        // runs directory gets nothing written into it.
        assert!(
            own_dir.join("session-default-cli-box.yaml").exists(),
            "{:?}",
            std::fs::read_dir(&own_dir).unwrap().collect::<Vec<_>>()
        );
        assert_eq!(
            std::fs::read_dir(&runs_dir).unwrap().count(),
            0,
            "krt wrote into the user's runs directory"
        );
        // Delete waits until the Run is gone (as kubectl does): the next
        // read, or an apply of the same name, never meets the old Run.
        ok(krt(&base_ref, &["delete", "run", "cli-fn"]));
        fails_with(krt(&base_ref, &["get", "run", "cli-fn"]), 1, "not found");
        // Deleting a Run that does not exist says so.
        fails_with(
            krt(&base_ref, &["delete", "run", "no-such-run"]),
            1,
            "run default/no-such-run not found",
        );
        let v = ok(krt(&base_ref, &["version"]));
        assert!(
            v.starts_with("krt ") && v.contains("commit") && v.contains("gateway "),
            "{v}"
        );
        // The gateway krt up runs is this build: the same commit.
        let commit = |after: &str| {
            v.split(after)
                .nth(1)
                .and_then(|r| r.split("(commit ").nth(1))
                .map(|c| c.split([',', ')']).next().unwrap_or_default().to_owned())
        };
        assert_eq!(commit("krt "), commit("gateway "), "{v}");
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_verb_works_against_a_cluster_with_the_callers_kubeconfig() {
    let server = ApiServer::start().await.expect("start the test API server");
    let cluster = Cluster::start(Path::new(KRT), &server)
        .await
        .expect("start the installation");
    server.create_namespace("a").await.unwrap();
    let rbac = kruntimes_testkit::checkout().join("examples/rbac");
    for role in [
        "run-invoker-role.yaml",
        "run-reader-role.yaml",
        "session-user-role.yaml",
    ] {
        server
            .apply_role_file(Some("a"), &rbac.join(role))
            .await
            .unwrap();
    }
    server
        .bind(Some("a"), "bob", "run-reader", Subject::User(User::Bob))
        .await
        .unwrap();
    cluster.create_runtime("python", 1, 4).await.unwrap();
    cluster.add_pod("python-0", "python").await.unwrap();
    cluster.create_runtime("bash", 1, 1).await.unwrap();
    cluster.add_pod("bash-0", "bash").await.unwrap();

    let admin = server.write_kubeconfig(User::Admin).unwrap();
    let bob = server.write_kubeconfig(User::Bob).unwrap();
    // The same admin identity, its token printed by an exec credential plugin.
    let dir = tempfile::tempdir().unwrap();
    let plugin = dir.path().join("credential.sh");
    std::fs::write(
        &plugin,
        "#!/bin/sh\nprintf '{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\",\"status\":{\"token\":\"%s\"}}' \"$KRT_TEST_TOKEN\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&plugin, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let exec_kc = dir.path().join("exec.kubeconfig");
    let yaml = server.kubeconfig_yaml(User::Admin).replace(
        &format!("    token: {}\n", server.token(User::Admin)),
        &format!(
            "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: {}\n      env:\n      - name: KRT_TEST_TOKEN\n        value: {}\n      interactiveMode: Never\n",
            plugin.display(),
            server.token(User::Admin)
        ),
    );
    std::fs::write(&exec_kc, yaml).unwrap();

    let (admin, bob, exec_kc, dir_path) = (admin, bob, exec_kc, dir.path().to_owned());
    tokio::task::spawn_blocking(move || {
        let base = ["--kubeconfig", admin.to_str().unwrap()];
        function_verbs(&base, &dir_path, "cli-fn", "a");
        session_verbs(&base, &dir_path, "a");
        // Bob may read Runs but not invoke them.
        let bob_base = ["--kubeconfig", bob.to_str().unwrap()];
        ok(krt(&bob_base, &["-n", "a", "get", "run", "cli-fn"]));
        fails_with(
            krt(&bob_base, &["-n", "a", "invoke", "cli-fn"]),
            16,
            "403 Forbidden",
        );
        // An exec credential plugin supplies the token.
        let exec_base = ["--kubeconfig", exec_kc.to_str().unwrap()];
        let out = ok(krt(
            &exec_base,
            &[
                "-n",
                "a",
                "invoke",
                "cli-fn",
                "--data",
                r#"{"name": "exec"}"#,
            ],
        ));
        assert!(out.contains("hello exec"), "{out}");
        let rt = ok(krt(&base, &["runtime", "get", "python", "-o", "json"]));
        let rt: Value = serde_json::from_str(&rt).unwrap();
        assert_eq!(rt["readyReplicas"], 1);
        ok(krt(
            &base,
            &["-n", "a", "delete", "run", "cli-fn", "--wait", "30s"],
        ));
        let v = ok(krt(&base, &["version"]));
        assert!(v.contains("kubernetes v1."), "{v}");
    })
    .await
    .unwrap();
    drop(cluster);
}

/// A loopback address held by the returned listener: taken while it lives.
fn taken_address() -> (std::net::TcpListener, String) {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    (taken, addr)
}

/// A gateway whose metrics address is taken fails at start, naming it,
/// instead of serving without metrics; it binds that listener before it
/// reads any other file.
#[test]
fn a_gateway_whose_metrics_address_is_taken_fails_at_start() {
    let (_taken, addr) = taken_address();
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.pem");
    let missing = missing.to_str().unwrap();
    let out = krt(
        &[],
        &[
            "gateway",
            "--http-listen",
            "127.0.0.1:0",
            "--metrics-listen",
            &addr,
            "--control-plane",
            "https://127.0.0.1:9",
            "--internal-ca",
            missing,
            "--client-cert",
            missing,
            "--client-key",
            missing,
            "--auth",
            "none",
        ],
    );
    fails_with(out, 1, &format!("cannot listen for metrics on {addr}"));
}

/// `krt up` whose gateway cannot start says so at once, with the gateway's
/// own reason from its log, instead of waiting for a readiness that cannot
/// come.
#[test]
fn krt_up_reports_a_gateway_that_cannot_start_in_its_own_words() {
    let (_taken, addr) = taken_address();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let out = krt(
        &["--state-dir", state.to_str().unwrap()],
        &["up", "--gateway-addr", &addr],
    );
    fails_with(out.clone(), 1, "the gateway exited during start-up");
    fails_with(out, 1, &format!("cannot listen for https on {addr}"));
}

/// `krt runtimed` as `krt up` starts it (TLS files, a Runtime Server
/// socket at `socket`), listening on `listen`, its stderr in `stderr`.
fn runtimed_command(
    dir: &Path,
    listen: &str,
    socket: &Path,
    stderr: &Path,
) -> std::process::Command {
    let ca = kruntimes_certs::Ca::generate("internal", 1).unwrap();
    let leaf = ca
        .issue(&kruntimes_certs::LeafSpec::server(
            "runtimed.kruntimes.internal",
            1,
        ))
        .unwrap();
    let file = |name: &str, data: &str| {
        let p = dir.join(name);
        std::fs::write(&p, data).unwrap();
        p
    };
    let mut cmd = std::process::Command::new(KRT);
    cmd.args(["runtimed", "--exit-with-parent"])
        .env("KRUNTIMES_RUNTIMED_NAME", "runtimed-0")
        .env("KRUNTIMES_RUNTIMED_LISTEN", listen)
        .env(
            "KRUNTIMES_RUNTIMED_TLS_CERT",
            file("tls.crt", &leaf.cert_pem),
        )
        .env("KRUNTIMES_RUNTIMED_TLS_KEY", file("tls.key", &leaf.key_pem))
        .env("KRUNTIMES_RUNTIMED_CLIENT_CA", file("ca.crt", &ca.cert_pem))
        .env("KRUNTIMES_RUNTIMED_RUNTIME_SERVER", socket)
        .env_remove("LISTEN_FDS")
        .env_remove("LISTEN_PID")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(stderr).unwrap());
    cmd
}

/// Hands `fd` to `cmd` as systemd's socket activation does (descriptor 3,
/// `LISTEN_FDS=1`), as `krt up` hands runtimed its port.
fn hand_over(cmd: &mut std::process::Command, fd: std::os::fd::OwnedFd) {
    use command_fds::{CommandFdExt as _, FdMapping};
    cmd.fd_mappings(vec![FdMapping {
        parent_fd: fd,
        child_fd: 3,
    }])
    .unwrap()
    .env("LISTEN_FDS", "1");
}

/// Waits until `child` exits (at most a minute) and returns its stderr.
fn stderr_at_exit(child: &mut std::process::Child, stderr: &Path) -> String {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!(
                "still running:\n{}",
                std::fs::read_to_string(stderr).unwrap_or_default()
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    std::fs::read_to_string(stderr).unwrap()
}

/// runtimed outside Kubernetes binds its port before it waits for its
/// Runtime Server: the port `krt up` picked for it is held from the start,
/// not left free while the server comes up (another process could take it).
#[test]
fn runtimed_holds_its_port_before_its_runtime_server_answers() {
    let dir = tempfile::tempdir().unwrap();
    // A Runtime Server that takes the connection and never answers.
    let socket = dir.path().join("runtime.sock");
    let server = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    server.set_nonblocking(true).unwrap();
    let addr = format!("127.0.0.1:{}", kruntimes_testkit::free_port());
    let stderr = dir.path().join("stderr.log");
    let mut runtimed = runtimed_command(dir.path(), &addr, &socket, &stderr)
        .spawn()
        .unwrap();
    // runtimed is waiting for its server now: its port already accepts.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let _waiting = loop {
        match server.accept() {
            Ok((conn, _)) => break conn,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                assert!(
                    runtimed.try_wait().unwrap().is_none(),
                    "runtimed exited:\n{}",
                    std::fs::read_to_string(&stderr).unwrap_or_default()
                );
                assert!(
                    std::time::Instant::now() < deadline,
                    "runtimed never dialled its server"
                );
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            Err(e) => panic!("accept: {e}"),
        }
    };
    let held = std::net::TcpStream::connect(&addr);
    let _ = runtimed.kill();
    let _ = runtimed.wait();
    assert!(
        held.is_ok(),
        "runtimed had not bound {addr} while it waited for its Runtime Server: {held:?}"
    );
}

/// `krt up` binds runtimed's port itself and hands the listener over
/// (systemd's socket activation): runtimed serves on that very socket, so
/// the port is never free between krt's pick and runtimed's start.
#[test]
fn runtimed_serves_on_the_listener_it_is_handed() {
    let dir = tempfile::tempdir().unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    // No Runtime Server: runtimed waits for it (10 s), then serves anyway.
    let socket = dir.path().join("absent.sock");
    let stderr = dir.path().join("stderr.log");
    // Port 0: whatever the handed-over listener is bound to.
    let mut cmd = runtimed_command(dir.path(), "127.0.0.1:0", &socket, &stderr);
    hand_over(&mut cmd, listener.into());
    let mut runtimed = cmd.spawn().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let serving = loop {
        let log = std::fs::read_to_string(&stderr).unwrap_or_default();
        if let Some(line) = log.lines().find(|l| l.contains("runtimed serving")) {
            break line.to_owned();
        }
        assert!(
            runtimed.try_wait().unwrap().is_none(),
            "runtimed exited:\n{log}"
        );
        assert!(std::time::Instant::now() < deadline, "never served:\n{log}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let _ = runtimed.kill();
    let _ = runtimed.wait();
    assert!(
        serving.contains(&format!("127.0.0.1:{port}")),
        "runtimed serves elsewhere than on the listener it was handed ({port}): {serving}"
    );
}

/// What runtimed is handed must be the listener `--listen` names, a
/// listening socket, and not in Kubernetes mode: each mistake is a clear
/// error at start, never a runtimed serving somewhere else.
#[test]
fn runtimed_refuses_a_listener_it_cannot_serve_on() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("absent.sock");
    let stderr = dir.path().join("stderr.log");
    let run = |listen: &str, fd: std::os::fd::OwnedFd, extra: &[&str]| {
        let mut cmd = runtimed_command(dir.path(), listen, &socket, &stderr);
        cmd.args(extra);
        hand_over(&mut cmd, fd);
        let mut child = cmd.spawn().unwrap();
        let text = stderr_at_exit(&mut child, &stderr);
        assert!(!child.wait().unwrap().success(), "{text}");
        text
    };

    // Bound elsewhere than --listen says.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let bound = listener.local_addr().unwrap();
    let other = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let wanted = other.local_addr().unwrap();
    let text = run(&wanted.to_string(), listener.into(), &[]);
    assert!(
        text.contains(&format!(
            "the listener handed over (LISTEN_FDS) is bound to {bound}, not --listen {wanted}"
        )),
        "{text}"
    );

    // Not a TCP socket; a TCP socket that is not listening.
    let idle = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let text = run("127.0.0.1:0", idle.into(), &[]);
    assert!(text.contains("is not a TCP socket"), "{text}");
    let peer = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let connected = std::net::TcpStream::connect(peer.local_addr().unwrap()).unwrap();
    let text = run("127.0.0.1:0", connected.into(), &[]);
    assert!(
        text.contains("the socket handed over (LISTEN_FDS) is not listening"),
        "{text}"
    );

    // Kubernetes mode opens its port only once it can take Runs.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let listen = listener.local_addr().unwrap().to_string();
    let text = run(
        &listen,
        listener.into(),
        &["--kubernetes", "--pod-uid", "u", "--pod-namespace", "ns"],
    );
    assert!(
        text.contains("it takes no listener handed over (LISTEN_FDS)"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_on_krt_up_refuses_what_krt_up_would_not_run_and_says_what_it_replaces() {
    let stack = kruntimes_testkit::fixtures::start(1, vec![], &[]);
    let state = stack.state_dir().display().to_string();
    // Where krt apply writes (the user's --runs directory stays as it is).
    let runs_dir = stack.state_dir().join("runs");
    let dir = tempfile::tempdir().unwrap();
    let dir_path = dir.path().to_owned();
    tokio::task::spawn_blocking(move || {
        let base = ["--state-dir", state.as_str()];
        let write = |name: &str, text: &str| {
            let p = dir_path.join(name);
            std::fs::write(&p, text).unwrap();
            p.display().to_string()
        };
        let before: Vec<_> = std::fs::read_dir(&runs_dir).unwrap().collect();
        // No mode, two modes, a bad quantity, both priorities, an unknown
        // class: refused with the field, exit 1, nothing written.
        let head = "apiVersion: kruntimes.io/v1alpha1\nkind: Run\nmetadata:\n  name: x\nspec:\n  runtime: python\n";
        for (body, needle) in [
            ("", "missing field `mode`"),
            (
                "  mode:\n    function: {handler: main.invoke}\n    session: {}\n",
                "spec.mode must set exactly one",
            ),
            (
                "  mode:\n    function: {handler: main.invoke}\n  resources:\n    requests: {cpu: lots}\n",
                "spec.resources.requests.cpu",
            ),
            (
                "  mode:\n    function: {handler: main.invoke}\n  priority: 5\n  priorityClassName: high\n",
                "set spec.priority or spec.priorityClassName, not both",
            ),
            (
                "  mode:\n    function: {handler: main.invoke}\n  priorityClassName: urgent\n",
                "unknown variant `urgent`",
            ),
            // The task input semantics, refused as the API server would.
            (
                "  mode:\n    task:\n      entrypoint: ../x.py\n",
                "spec.mode.task.entrypoint \"../x.py\": path must not contain '..'",
            ),
            ("  mode:\n    task: {}\n", "a task needs something to run"),
        ] {
            let f = write("bad.yaml", &format!("{head}{body}"));
            fails_with(krt(&base, &["apply", "-f", &f]), 1, needle);
        }
        // What has no effect is said, and the Run written.
        let ignored = write(
            "ignored.yaml",
            &format!(
                "{}  source:\n    inline: print(1)\n  mode:\n    task:\n      args: [--verbose]\n",
                head.replace("name: x", "name: ignored")
            ),
        );
        let out = krt(&base, &["apply", "-f", &ignored]);
        assert!(out.status.success(), "{}", text(&out));
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(
                "Warning: run default/ignored: spec.mode.task.args has no effect: spec.source.inline is a standalone script"
            ),
            "{}",
            text(&out)
        );
        ok(krt(&base, &["delete", "run", "ignored"]));
        // A good document beside a bad one: neither is written.
        let good = manifest(&dir_path, "kept", "default");
        let both = format!(
            "{}---\n{head}",
            std::fs::read_to_string(&good).unwrap()
        );
        let f = write("both.yaml", &both);
        fails_with(krt(&base, &["apply", "-f", &f]), 1, "run default/x");
        let after: Vec<_> = std::fs::read_dir(&runs_dir).unwrap().collect();
        assert_eq!(before.len(), after.len(), "a refused apply wrote nothing");
        // A file dropped into the runs directory that krt up cannot read is
        // named by `krt runs`.
        std::fs::write(runs_dir.join("garbled.yaml"), "kind: Run\nmetadata: [").unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let out = krt(&base, &["runs"]);
            let err = String::from_utf8_lossy(&out.stderr).into_owned();
            if err.contains("garbled.yaml: did not find expected node content") {
                assert!(out.status.success(), "{}", text(&out));
                assert!(err.contains("skipped: krt up runs nothing from it"), "{err}");
                break;
            }
            assert!(std::time::Instant::now() < deadline, "{}", text(&out));
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        std::fs::remove_file(runs_dir.join("garbled.yaml")).unwrap();

        // Created, configured in place, then replaced — and told so, with
        // the UID krt up serves it under.
        let f = good.display().to_string();
        let uid_of = |name: &str| -> String {
            let all: Vec<Value> =
                serde_json::from_str(&ok(krt(&base, &["runs", "-o", "json"]))).unwrap();
            let run = all.into_iter().find(|r| r["name"] == name).expect("listed");
            run["uid"].as_str().unwrap().to_owned()
        };
        let created = ok(krt(&base, &["apply", "-f", &f]));
        let first = uid_of("kept");
        assert_eq!(created.trim(), format!("run.kruntimes.io/kept created (uid {first})"));
        let longer = std::fs::read_to_string(&good)
            .unwrap()
            .replace("invocationTimeoutSeconds: 2", "invocationTimeoutSeconds: 2\n  priority: 7");
        let f = write("kept.yaml", &longer);
        assert_eq!(ok(krt(&base, &["apply", "-f", &f])).trim(), "run.kruntimes.io/kept configured");
        let other = longer.replace("invocationTimeoutSeconds: 2", "invocationTimeoutSeconds: 3");
        let f = write("kept.yaml", &other);
        let out = ok(krt(&base, &["apply", "-f", &f]));
        let second = uid_of("kept");
        assert_ne!(first, second);
        assert!(
            out.contains("krt up replaced it")
                && out.contains(&format!("new uid {second}; the old one ({first}) was deleted")),
            "{out}"
        );
        // A wait right after a replacement follows the new Run, never the
        // old one's state.
        let waited = ok(krt(&base, &["wait", "run", "kept", "--for", "Ready"]));
        assert_eq!(waited.trim(), "run.kruntimes.io/kept Ready");
        assert_eq!(uid_of("kept"), second);
    })
    .await
    .unwrap();
}
