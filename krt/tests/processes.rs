//! Background processes and terminals of a session, end to end through the
//! gateway over HTTPS: a process outlives the client that started it and
//! replays its output to the next one, takes stdin and signals, runs on a
//! terminal that takes a resize, and every refusal is a typed error.

// Test helpers panic on failure: that is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use base64::Engine as _;
use kruntimes_testkit::prelude::*;
use serde_json::{Value, json};

fn sandbox(name: &str) -> (String, String) {
    (
        format!("{name}.yaml"),
        format!(
            "apiVersion: kruntimes.io/v1alpha1\nkind: Run\nmetadata:\n  name: {name}\n  namespace: default\nspec:\n  runtime: bash\n  env:\n    - name: GREETING\n      value: hello\n  mode:\n    session:\n      operationTimeout: 60\n"
        ),
    )
}

fn b64(data: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(data)
}

/// A session's process routes, as a client sees them.
struct Api<'a> {
    stack: &'a kruntimes_testkit::Stack,
    base: String,
}

impl Api<'_> {
    async fn post(&self, path: &str, body: Value) -> reqwest::Response {
        self.stack
            .http
            .post(format!("{}/{path}", self.base))
            .bearer_auth(&self.stack.token)
            .json(&body)
            .send()
            .await
            .unwrap()
    }

    async fn get(&self, path: &str) -> reqwest::Response {
        self.stack
            .http
            .get(format!("{}/{path}", self.base))
            .bearer_auth(&self.stack.token)
            .send()
            .await
            .unwrap()
    }

    async fn start(&self, body: Value) -> u64 {
        let r = self.post("processes", body).await;
        let status = r.status();
        if status != 201 {
            panic!("start: {status} {}", r.text().await.unwrap());
        }
        json(r).await["pid"].as_u64().unwrap()
    }

    async fn no_content(&self, path: &str, body: Value) {
        let r = self.post(path, body).await;
        let status = r.status();
        assert_eq!(status, 204, "{path}: {}", r.text().await.unwrap());
    }

    /// The NDJSON lines of `:connect` until `until` holds for the output
    /// read (or the exit); returns the output and the events.
    async fn connect_until(
        &self,
        pid: u64,
        until: impl Fn(&[u8]) -> bool,
    ) -> (Vec<u8>, Vec<Value>) {
        let mut resp = self.get(&format!("processes/{pid}:connect")).await;
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.headers()["content-type"], "application/x-ndjson");
        let mut buf = Vec::new();
        let mut out = Vec::new();
        let mut events = Vec::new();
        while let Some(chunk) = tokio::time::timeout(Duration::from_secs(30), resp.chunk())
            .await
            .expect("no event in time")
            .unwrap()
        {
            buf.extend_from_slice(&chunk);
            while let Some(nl) = buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = buf.drain(..=nl).collect();
                let ev: Value = serde_json::from_slice(&line).unwrap();
                if ev["type"] == "output" {
                    let data = base64::engine::general_purpose::STANDARD
                        .decode(ev["dataBase64"].as_str().unwrap())
                        .unwrap();
                    out.extend_from_slice(&data);
                }
                let exited = ev["type"] == "exited";
                events.push(ev);
                if exited || until(&out) {
                    return (out, events);
                }
            }
        }
        (out, events)
    }

    async fn to_exit(&self, pid: u64) -> (Vec<u8>, Value) {
        let (out, events) = self.connect_until(pid, |_| false).await;
        let last = events.last().cloned().unwrap();
        assert_eq!(last["type"], "exited", "{events:?}");
        (out, last)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn background_processes_outlive_their_clients_and_replay_their_output() {
    let stack = start(1, vec![sandbox("bg")], &[]);
    let run = stack.wait_phase("bg", "Ready").await.unwrap();
    let api = Api {
        stack: &stack,
        base: run["endpoint"].as_str().unwrap().to_owned(),
    };
    let pid = api
        .start(json!({"command": {"shell": "echo $GREETING $X; echo err >&2; read line; echo \"read $line\"; exit 5"}, "env": {"X": "there"}, "stdin": true}))
        .await;
    // A client reads the first line and leaves; the process goes on.
    let (first, _) = api
        .connect_until(pid, |out| {
            out.ends_with(b"hello there\n") || out.ends_with(b"err\n")
        })
        .await;
    assert!(first.starts_with(b"hello there\n") || first.starts_with(b"err\n"));
    let listed = json(api.get("processes").await).await;
    let me = listed["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["pid"] == pid)
        .cloned()
        .unwrap();
    assert_eq!(me["running"], true);
    assert_eq!(me["pty"], false);
    assert_eq!(
        me["command"]["shell"].as_str().unwrap().split(';').next(),
        Some("echo $GREETING $X")
    );
    assert!(me["startedAt"].as_str().unwrap().ends_with('Z'));
    api.no_content(
        &format!("processes/{pid}:input"),
        json!({"dataBase64": b64(b"typed\n")}),
    )
    .await;
    // The next client gets everything, then the exit.
    let (all, exited) = api.to_exit(pid).await;
    let text = String::from_utf8(all).unwrap();
    assert!(
        text.contains("hello there\n") && text.contains("err\n") && text.contains("read typed\n"),
        "{text}"
    );
    assert_eq!(exited["exitCode"], 5);
    let one = json(api.get(&format!("processes/{pid}")).await).await;
    assert_eq!(
        (one["running"].clone(), one["exitCode"].clone()),
        (json!(false), json!(5))
    );
    assert!(one["endedAt"].is_string());

    // A signal reaches the process; SIGKILL ends its tree.
    let trapped = api
        .start(json!({"command": {"shell": "trap 'echo bye; exit 7' TERM; echo up; while :; do sleep 0.1; done"}}))
        .await;
    api.connect_until(trapped, |o| o.ends_with(b"up\n")).await;
    api.no_content(
        &format!("processes/{trapped}:signal"),
        json!({"signal": "SIGTERM"}),
    )
    .await;
    let (out, exited) = api.to_exit(trapped).await;
    // SIGTERM reaches the whole tree: the shell's `sleep` too.
    let out = String::from_utf8_lossy(&out);
    assert!(out.starts_with("up\n") && out.contains("bye\n"), "{out}");
    assert_eq!(exited["exitCode"], 7);
    let stubborn = api
        .start(json!({"command": {"argv": ["bash", "-c", "trap '' TERM INT; sleep 300"]}}))
        .await;
    api.no_content(
        &format!("processes/{stubborn}:signal"),
        json!({"signal": "KILL"}),
    )
    .await;
    assert_eq!(api.to_exit(stubborn).await.1["exitCode"], 137);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminal_runs_an_interactive_shell_and_takes_a_resize() {
    let stack = start(1, vec![sandbox("tty")], &[]);
    let run = stack.wait_phase("tty", "Ready").await.unwrap();
    let api = Api {
        stack: &stack,
        base: run["endpoint"].as_str().unwrap().to_owned(),
    };
    let pid = api
        .start(
            json!({"command": {"argv": ["bash", "--norc", "-i"]}, "pty": {"rows": 24, "cols": 80}}),
        )
        .await;
    let input = |data: &'static [u8]| {
        let api = &api;
        async move {
            api.no_content(
                &format!("processes/{pid}:input"),
                json!({"dataBase64": b64(data)}),
            )
            .await
        }
    };
    input(b"stty size; tty; echo \"TERM=$TERM\"\r").await;
    let (out, _) = api
        .connect_until(pid, |o| {
            String::from_utf8_lossy(o).contains("TERM=xterm-256color")
        })
        .await;
    let text = String::from_utf8_lossy(&out).into_owned();
    assert!(text.contains("24 80"), "{text}");
    assert!(text.contains("/dev/pts/"), "{text}");
    api.no_content(
        &format!("processes/{pid}:resize"),
        json!({"rows": 50, "cols": 132}),
    )
    .await;
    input(b"stty size\r").await;
    api.connect_until(pid, |o| String::from_utf8_lossy(o).contains("50 132"))
        .await;
    // Job control: Ctrl-C stops the foreground job, not the shell.
    input(b"sleep 300\r").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    input(b"\x03").await;
    input(b"echo still-here\r").await;
    api.connect_until(pid, |o| {
        String::from_utf8_lossy(o).contains("still-here\r\n")
    })
    .await;
    input(b"exit 3\r").await;
    let (_, exited) = api.to_exit(pid).await;
    assert_eq!(exited["exitCode"], 3);
    let listed = json(api.get("processes").await).await;
    assert_eq!(listed["processes"][0]["pty"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_refusal_of_the_process_routes_is_a_typed_error() {
    let stack = start(1, vec![sandbox("errs")], &[]);
    let run = stack.wait_phase("errs", "Ready").await.unwrap();
    let api = Api {
        stack: &stack,
        base: run["endpoint"].as_str().unwrap().to_owned(),
    };
    let sleeper = api
        .start(json!({"command": {"argv": ["sleep", "300"]}}))
        .await;
    let done = api.start(json!({"command": {"argv": ["true"]}})).await;
    api.to_exit(done).await;
    let cases: Vec<(&str, reqwest::Response, u16, &str)> = vec![
        (
            "no command",
            api.post("processes", json!({})).await,
            400,
            "InvalidJson",
        ),
        (
            "an unknown field",
            api.post(
                "processes",
                json!({"command": {"argv": ["true"]}, "tty": true}),
            )
            .await,
            400,
            "InvalidJson",
        ),
        (
            "argv and shell",
            api.post(
                "processes",
                json!({"command": {"argv": ["true"], "shell": "true"}}),
            )
            .await,
            400,
            "BadRequest",
        ),
        (
            "a terminal too big",
            api.post(
                "processes",
                json!({"command": {"argv": ["true"]}, "pty": {"rows": 0, "cols": 80}}),
            )
            .await,
            400,
            "BadRequest",
        ),
        (
            "a cwd outside",
            api.post(
                "processes",
                json!({"command": {"argv": ["true"]}, "cwd": "../x"}),
            )
            .await,
            400,
            "InvalidPath",
        ),
        (
            "a cwd that is no directory",
            api.post(
                "processes",
                json!({"command": {"argv": ["true"]}, "cwd": "nope"}),
            )
            .await,
            409,
            "Conflict",
        ),
        (
            "an unknown pid",
            api.get("processes/999999").await,
            404,
            "NotFound",
        ),
        (
            "connect to an unknown pid",
            api.get("processes/999999:connect").await,
            404,
            "NotFound",
        ),
        (
            "a pid that is no number",
            api.get("processes/abc").await,
            400,
            "InvalidPath",
        ),
        (
            "an unknown verb",
            api.post(&format!("processes/{sleeper}:kill"), json!({}))
                .await,
            400,
            "InvalidPath",
        ),
        (
            "the wrong method",
            api.get(&format!("processes/{sleeper}:signal")).await,
            405,
            "MethodNotAllowed",
        ),
        (
            "an unknown signal",
            api.post(
                &format!("processes/{sleeper}:signal"),
                json!({"signal": "SIGSEGV"}),
            )
            .await,
            400,
            "BadRequest",
        ),
        (
            "input without stdin",
            api.post(
                &format!("processes/{sleeper}:input"),
                json!({"dataBase64": b64(b"x")}),
            )
            .await,
            409,
            "Conflict",
        ),
        (
            "input that is no base64",
            api.post(
                &format!("processes/{sleeper}:input"),
                json!({"dataBase64": "%%%"}),
            )
            .await,
            400,
            "BadRequest",
        ),
        (
            "a resize without a terminal",
            api.post(
                &format!("processes/{sleeper}:resize"),
                json!({"rows": 10, "cols": 10}),
            )
            .await,
            409,
            "Conflict",
        ),
        (
            "a signal to an ended process",
            api.post(
                &format!("processes/{done}:signal"),
                json!({"signal": "SIGTERM"}),
            )
            .await,
            409,
            "Conflict",
        ),
        (
            "input to an ended process",
            api.post(
                &format!("processes/{done}:input"),
                json!({"dataBase64": ""}),
            )
            .await,
            409,
            "Conflict",
        ),
    ];
    for (what, resp, status, code) in cases {
        assert_eq!(resp.status(), status, "{what}");
        let body = json(resp).await;
        assert_eq!(body["error"]["code"], code, "{what}: {body}");
    }
    // Input over 1 MiB.
    let big = api
        .post(
            &format!("processes/{sleeper}:input"),
            json!({"dataBase64": b64(&vec![b'x'; 1024 * 1024 + 1])}),
        )
        .await;
    assert_eq!(big.status(), 413);
    // Without a token, nothing.
    let anonymous = stack
        .http
        .get(format!("{}/processes", api.base))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), 401);
    // closeStdin twice is fine.
    let cat = api
        .start(json!({"command": {"argv": ["cat"]}, "stdin": true}))
        .await;
    api.no_content(&format!("processes/{cat}:closeStdin"), json!({}))
        .await;
    api.no_content(&format!("processes/{cat}:closeStdin"), json!({}))
        .await;
    assert_eq!(api.to_exit(cat).await.1["exitCode"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn krt_session_starts_lists_attaches_kills_and_opens_a_shell() {
    let stack = start(1, vec![sandbox("cli")], &[]);
    stack.wait_phase("cli", "Ready").await.unwrap();
    let text = |o: &std::process::Output| String::from_utf8_lossy(&o.stdout).into_owned();
    let started = stack
        .krt(&[
            "session",
            "start",
            "cli",
            "--env",
            "WHO=cli",
            "--",
            "bash",
            "-c",
            "echo hi $WHO; echo oops >&2; exit 6",
        ])
        .unwrap();
    assert!(started.status.success(), "{started:?}");
    let pid = text(&started).trim().to_owned();
    assert!(pid.parse::<u32>().is_ok(), "{pid}");
    let attached = stack.krt(&["session", "attach", "cli", &pid]).unwrap();
    assert_eq!(attached.status.code(), Some(6), "{attached:?}");
    assert_eq!(text(&attached), "hi cli\n");
    assert_eq!(String::from_utf8_lossy(&attached.stderr), "oops\n");
    let sleeper = stack
        .krt(&["session", "start", "cli", "--shell", "sleep 300"])
        .unwrap();
    let sleeper = text(&sleeper).trim().to_owned();
    let ps = text(&stack.krt(&["session", "ps", "cli"]).unwrap());
    let row = |pid: &str| {
        ps.lines()
            .find(|l| l.starts_with(&format!("{pid} ")))
            .map(str::to_owned)
    };
    assert!(row(&pid).unwrap().contains("exited"), "{ps}");
    let running = row(&sleeper).unwrap();
    assert!(
        running.contains("running") && running.ends_with("sleep 300"),
        "{ps}"
    );
    let killed = stack
        .krt(&["session", "kill", "cli", &sleeper, "--signal", "SIGKILL"])
        .unwrap();
    assert!(killed.status.success(), "{killed:?}");
    let attached = stack.krt(&["session", "attach", "cli", &sleeper]).unwrap();
    assert_eq!(attached.status.code(), Some(137));
    // Unknown pids and signals are the API's typed errors: exit 17 NotFound, 13 BadRequest.
    assert_eq!(
        stack
            .krt(&["session", "attach", "cli", "999999"])
            .unwrap()
            .status
            .code(),
        Some(17)
    );
    let bad = stack
        .krt(&["session", "kill", "cli", &sleeper, "--signal", "SIGSEGV"])
        .unwrap();
    assert_eq!(bad.status.code(), Some(13), "{bad:?}");
    let metrics = stack.krt(&["session", "metrics", "cli"]).unwrap();
    assert!(metrics.status.success(), "{metrics:?}");
    assert!(text(&metrics).contains("processes  "), "{}", text(&metrics));
    // A watch prints each change until Ctrl-C.
    let mut watcher = std::process::Command::new(env!("CARGO_BIN_EXE_krt"))
        .arg("--state-dir")
        .arg(stack.state_dir())
        .args(["session", "watch", "cli:", "-r"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let stdout = watcher.stdout.take().unwrap();
    let (lines_tx, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead as _;
        for l in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            let _ = lines_tx.send(l);
        }
    });
    let mut seen = Vec::new();
    for i in 0..50 {
        let touched = stack
            .krt(&[
                "session",
                "exec",
                "cli",
                "--shell",
                &format!("mkdir -p w && echo {i} > w/f{i}"),
            ])
            .unwrap();
        assert!(touched.status.success());
        seen.extend(lines.try_iter());
        if seen
            .iter()
            .any(|l| l.starts_with("create") && l.contains("w/f"))
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        seen.iter()
            .any(|l| l.starts_with("create") && l.contains("w/f")),
        "{seen:?}"
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(watcher.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    assert!(watcher.wait().unwrap().success());
    // A shell on a terminal, driven from a pipe (no local terminal here).
    let shell = stack
        .krt_with_input(
            &["session", "shell", "cli"],
            b"echo \"in-$((6*7))\"; tty; exit 4\n",
        )
        .unwrap();
    let out = text(&shell);
    assert_eq!(shell.status.code(), Some(4), "{out}");
    assert!(out.contains("in-42"), "{out}");
    assert!(out.contains("/dev/pts/"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sessions_metrics_count_its_processes_cpu_memory_and_files() {
    let stack = start(1, vec![sandbox("metered")], &[]);
    let run = stack.wait_phase("metered", "Ready").await.unwrap();
    let api = Api {
        stack: &stack,
        base: run["endpoint"].as_str().unwrap().to_owned(),
    };
    let idle = json(api.get("metrics").await).await;
    assert_eq!(idle["processes"], 0, "{idle}");
    assert!(idle["cpuCount"].as_u64().unwrap() >= 1);
    // 64 MiB resident, a CPU-bound loop, and a 1 MiB file.
    let holder = api
        .start(json!({"command": {"argv": ["python3", "-c", "import time\nb = bytearray(64 << 20)\nprint('held', flush=True)\ntime.sleep(300)"]}}))
        .await;
    let spinner = api
        .start(
            json!({"command": {"shell": "head -c 1048576 /dev/zero > blob; while :; do :; done"}}),
        )
        .await;
    api.connect_until(holder, |o| o.ends_with(b"held\n")).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let busy = json(api.get("metrics").await).await;
    assert!(busy["processes"].as_u64().unwrap() >= 2, "{busy}");
    assert!(busy["memoryBytes"].as_u64().unwrap() >= 64 << 20, "{busy}");
    assert!(busy["cpuSeconds"].as_f64().unwrap() > 0.0, "{busy}");
    assert!(busy["diskBytes"].as_u64().unwrap() >= 1 << 20, "{busy}");
    assert_eq!(busy["diskPartial"], false);
    assert!(busy["diskTotalBytes"].as_u64().unwrap() >= busy["diskFreeBytes"].as_u64().unwrap());
    for pid in [holder, spinner] {
        api.no_content(
            &format!("processes/{pid}:signal"),
            json!({"signal": "SIGKILL"}),
        )
        .await;
        api.to_exit(pid).await;
    }
    let after = json(api.get("metrics").await).await;
    assert_eq!(after["processes"], 0, "{after}");
    assert!(after["memoryBytes"].as_u64().unwrap() < 64 << 20, "{after}");
}
