//! Artifacts over the Unix socket, as runtimed uses them: a task started
//! with `artifacts` finds an empty private directory beside (not in) its
//! working directory in `KRUNTIME_ARTIFACTS_DIR`; `CollectArtifacts` reads
//! back what it left, in byte order and in bounded chunks, and refuses by
//! name what cannot be an artifact or crosses a bound; the directory goes
//! with the task and comes back empty for each attempt. A session opened
//! with `artifacts` gets the same directory, named to every command it runs,
//! and loses it with the session. A function registered with `artifacts`
//! gets one for its invocations, read, emptied (`clear`, `discard`) and
//! removed with the registration.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::unix::fs::PermissionsExt;

use common::*;
use kruntimes_proto::runtime::v1 as pb;
use kruntimes_proto::runtime::{ARTIFACT_CHUNK_BYTES, ARTIFACTS_DIR_ENV};
use tokio_stream::StreamExt;

/// What a collection returned: each file's name, announced size and
/// content, the number of data chunks, and the refusal that ended it.
#[derive(Debug, Default)]
struct Collected {
    files: Vec<(String, u64, Vec<u8>)>,
    chunks: usize,
    refused: Option<pb::ArtifactRefused>,
}

impl Collected {
    fn names(&self) -> Vec<&str> {
        self.files.iter().map(|(n, _, _)| n.as_str()).collect()
    }

    /// The refusal's name and reason.
    fn refusal(&self) -> (&str, &str) {
        let r = self.refused.as_ref().expect("a refusal");
        (r.name.as_str(), r.reason.as_str())
    }
}

/// CollectArtifacts of [`UID`] is NOT_FOUND: the server holds no such Run.
async fn assert_not_held(client: &mut kruntimes_proto::runtime::Clients) {
    let gone = client
        .artifacts
        .collect_artifacts(request(0, 0))
        .await
        .unwrap_err();
    assert_eq!(gone.code(), tonic::Code::NotFound, "{}", gone.message());
}

fn request(max_files: u32, max_file_bytes: u64) -> pb::CollectArtifactsRequest {
    pb::CollectArtifactsRequest {
        run_uid: UID.into(),
        max_files,
        max_file_bytes,
        ..Default::default()
    }
}

async fn collect(s: &mut Server, req: pb::CollectArtifactsRequest) -> Collected {
    let mut stream = s
        .client
        .artifacts
        .collect_artifacts(req)
        .await
        .unwrap()
        .into_inner();
    let mut c = Collected::default();
    while let Some(chunk) = stream.next().await {
        assert!(c.refused.is_none(), "nothing follows a refusal");
        match chunk.unwrap().part.unwrap() {
            pb::artifact_chunk::Part::File(f) => {
                if let Some((name, size, data)) = c.files.last() {
                    assert_eq!(data.len() as u64, *size, "{name}");
                }
                c.files.push((f.name, f.size, Vec::new()));
            }
            pb::artifact_chunk::Part::Data(d) => {
                assert!(!d.is_empty() && d.len() <= ARTIFACT_CHUNK_BYTES);
                c.chunks += 1;
                c.files.last_mut().unwrap().2.extend_from_slice(&d);
            }
            pb::artifact_chunk::Part::Refused(r) => c.refused = Some(r),
        }
    }
    if c.refused.is_none()
        && let Some((name, size, data)) = c.files.last()
    {
        assert_eq!(data.len() as u64, *size, "{name}");
    }
    c
}

/// Starts a Bash task at `attempt` with an artifacts directory, runs
/// `script` to its end (exit 0) and answers its standard output.
async fn run_with_artifacts(s: &mut Server, attempt: u64, script: &str) -> String {
    let req = pb::StartTaskRequest {
        artifacts: true,
        ..inline(
            "bash",
            attempt,
            &format!("set -e\nd=\"${ARTIFACTS_DIR_ENV}\"\n{script}"),
        )
    };
    s.client.tasks.start_task(req).await.unwrap();
    // Its output is in the result's tail: a watch would see only what it
    // writes once the watch has begun.
    let (_, r) = watch(s, attempt, false).await;
    assert_eq!(r.exit_code, 0, "{}", r.stderr_tail);
    assert!(!r.stdout_truncated);
    r.stdout_tail
}

fn artifacts_dir(s: &Server) -> std::path::PathBuf {
    s.dir
        .path()
        .join("work")
        .canonicalize()
        .unwrap()
        .join(".artifacts")
        .join(UID)
}

/// The first `n` bytes of `seq 1 …`'s output.
fn numbers(n: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(n + 16);
    let mut i = 1u64;
    while v.len() < n {
        v.extend_from_slice(format!("{i}\n").as_bytes());
        i += 1;
    }
    v.truncate(n);
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tasks_artifacts_come_back_in_byte_order_with_their_bytes() {
    let mut s = start().await;
    let out = run_with_artifacts(
        &mut s,
        1,
        "echo \"$d\"\n\
         ls -A \"$d\" | wc -l\n\
         mkdir -p \"$d/reports/deep\" \"$d/empty/deeper\"\n\
         printf hello > \"$d/reports/a.txt\"\n\
         : > \"$d/empty.txt\"\n\
         seq 1 600000 | head -c 3145728 > \"$d/reports/deep/big.bin\"\n\
         printf B > \"$d/B\"\n",
    )
    .await;
    let mut lines = out.lines();
    let dir = std::path::PathBuf::from(lines.next().unwrap());
    // Absolute, private, empty at the start, beside the working directory.
    assert_eq!(dir, artifacts_dir(&s));
    assert_eq!(lines.next().unwrap().trim(), "0", "empty at the start");
    assert!(!dir.starts_with(s.workspace()), "{}", dir.display());
    assert!(!s.workspace().starts_with(&dir));
    let mode = std::fs::metadata(&dir).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700);

    let c = collect(&mut s, request(0, 0)).await;
    assert!(c.refused.is_none(), "{:?}", c.refused);
    assert_eq!(
        c.names(),
        ["B", "empty.txt", "reports/a.txt", "reports/deep/big.bin"]
    );
    let big = numbers(3 * 1024 * 1024);
    let expected: [(&str, &[u8]); 4] = [
        ("B", b"B"),
        ("empty.txt", b""),
        ("reports/a.txt", b"hello"),
        ("reports/deep/big.bin", &big),
    ];
    for ((name, size, data), (en, ed)) in c.files.iter().zip(expected) {
        assert_eq!((name.as_str(), *size), (en, ed.len() as u64));
        assert!(data == ed, "{name}: the bytes differ");
    }
    // 3 MiB in 1 MiB chunks, one for each small file, none for the empty.
    assert_eq!(c.chunks, 3 + 2);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_without_artifacts_has_no_directory_and_no_variable() {
    let mut s = start().await;
    s.client
        .tasks
        .start_task(inline(
            "bash",
            1,
            &format!("echo \"[${{{ARTIFACTS_DIR_ENV}-unset}}]\""),
        ))
        .await
        .unwrap();
    let (_, r) = watch(&mut s, 1, false).await;
    assert_eq!((r.exit_code, r.stdout_tail.as_str()), (0, "[unset]\n"));
    assert!(!artifacts_dir(&s).exists());
    let c = collect(&mut s, request(0, 0)).await;
    assert!(c.files.is_empty() && c.refused.is_none(), "{c:?}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_cannot_be_an_artifact_or_crosses_a_bound_is_refused_by_name() {
    let mut s = start().await;
    // Each case a new attempt: its directory starts empty again, whatever
    // the attempt before left.
    let cases: [(&str, pb::CollectArtifactsRequest, &str, &[&str]); 5] = [
        (
            "ln -s /etc/passwd \"$d/p\"",
            request(0, 0),
            "p",
            &["symbolic link", "/etc/passwd"],
        ),
        (
            "echo x > \"$d/a\"; ln \"$d/a\" \"$d/b\"",
            request(0, 0),
            "a",
            &["2 hard links"],
        ),
        ("mkfifo \"$d/pipe\"", request(0, 0), "pipe", &["FIFO"]),
        (
            "head -c 2000 /dev/zero > \"$d/big\"",
            request(0, 1000),
            "big",
            &["2000 bytes", "1000 bytes"],
        ),
        (
            "touch \"$d/1\" \"$d/2\" \"$d/3\"",
            request(2, 0),
            "",
            &["more than 2 files"],
        ),
    ];
    for (attempt, (script, req, name, reasons)) in (1..).zip(cases) {
        let listed = run_with_artifacts(&mut s, attempt, &format!("ls -A \"$d\"\n{script}")).await;
        assert_eq!(
            listed, "",
            "attempt {attempt} starts with an empty directory"
        );
        let c = collect(&mut s, req).await;
        let (n, reason) = c.refusal();
        assert_eq!(n, name, "{script}: {reason}");
        for r in reasons {
            assert!(reason.contains(r), "{script}: {reason}");
        }
    }
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_directory_goes_with_the_task() {
    let mut s = start().await;
    run_with_artifacts(&mut s, 1, "echo kept > \"$d/f\"").await;
    let dir = artifacts_dir(&s);
    assert!(dir.join("f").exists());
    let closed = s
        .client
        .tasks
        .close_task(pb::CloseTaskRequest {
            run_uid: UID.into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(closed.existed);
    assert!(!dir.exists() && !s.workspace().exists());
    // A Run the server does not hold, a malformed Run UID.
    assert_not_held(&mut s.client).await;
    let bad = s
        .client
        .artifacts
        .collect_artifacts(pb::CollectArtifactsRequest {
            run_uid: "../etc".into(),
            ..request(0, 0)
        })
        .await
        .unwrap_err();
    assert_eq!(
        bad.code(),
        tonic::Code::InvalidArgument,
        "{}",
        bad.message()
    );
    // Reset removes it too.
    run_with_artifacts(&mut s, 1, "echo again > \"$d/f\"").await;
    assert!(dir.join("f").exists());
    s.client.server.reset(pb::ResetRequest {}).await.unwrap();
    assert!(!dir.exists());
    s.stop().await;
}

/// Runs `script` in the session (`d` names its artifacts directory) to its
/// end (exit 0) and answers its standard output.
async fn in_session(s: &mut Server, script: &str) -> String {
    let events = s
        .shell(&format!("set -e\nd=\"${ARTIFACTS_DIR_ENV}\"\n{script}"))
        .await;
    let (_, r) = finish(events).await;
    let stderr = String::from_utf8_lossy(&r.stderr);
    assert_eq!(r.state, pb::CommandState::Succeeded as i32, "{stderr}");
    String::from_utf8(r.stdout).unwrap()
}

/// Runs `argv` (no shell) in the session with `env` on top of its own, to
/// its end (exit 0); its standard output.
async fn argv_in_session(s: &mut Server, argv: &[&str], env: &[(&str, &str)]) -> String {
    let events = s
        .client
        .sessions
        .run_command(pb::RunCommandRequest {
            run_uid: UID.into(),
            argv: argv.iter().map(|a| (*a).to_owned()).collect(),
            env: env
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            timeout_ms: 60_000,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let (_, r) = finish(events).await;
    let stderr = String::from_utf8_lossy(&r.stderr);
    assert_eq!(r.state, pb::CommandState::Succeeded as i32, "{stderr}");
    String::from_utf8(r.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sessions_commands_fill_its_artifacts_directory_and_they_come_back() {
    let mut s = start().await;
    s.open_at(1, true).await;
    let out = in_session(&mut s, "echo \"$d\"\nls -A \"$d\" | wc -l\n").await;
    let mut lines = out.lines();
    let dir = std::path::PathBuf::from(lines.next().unwrap());
    // Absolute, private, empty at the start, beside the workspace.
    assert_eq!(dir, artifacts_dir(&s));
    assert_eq!(lines.next().unwrap().trim(), "0", "empty at the start");
    assert!(!dir.starts_with(s.workspace()), "{}", dir.display());
    assert!(!s.workspace().starts_with(&dir));
    let mode = std::fs::metadata(&dir).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700);
    // Every command sees it, a shell's and a program's without one, and
    // the server's value wins over the command's own.
    let printed = argv_in_session(
        &mut s,
        &["printenv", ARTIFACTS_DIR_ENV],
        &[(ARTIFACTS_DIR_ENV, "/tmp/elsewhere")],
    )
    .await;
    assert_eq!(printed, format!("{}\n", dir.display()));
    in_session(
        &mut s,
        "mkdir -p \"$d/logs/deep\" \"$d/empty/deeper\"\nprintf hello > \"$d/logs/a.txt\"\n",
    )
    .await;
    in_session(
        &mut s,
        "seq 1 400000 | head -c 2097152 > \"$d/logs/deep/big.bin\"\n: > \"$d/none\"\n",
    )
    .await;
    // A program writes there too (a workspace file copied in); what stays
    // in the workspace is no artifact.
    std::fs::write(s.workspace().join("ws.txt"), b"hello").unwrap();
    let z = format!("{}/Z", dir.display());
    assert_eq!(
        argv_in_session(&mut s, &["cp", "ws.txt", &z], &[]).await,
        ""
    );

    let c = collect(&mut s, request(0, 0)).await;
    assert!(c.refused.is_none(), "{:?}", c.refused);
    assert_eq!(c.names(), ["Z", "logs/a.txt", "logs/deep/big.bin", "none"]);
    let big = numbers(2 * 1024 * 1024);
    let expected: [(&str, &[u8]); 4] = [
        ("Z", b"hello"),
        ("logs/a.txt", b"hello"),
        ("logs/deep/big.bin", &big),
        ("none", b""),
    ];
    for ((name, size, data), (en, ed)) in c.files.iter().zip(expected) {
        assert_eq!((name.as_str(), *size), (en, ed.len() as u64));
        assert!(data == ed, "{name}: the bytes differ");
    }
    // 2 MiB in 1 MiB chunks, one for each small file, none for the empty.
    assert_eq!(c.chunks, 2 + 2);

    // A new attempt starts with an empty directory again.
    s.open_at(2, true).await;
    assert_eq!(in_session(&mut s, "ls -A \"$d\"").await, "");
    let c = collect(&mut s, request(0, 0)).await;
    assert!(c.files.is_empty() && c.refused.is_none(), "{c:?}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_without_artifacts_has_no_directory_and_no_variable() {
    let mut s = start().await;
    // A directory an earlier attempt had goes with it.
    s.open_at(1, true).await;
    in_session(&mut s, "echo left > \"$d/f\"").await;
    assert!(artifacts_dir(&s).join("f").exists());
    s.open_at(2, false).await;
    let unset = format!("echo \"[${{{ARTIFACTS_DIR_ENV}-unset}}]\"");
    assert_eq!(in_session(&mut s, &unset).await, "[unset]\n");
    assert!(!artifacts_dir(&s).exists());
    // A session the server holds, with nothing to collect.
    let c = collect(&mut s, request(0, 0)).await;
    assert!(c.files.is_empty() && c.refused.is_none(), "{c:?}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_symbolic_link_in_a_sessions_directory_is_refused_by_name() {
    let mut s = start().await;
    s.open_at(1, true).await;
    in_session(&mut s, "echo ok > \"$d/a\"\nln -s /etc/passwd \"$d/p\"").await;
    let c = collect(&mut s, request(0, 0)).await;
    assert_eq!(c.names(), ["a"]);
    let (name, reason) = c.refusal();
    assert_eq!(name, "p", "{reason}");
    assert!(reason.contains("symbolic link"), "{reason}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_directory_goes_with_the_session() {
    let mut s = start().await;
    s.open_at(1, true).await;
    in_session(&mut s, "echo kept > \"$d/f\"").await;
    let dir = artifacts_dir(&s);
    assert!(dir.join("f").exists());
    let closed = s
        .client
        .sessions
        .close_session(pb::CloseSessionRequest {
            run_uid: UID.into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(closed.existed);
    assert!(!dir.exists() && !s.workspace().exists());
    assert_not_held(&mut s.client).await;
    // Reset removes it too.
    s.open_at(1, true).await;
    in_session(&mut s, "echo again > \"$d/f\"").await;
    assert!(dir.join("f").exists());
    s.client.server.reset(pb::ResetRequest {}).await.unwrap();
    assert!(!dir.exists() && !s.workspace().exists());
    s.stop().await;
}

/// A function registered with `artifacts` sees the directory in its
/// environment at every call; `CollectArtifacts` reads what a call left and
/// leaves it; with `clear` it empties it once read; with `discard` it only
/// empties it; the directory goes with the registration. Without
/// `artifacts` there is neither directory nor variable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_functions_directory_is_read_emptied_and_removed_with_it() {
    let mut s = start().await;
    let source = r#"import os

def invoke(request):
    d = os.environ.get("KRUNTIME_ARTIFACTS_DIR")
    found = sorted(os.listdir(d)) if d else None
    if d and request.get("write"):
        os.makedirs(os.path.join(d, "sub"), exist_ok=True)
        with open(os.path.join(d, "sub", request["write"]), "w") as f:
            f.write(request["write"])
    return {"dir": d, "found": found}
"#;
    let handle = s.register_with("python", "main.invoke", source, true).await;
    // The answer, checked to say whether the call left anything (it
    // writes on `write`).
    let call = |s: &mut Server, input: &'static str| {
        let req = Server::call(&handle, input.as_bytes(), 10_000);
        let mut functions = s.client.functions.clone();
        async move {
            let out = functions.invoke_function(req).await.unwrap().into_inner();
            assert_eq!(out.artifacts_left, input.contains("write"), "{input}");
            match out.outcome.unwrap() {
                pb::invoke_function_response::Outcome::Output(o) => {
                    serde_json::from_slice::<serde_json::Value>(&o).unwrap()
                }
                other => panic!("{other:?}"),
            }
        }
    };
    let dir = artifacts_dir(&s);
    let v = call(&mut s, r#"{"write": "a"}"#).await;
    assert_eq!(v["dir"], dir.display().to_string(), "{v}");
    assert_eq!(v["found"], serde_json::json!([]));
    assert_eq!(
        std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777,
        0o700
    );
    // Read, and left as it was.
    let c = collect(&mut s, request(0, 0)).await;
    assert_eq!(c.names(), ["sub/a"]);
    assert_eq!(collect(&mut s, request(0, 0)).await.names(), ["sub/a"]);
    // Read, then emptied: the directory stays.
    let c = collect(
        &mut s,
        pb::CollectArtifactsRequest {
            clear: true,
            ..request(0, 0)
        },
    )
    .await;
    assert_eq!(c.names(), ["sub/a"]);
    assert!(dir.is_dir());
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
    // Discarded: nothing sent, emptied.
    call(&mut s, r#"{"write": "b"}"#).await;
    let c = collect(
        &mut s,
        pb::CollectArtifactsRequest {
            clear: true,
            discard: true,
            ..request(0, 0)
        },
    )
    .await;
    assert!(c.files.is_empty() && c.refused.is_none(), "{c:?}");
    let left: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "{left:?}");
    assert_eq!(call(&mut s, "{}").await["found"], serde_json::json!([]));
    // Gone with the registration, and not held any more.
    s.client
        .functions
        .unregister_function(pb::UnregisterFunctionRequest {
            run_uid: UID.into(),
            handle: handle.clone(),
        })
        .await
        .unwrap();
    assert!(!dir.exists());
    assert_not_held(&mut s.client).await;
    // Without `artifacts`: no variable, no directory, an empty collection.
    let plain = s.register(source).await;
    let req = Server::call(&plain, br#"{"write": "c"}"#, 10_000);
    let out = s
        .client
        .functions
        .invoke_function(req)
        .await
        .unwrap()
        .into_inner();
    let Some(pb::invoke_function_response::Outcome::Output(o)) = out.outcome else {
        panic!("{out:?}");
    };
    let v: serde_json::Value = serde_json::from_slice(&o).unwrap();
    assert_eq!(v["dir"], serde_json::Value::Null, "{v}");
    assert!(!dir.exists());
    let c = collect(&mut s, request(0, 0)).await;
    assert!(c.files.is_empty() && c.refused.is_none(), "{c:?}");
    s.stop().await;
}
