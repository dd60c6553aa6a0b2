//! Session (sandbox) Runs end to end through the gateway.

// Test helpers panic on failure: that is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use base64::Engine as _;
use kruntimes_testkit::prelude::*;

fn sandbox(name: &str, extra: &str) -> (String, String) {
    (
        format!("{name}.yaml"),
        format!(
            "apiVersion: kruntimes.io/v1alpha1\nkind: Run\nmetadata:\n  name: {name}\n  namespace: default\nspec:\n  runtime: bash\n  env:\n    - name: GREETING\n      value: hello\n  mode:\n    session:\n      queueSize: 1\n      operationTimeout: 30\n{extra}"
        ),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_run_commands_and_file_operations_through_the_gateway() {
    let stack = start(2, vec![sandbox("sbx", ""), python_run("fn")], &[]);
    let run = stack.wait_phase("sbx", "Ready").await.unwrap();
    let fn_run = stack.wait_phase("fn", "Ready").await.unwrap();
    assert_ne!(
        run["assignedPod"], fn_run["assignedPod"],
        "a session holds its Pod alone"
    );
    let base = run["endpoint"].as_str().unwrap().to_owned();
    let http = &stack.http;
    let token = stack.token.clone();
    let exec = |body: serde_json::Value| {
        http.post(format!("{base}/operations:execute"))
            .bearer_auth(token.clone())
            .json(&body)
            .send()
    };

    let r = exec(serde_json::json!({"command": {"shell": "echo $GREETING from $(pwd | xargs basename); echo oops >&2; exit 3"}}))
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let out = json(r).await;
    assert_eq!(out["state"], "Failed");
    assert_eq!(out["exitCode"], 3);
    assert_eq!(
        out["stdout"],
        format!("hello from {}\n", run["uid"].as_str().unwrap())
    );
    assert_eq!(out["stderr"], "oops\n");
    assert!(out["operationId"].as_str().unwrap().starts_with("op-"));

    let content = "x".repeat(4096);
    let b64 = base64::engine::general_purpose::STANDARD.encode(&content);
    for op in [
        serde_json::json!({"mkdir": {"path": "work/in"}}),
        serde_json::json!({"writeFile": {"path": "work/in/a.txt", "contentBase64": b64}}),
        serde_json::json!({"rename": {"from": "work/in/a.txt", "to": "work/b.txt"}}),
        serde_json::json!({"command": {"argv": ["cp", "b.txt", "c.txt"]}, "cwd": "work", "env": {"X": "1"}}),
    ] {
        let res = json(exec(op.clone()).await.unwrap()).await;
        assert_eq!(res["state"], "Succeeded", "{op}: {res}");
    }
    let read = http
        .get(format!("{base}/files:content?path=work/c.txt"))
        .bearer_auth(&stack.token)
        .send()
        .await
        .unwrap();
    assert_eq!(read.status(), 200);
    assert_eq!(read.bytes().await.unwrap(), content.as_bytes());
    let list = json(
        http.get(format!("{base}/files?path=work&limit=1"))
            .bearer_auth(&stack.token)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(list["entries"][0]["name"], "b.txt");
    assert_eq!(list["entries"][0]["type"], "file");
    assert_eq!(list["entries"][0]["size"], 4096);
    let token_next = list["nextPageToken"].as_str().unwrap();
    let next = json(
        http.get(format!(
            "{base}/files?path=work&limit=10&pageToken={token_next}"
        ))
        .bearer_auth(&stack.token)
        .send()
        .await
        .unwrap(),
    )
    .await;
    let names: Vec<_> = next["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["c.txt", "in"]);
    assert!(next.get("nextPageToken").is_none());

    // Escapes are refused for every file operation.
    for op in [
        serde_json::json!({"writeFile": {"path": "../x", "contentBase64": ""}}),
        serde_json::json!({"mkdir": {"path": "/tmp/x"}}),
        serde_json::json!({"delete": {"path": "../../etc"}}),
        serde_json::json!({"rename": {"from": "work/b.txt", "to": "../b.txt"}}),
        serde_json::json!({"command": {"argv": ["true"]}, "cwd": "../.."}),
    ] {
        expect_error(exec(op).await.unwrap(), 400, "InvalidPath").await;
    }
    let ln = json(
        exec(serde_json::json!({"command": {"argv": ["ln", "-s", "/etc", "etc-link"]}}))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(ln["state"], "Succeeded");
    let through = json(
        exec(serde_json::json!({"writeFile": {"path": "etc-link/evil", "contentBase64": "eA=="}}))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(through["state"], "Failed", "{through}");
    for url in [
        format!("{base}/files:content?path=etc-link/passwd"),
        format!("{base}/files?path=etc-link"),
    ] {
        let r = http
            .get(url)
            .bearer_auth(&stack.token)
            .send()
            .await
            .unwrap();
        expect_error(r, 400, "InvalidPath").await;
    }
    expect_error(
        http.get(format!("{base}/files:content?path=nope"))
            .bearer_auth(&stack.token)
            .send()
            .await
            .unwrap(),
        404,
        "NotFound",
    )
    .await;

    // Status bypasses the queue.
    let st = json(
        http.get(&base)
            .bearer_auth(&stack.token)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(st["pendingOperations"], 0);

    // A session UID is not invocable, and a function UID has no session.
    let invoke_url = stack.url("default", "bash", run["uid"].as_str().unwrap());
    expect_error(
        http.post(invoke_url)
            .bearer_auth(&stack.token)
            .body("{}")
            .send()
            .await
            .unwrap(),
        404,
        "NotFound",
    )
    .await;
    let fn_session = format!(
        "{}/v1/namespaces/default/runtimes/python/sessions/{}",
        stack.gateway,
        fn_run["uid"].as_str().unwrap()
    );
    expect_error(
        http.get(fn_session)
            .bearer_auth(&stack.token)
            .send()
            .await
            .unwrap(),
        404,
        "NotFound",
    )
    .await;
    expect_error(
        http.get(&base).send().await.unwrap(),
        401,
        "Unauthenticated",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_events_in_order_and_bounds_the_queue() {
    let stack = start(1, vec![sandbox("sbx", "")], &[]);
    let run = stack.wait_phase("sbx", "Ready").await.unwrap();
    let base = run["endpoint"].as_str().unwrap().to_owned();
    let resp = stack
        .http
        .post(format!("{base}/operations:stream"))
        .bearer_auth(&stack.token)
        .json(&serde_json::json!({"command": {"shell": "for i in 1 2 3; do echo line$i; sleep 0.1; done"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "application/x-ndjson");
    let text = resp.text().await.unwrap();
    let events: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(events.first().unwrap()["type"], "accepted");
    assert_eq!(events.last().unwrap()["type"], "completed");
    assert_eq!(events.last().unwrap()["state"], "Succeeded");
    let seqs: Vec<u64> = events
        .iter()
        .map(|e| e["sequence"].as_u64().unwrap())
        .collect();
    assert!(
        seqs.windows(2).all(|w| w[0] < w[1]),
        "strictly increasing: {seqs:?}"
    );
    let output: String = events
        .iter()
        .filter(|e| e["type"] == "output")
        .map(|e| e["data"].as_str().unwrap())
        .collect();
    assert_eq!(output, "line1\nline2\nline3\n");

    // queueSize 1: one running, one waiting, the third is refused.
    let send = || {
        stack
            .http
            .post(format!("{base}/operations:execute"))
            .bearer_auth(&stack.token)
            .json(&serde_json::json!({"command": {"shell": "sleep 1"}}))
            .send()
    };
    let a = tokio::spawn(send());
    tokio::time::sleep(Duration::from_millis(300)).await;
    let b = tokio::spawn(send());
    tokio::time::sleep(Duration::from_millis(300)).await;
    expect_error(send().await.unwrap(), 429, "Busy").await;
    assert_eq!(a.await.unwrap().unwrap().status(), 200);
    assert_eq!(b.await.unwrap().unwrap().status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_termination_finishes_accepted_work_then_succeeds() {
    let (file, yaml) = sandbox("sbx", "");
    let stack = start(1, vec![(file.clone(), yaml.clone())], &[]);
    let run = stack.wait_phase("sbx", "Ready").await.unwrap();
    let base = run["endpoint"].as_str().unwrap().to_owned();
    let http = stack.http.clone();
    let token = stack.token.clone();
    let b = base.clone();
    let running = tokio::spawn(async move {
        http.post(format!("{b}/operations:execute"))
            .bearer_auth(token)
            .json(&serde_json::json!({"command": {"shell": "sleep 1; echo done"}}))
            .send()
            .await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    stack
        .add_run(&file, &format!("{yaml}  termination:\n    mode: Drain\n"))
        .unwrap();
    let out = json(running.await.unwrap().unwrap()).await;
    assert_eq!(out["stdout"], "done\n", "accepted work finishes");
    let ended = stack
        .wait_run("sbx", Duration::from_secs(30), |r| {
            r["phase"] == "Succeeded"
        })
        .await
        .unwrap();
    assert_eq!(
        ended["uid"], run["uid"],
        "termination does not replace the Run"
    );
    let r = stack
        .http
        .get(&base)
        .bearer_auth(&stack.token)
        .send()
        .await
        .unwrap();
    // Ended for good: 410 RunEnded, no Retry-After.
    assert_eq!(r.status().as_u16(), 410);
    assert!(r.headers().get("retry-after").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn krt_session_commands_create_exec_copy_list_and_close() {
    let stack = start(1, vec![], &[]);
    let created = stack
        .krt(&["session", "create", "cli-box", "--env", "WHO=krt"])
        .unwrap();
    assert!(
        created.status.success(),
        "{}",
        String::from_utf8_lossy(&created.stderr)
    );
    assert!(String::from_utf8_lossy(&created.stdout).contains("/sessions/"));

    let out = stack
        .krt(&[
            "session",
            "exec",
            "cli-box",
            "--shell",
            "echo hi $WHO; exit 7",
        ])
        .unwrap();
    assert_eq!(out.status.code(), Some(7));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hi krt\n");
    let ok = stack
        .krt(&["session", "exec", "cli-box", "--", "uname", "-s"])
        .unwrap();
    assert!(ok.status.success());

    let local = stack.state_dir().join("upload.txt");
    std::fs::write(&local, "copied").unwrap();
    let up = stack
        .krt(&[
            "session",
            "cp",
            local.to_str().unwrap(),
            "cli-box:in/../x.txt",
        ])
        .unwrap();
    assert!(!up.status.success(), "traversal is refused");
    let up = stack
        .krt(&["session", "cp", local.to_str().unwrap(), "cli-box:x.txt"])
        .unwrap();
    assert!(
        up.status.success(),
        "{}",
        String::from_utf8_lossy(&up.stderr)
    );
    let back = stack.state_dir().join("download.txt");
    let down = stack
        .krt(&["session", "cp", "cli-box:x.txt", back.to_str().unwrap()])
        .unwrap();
    assert!(down.status.success());
    assert_eq!(std::fs::read_to_string(&back).unwrap(), "copied");
    let ls = stack.krt(&["session", "ls", "cli-box"]).unwrap();
    assert!(String::from_utf8_lossy(&ls.stdout).contains("x.txt"));

    // Ctrl-C on an exec cancels its operation (exit 130): the next exec
    // does not wait behind it.
    let exec = running_exec(&stack, "sleep infinity");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(exec.child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let (code, stderr) = exec.end();
    assert_eq!(code, Some(130), "{stderr}");
    assert!(stderr.contains("operation Cancelled"), "{stderr}");
    let next = stack
        .krt(&["session", "exec", "cli-box", "--", "true"])
        .unwrap();
    assert!(next.status.success(), "{next:?}");
    // `krt session cancel` cancels one by its id (`exec -v` prints it).
    let exec = running_exec(&stack, "sleep infinity");
    let id = exec.id.clone();
    let cancelled = stack.krt(&["session", "cancel", "cli-box", &id]).unwrap();
    assert!(cancelled.status.success(), "{cancelled:?}");
    let (code, stderr) = exec.end();
    assert_ne!(code, Some(0), "{stderr}");
    assert!(stderr.contains("operation Cancelled"), "{stderr}");
    // An operation that is not queued or running: 404, exit 17.
    let unknown = stack.krt(&["session", "cancel", "cli-box", &id]).unwrap();
    assert_eq!(unknown.status.code(), Some(17), "{unknown:?}");
    assert!(
        String::from_utf8_lossy(&unknown.stderr).contains("is not queued or running"),
        "{unknown:?}"
    );

    let closed = stack.krt(&["session", "close", "cli-box"]).unwrap();
    assert!(
        closed.status.success(),
        "{}",
        String::from_utf8_lossy(&closed.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&closed.stdout).trim(), "Succeeded");
}

/// `krt session exec -v cli-box --shell SCRIPT` started in the background,
/// once the session accepted it: the process and the operation id it
/// printed.
fn running_exec(stack: &kruntimes_testkit::Stack, script: &str) -> Exec {
    use std::io::BufRead as _;
    let mut child = std::process::Command::new(kruntimes_testkit::krt_binary())
        .arg("--state-dir")
        .arg(stack.state_dir())
        .args(["session", "exec", "-v", "cli-box", "--shell", script])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    stderr.read_line(&mut line).unwrap();
    let id = line
        .strip_prefix("operation ")
        .and_then(|l| l.strip_suffix(" accepted\n"))
        .unwrap_or_else(|| panic!("{line:?}"))
        .to_owned();
    Exec { child, id, stderr }
}

/// A `krt session exec` running in the background.
struct Exec {
    child: std::process::Child,
    id: String,
    stderr: std::io::BufReader<std::process::ChildStderr>,
}

impl Exec {
    /// Its exit code and the rest of its stderr.
    fn end(mut self) -> (Option<i32>, String) {
        use std::io::Read as _;
        let mut rest = String::new();
        self.stderr.read_to_string(&mut rest).unwrap();
        (self.child.wait().unwrap().code(), rest)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_sends_operations_streams_events_and_cancels() {
    use futures::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;

    let stack = start(1, vec![sandbox("sbx", "")], &[]);
    let run = stack.wait_phase("sbx", "Ready").await.unwrap();
    let endpoint = run["endpoint"].as_str().unwrap();
    stack.settled_logs().await;
    let logged_before = stack.log_of("gateway").len();
    assert!(
        websocket(&stack, endpoint, None).await.is_err(),
        "the upgrade needs a token"
    );
    let mut ws = websocket(&stack, endpoint, Some(&stack.token))
        .await
        .unwrap();
    let send = ws_send;
    ws.send(send(
        serde_json::json!({"command": {"shell": "echo one; sleep 0.2; echo two"}}),
    ))
    .await
    .unwrap();
    ws.send(send(serde_json::json!({"command": {"shell": "sleep 300"}})))
        .await
        .unwrap();
    ws.send(send(
        serde_json::json!({"writeFile": {"path": "../x", "contentBase64": ""}}),
    ))
    .await
    .unwrap();
    let mut events = Vec::new();
    let mut cancelled_sent = false;
    while let Some(msg) = tokio::time::timeout(Duration::from_secs(20), ws.next())
        .await
        .unwrap()
    {
        let Message::Text(t) = msg.unwrap() else {
            continue;
        };
        let ev: serde_json::Value = serde_json::from_str(t.as_str()).unwrap();
        if ev["type"] == "accepted" && ev["operationId"] == "op-2" && !cancelled_sent {
            let cancel = serde_json::json!({"type": "cancel", "operationId": "op-2"});
            ws.send(Message::Text(cancel.to_string().into()))
                .await
                .unwrap();
            cancelled_sent = true;
        }
        events.push(ev);
        let completed = |id: &str| {
            events
                .iter()
                .any(|e| e["type"] == "completed" && e["operationId"] == id)
        };
        if completed("op-1") && completed("op-2") {
            break;
        }
    }
    let seqs: Vec<u64> = events
        .iter()
        .map(|e| e["sequence"].as_u64().unwrap())
        .collect();
    assert!(
        seqs.windows(2).all(|w| w[0] < w[1]),
        "strictly increasing: {seqs:?}"
    );
    let out: String = events
        .iter()
        .filter(|e| e["type"] == "output" && e["operationId"] == "op-1")
        .map(|e| e["data"].as_str().unwrap())
        .collect();
    assert_eq!(out, "one\ntwo\n");
    let first = events
        .iter()
        .find(|e| e["type"] == "completed" && e["operationId"] == "op-1")
        .unwrap();
    assert_eq!(first["state"], "Succeeded");
    let second = events
        .iter()
        .find(|e| e["type"] == "completed" && e["operationId"] == "op-2")
        .unwrap();
    assert_eq!(second["state"], "Cancelled");
    assert!(
        events
            .iter()
            .any(|e| e["type"] == "failed" && e["error"]["code"] == "InvalidPath")
    );
    ws.close(Some(tokio_tungstenite::tungstenite::protocol::CloseFrame {
        code: tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode::Normal,
        reason: "".into(),
    }))
    .await
    .unwrap();
    // The close handshake completes, and then the connection ends cleanly.
    while let Some(msg) = tokio::time::timeout(Duration::from_secs(20), ws.next())
        .await
        .unwrap()
    {
        if let Message::Close(frame) = msg.unwrap() {
            assert_eq!(frame.map(|f| u16::from(f.code)), Some(1000));
        }
    }
    // A socket that ended normally is no failure in the gateway's log.
    let gateway = {
        stack.settled_logs().await;
        stack.log_of("gateway")
    };
    let noisy: Vec<&str> = gateway[logged_before..]
        .lines()
        .filter(|l| l.contains("WARN") || l.contains("ERROR"))
        .collect();
    assert!(noisy.is_empty(), "{noisy:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_protocol_faults_end_with_the_close_codes_of_rfc_6455_and_the_session_lives_on() {
    use futures::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Bytes;
    use tokio_tungstenite::tungstenite::Message;
    use tokio_tungstenite::tungstenite::protocol::frame::coding::{Control, Data, OpCode};
    use tokio_tungstenite::tungstenite::protocol::frame::{Frame, FrameHeader};

    let stack = start(1, vec![sandbox("faults", "")], &[]);
    let run = stack.wait_phase("faults", "Ready").await.unwrap();
    let endpoint = run["endpoint"].as_str().unwrap();
    let raw = |opcode: OpCode, payload: &[u8]| {
        let header = FrameHeader {
            opcode,
            ..FrameHeader::default()
        };
        Message::Frame(Frame::from_payload(header, Bytes::from(payload.to_vec())))
    };
    let cases = [
        (
            "a close frame of one byte",
            raw(OpCode::Control(Control::Close), &[3]),
            1002,
        ),
        (
            "text that is not UTF-8",
            raw(OpCode::Data(Data::Text), b"{\"type\":\"\xff\"}"),
            1007,
        ),
        (
            "a reserved opcode",
            raw(OpCode::Data(Data::Reserved(3)), b"x"),
            1002,
        ),
    ];
    for (what, frame, code) in cases {
        let mut ws = websocket(&stack, endpoint, Some(&stack.token))
            .await
            .unwrap();
        ws.send(frame).await.unwrap();
        let mut closed = None;
        while let Some(msg) = tokio::time::timeout(Duration::from_secs(20), ws.next())
            .await
            .unwrap()
        {
            match msg {
                Ok(Message::Close(frame)) => closed = frame.map(|f| u16::from(f.code)),
                Ok(other) => panic!("{what}: unexpected {other:?}"),
                // The client library may refuse what follows its own bad frame.
                Err(_) => break,
            }
        }
        assert_eq!(closed, Some(code), "{what}");
    }
    // The session is unharmed: a new socket runs an operation.
    let mut ws = websocket(&stack, endpoint, Some(&stack.token))
        .await
        .unwrap();
    ws.send(ws_send(
        serde_json::json!({"command": {"shell": "echo fine"}}),
    ))
    .await
    .unwrap();
    loop {
        let Message::Text(t) = ws.next().await.unwrap().unwrap() else {
            continue;
        };
        let ev: serde_json::Value = serde_json::from_str(t.as_str()).unwrap();
        if ev["type"] == "completed" {
            assert_eq!(ev["stdout"], "fine\n");
            break;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_32_mib_file_round_trips_and_idle_sessions_expire() {
    let stack = start(
        2,
        vec![
            sandbox("big", ""),
            sandbox("idle", "      idleTimeoutSeconds: 2\n"),
        ],
        &[],
    );
    let run = stack.wait_phase("big", "Ready").await.unwrap();
    let base = run["endpoint"].as_str().unwrap().to_owned();
    let content: Vec<u8> = (0..32 * 1024 * 1024)
        .map(|i: u32| (i % 251) as u8)
        .collect();
    let body = serde_json::json!({"writeFile": {"path": "big.bin", "contentBase64": base64::engine::general_purpose::STANDARD.encode(&content)}});
    let r = stack
        .http
        .post(format!("{base}/operations:execute"))
        .bearer_auth(&stack.token)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(json(r).await["state"], "Succeeded");
    let back = stack
        .http
        .get(format!("{base}/files:content?path=big.bin"))
        .bearer_auth(&stack.token)
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert!(back == content, "32 MiB round trip");

    let ended = stack
        .wait_run("idle", Duration::from_secs(30), |r| r["phase"] == "Timeout")
        .await
        .unwrap();
    assert_eq!(ended["reason"], "IdleTimeout");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_streams_what_commands_change_beneath_a_directory() {
    let stack = start(1, vec![sandbox("watched", "")], &[]);
    let run = stack.wait_phase("watched", "Ready").await.unwrap();
    let base = run["endpoint"].as_str().unwrap().to_owned();
    let http = &stack.http;
    let token = stack.token.clone();
    let exec = |shell: &str| {
        http.post(format!("{base}/operations:execute"))
            .bearer_auth(token.clone())
            .json(&serde_json::json!({"command": {"shell": shell}}))
            .send()
    };
    assert_eq!(exec("mkdir -p src/deep").await.unwrap().status(), 200);
    let mut watch = http
        .get(format!("{base}/files:watch"))
        .query(&[("path", "src"), ("recursive", "true")])
        .bearer_auth(token.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(watch.status(), 200);
    let mut buf = Vec::new();
    let mut events: Vec<serde_json::Value> = Vec::new();
    let mut next = async || -> serde_json::Value {
        loop {
            if let Some(nl) = buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = buf.drain(..=nl).collect();
                return serde_json::from_slice(&line).unwrap();
            }
            let chunk = tokio::time::timeout(Duration::from_secs(30), watch.chunk())
                .await
                .expect("no event in time")
                .unwrap()
                .expect("the watch ended");
            buf.extend_from_slice(&chunk);
        }
    };
    assert_eq!(next().await["type"], "ready");
    let r = exec("echo 1 > src/a.txt; echo 2 > src/deep/b.txt; mv src/a.txt src/c.txt; rm src/c.txt; echo 3 > outside.txt; touch src/done")
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    loop {
        let ev = next().await;
        let done = ev["path"] == "src/done";
        events.push(ev);
        if done {
            break;
        }
    }
    let saw = |change: &str, path: &str| {
        events
            .iter()
            .any(|e| e["type"] == "file" && e["change"] == change && e["path"] == path)
    };
    for (change, path) in [
        ("create", "src/a.txt"),
        ("write", "src/a.txt"),
        ("create", "src/deep/b.txt"),
        ("rename", "src/a.txt"),
        ("rename", "src/c.txt"),
        ("remove", "src/c.txt"),
    ] {
        assert!(saw(change, path), "{change} {path}: {events:?}");
    }
    assert!(!events.iter().any(|e| e["path"] == "outside.txt"));
    // Refusals are typed.
    let get = |q: &'static [(&'static str, &'static str)]| {
        http.get(format!("{base}/files:watch"))
            .query(q)
            .bearer_auth(token.clone())
            .send()
    };
    for (q, status, code) in [
        (&[("path", "../etc")][..], 400, "InvalidPath"),
        (&[("path", "nope")][..], 404, "NotFound"),
        (
            &[("path", "src"), ("recursive", "maybe")][..],
            400,
            "BadRequest",
        ),
    ] {
        let r = get(q).await.unwrap();
        assert_eq!(r.status(), status, "{q:?}");
        expect_error(r, status, code).await;
    }
}
