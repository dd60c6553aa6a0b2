//! Staged inputs over the Unix socket, as runtimed uses them: `StageInputs`
//! writes a Run's files into a private staging directory beside the
//! working directories; `StartTask` or `OpenSession` with `inputs` moves
//! them into the fresh working directory, after the source, refusing one
//! that would replace it or an attempt nothing was staged for. Malformed
//! streams (escaping paths, short or long data) are INVALID_ARGUMENT naming
//! the path and leave nothing staged; a newer call replaces an older one;
//! closing the Run removes what was staged.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use kruntimes_proto::runtime::v1 as pb;
use pb::stage_chunk::Part;

const MIB: usize = 1024 * 1024;

fn target(attempt: u64) -> Part {
    Part::Target(pb::StageTarget {
        run_uid: UID.into(),
        attempt,
    })
}

fn header(path: &str, size: u64) -> Part {
    Part::File(pb::StagedFile {
        path: path.into(),
        size,
    })
}

/// A header for `content` at `path`, then its content in chunks of at
/// most `chunk` bytes.
fn file(path: &str, content: &[u8], chunk: usize) -> Vec<Part> {
    let mut parts = vec![header(path, content.len() as u64)];
    parts.extend(content.chunks(chunk).map(|c| Part::Data(c.to_vec())));
    parts
}

async fn stage(s: &mut Server, parts: Vec<Part>) -> Result<pb::StageInputsResponse, tonic::Status> {
    let chunks: Vec<pb::StageChunk> = parts
        .into_iter()
        .map(|p| pb::StageChunk { part: Some(p) })
        .collect();
    s.client
        .artifacts
        .stage_inputs(tokio_stream::iter(chunks))
        .await
        .map(tonic::Response::into_inner)
}

/// 3 MiB that are not all alike.
fn big() -> Vec<u8> {
    (0..3 * MIB).map(|i| (i % 251) as u8).collect()
}

/// The two files of most tests, staged for `attempt`.
fn two_files(attempt: u64) -> Vec<Part> {
    let mut parts = vec![target(attempt)];
    parts.extend(file("in/a.txt", b"hello\n", 4));
    parts.extend(file("big.bin", &big(), MIB));
    parts
}

fn staging(s: &Server) -> std::path::PathBuf {
    s.dir
        .path()
        .join("work")
        .canonicalize()
        .unwrap()
        .join(".inputs")
}

/// What is in the staging parent (sorted).
fn staged_names(s: &Server) -> Vec<String> {
    let mut names: Vec<String> = match std::fs::read_dir(staging(s)) {
        Ok(d) => d
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect(),
        Err(_) => Vec::new(),
    };
    names.sort();
    names
}

fn with_inputs(req: pb::StartTaskRequest) -> pb::StartTaskRequest {
    pb::StartTaskRequest {
        inputs: true,
        ..req
    }
}

/// Runs a Bash task at `attempt` with its inputs; its result.
async fn run_with_inputs(s: &mut Server, attempt: u64, script: &str) -> pb::TaskResult {
    s.client
        .tasks
        .start_task(with_inputs(inline("bash", attempt, script)))
        .await
        .unwrap();
    watch(s, attempt, false).await.1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_finds_its_staged_files_in_its_working_directory() {
    let mut s = start().await;
    let answer = stage(&mut s, two_files(1)).await.unwrap();
    assert_eq!(answer.files, 2);
    assert_eq!(answer.bytes, 6 + 3 * MIB as u64);
    assert_eq!(staged_names(&s), [UID]);
    let dir = staging(&s).join(UID);
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&dir).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o700);

    let expected = s.dir.path().join("expected.bin");
    std::fs::write(&expected, big()).unwrap();
    let r = run_with_inputs(
        &mut s,
        1,
        &format!(
            "set -e\ncat in/a.txt\ncmp big.bin {}\nls -A | sort | tr '\\n' ' '\n",
            expected.display()
        ),
    )
    .await;
    assert_eq!(r.exit_code, 0, "{}", r.stderr_tail);
    assert_eq!(r.stdout_tail, "hello\nbig.bin in main.sh ");
    // Moved, not copied: nothing stays staged.
    assert!(staged_names(&s).is_empty(), "{:?}", staged_names(&s));
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_finds_its_staged_files_in_its_workspace() {
    let mut s = start().await;
    stage(&mut s, two_files(2)).await.unwrap();
    s.client
        .sessions
        .open_session(pb::OpenSessionRequest {
            run: Some(pb::RunRef {
                namespace: "default".into(),
                name: "sandbox".into(),
                uid: UID.into(),
                runtime: "bash".into(),
            }),
            attempt: 2,
            inputs: true,
            ..Default::default()
        })
        .await
        .unwrap();
    let listed = s
        .client
        .sessions
        .list_files(pb::ListFilesRequest {
            run_uid: UID.into(),
            path: String::new(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let entries: Vec<(String, String, u64)> = listed
        .entries
        .into_iter()
        .map(|e| (e.name, e.r#type, e.size))
        .collect();
    assert_eq!(
        entries[0],
        ("big.bin".into(), "file".into(), 3 * MIB as u64)
    );
    assert_eq!(entries[1].0, "in");
    assert_eq!(entries[1].1, "directory");
    let read = s
        .client
        .sessions
        .read_file(pb::ReadFileRequest {
            run_uid: UID.into(),
            path: "in/a.txt".into(),
            max_bytes: 0,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(read.content, b"hello\n");
    assert!(staged_names(&s).is_empty());
    // Closing the session takes a later staging with it.
    stage(&mut s, two_files(3)).await.unwrap();
    s.client
        .sessions
        .close_session(pb::CloseSessionRequest {
            run_uid: UID.into(),
        })
        .await
        .unwrap();
    assert!(staged_names(&s).is_empty());
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_streams_are_invalid_and_leave_nothing_staged() {
    let mut s = start().await;
    // A good staging first: a failed one replaces it too.
    stage(&mut s, two_files(1)).await.unwrap();
    let cases: Vec<(Vec<Part>, &str)> = vec![
        (vec![target(1), header("../x", 0)], "../x"),
        (vec![target(1), header("/abs", 0)], "/abs"),
        (vec![target(1), header("a//b", 0)], "a//b"),
        (vec![target(1), header("./a", 0)], "./a"),
        (vec![target(1), header("", 0)], "empty"),
        (
            vec![
                target(1),
                header("short.txt", 10),
                Part::Data(b"12345".to_vec()),
            ],
            "short.txt",
        ),
        (
            vec![
                target(1),
                header("short.txt", 10),
                Part::Data(b"12345".to_vec()),
                header("next.txt", 0),
            ],
            "short.txt",
        ),
        (
            vec![
                target(1),
                header("long.txt", 3),
                Part::Data(b"12345".to_vec()),
            ],
            "long.txt",
        ),
        (
            vec![target(1), header("twice", 0), header("twice", 0)],
            "twice",
        ),
        (vec![target(1), header("f", 0), header("f/g", 0)], "f/g"),
        (vec![target(1), Part::Data(b"x".to_vec())], "before any"),
        (vec![header("a", 0)], "StageTarget"),
        (vec![target(1), target(1)], "StageTarget"),
        (
            vec![Part::Target(pb::StageTarget {
                run_uid: "NOT A UID".into(),
                attempt: 1,
            })],
            "run uid",
        ),
    ];
    for (parts, named) in cases {
        let e = stage(&mut s, parts).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{named}: {e:?}");
        assert!(e.message().contains(named), "{named}: {}", e.message());
        assert!(
            staged_names(&s).is_empty(),
            "{named}: {:?}",
            staged_names(&s)
        );
    }
    // Nothing outside the staging directory was written.
    assert!(!s.dir.path().join("work/x").exists());
    assert!(!std::path::Path::new("/abs").exists());
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starting_without_a_matching_staging_or_over_the_source_is_refused() {
    let mut s = start().await;
    // Nothing staged.
    let e = s
        .client
        .tasks
        .start_task(with_inputs(inline("bash", 1, "true")))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{e:?}");
    assert!(e.message().contains("no inputs"), "{}", e.message());

    // Staged for another attempt.
    stage(&mut s, two_files(1)).await.unwrap();
    let e = s
        .client
        .tasks
        .start_task(with_inputs(inline("bash", 2, "true")))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{e:?}");

    // A staged file where the source goes.
    let mut parts = vec![target(3)];
    parts.extend(file("data.txt", b"d", 1));
    parts.extend(file("main.sh", b"echo staged", 64));
    stage(&mut s, parts).await.unwrap();
    let e = s
        .client
        .tasks
        .start_task(with_inputs(inline("bash", 3, "echo source")))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{e:?}");
    assert!(e.message().contains("main.sh"), "{}", e.message());
    // Nothing was moved, nothing stays.
    assert!(!s.workspace().exists());
    assert!(staged_names(&s).is_empty(), "{:?}", staged_names(&s));
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_staging_replaces_the_older_and_closing_removes_it() {
    let mut s = start().await;
    stage(&mut s, two_files(1)).await.unwrap();
    let mut parts = vec![target(2)];
    parts.extend(file("b.txt", b"second", 2));
    let answer = stage(&mut s, parts).await.unwrap();
    assert_eq!((answer.files, answer.bytes), (1, 6));
    let r = run_with_inputs(&mut s, 2, "ls -A | sort | tr '\\n' ' '; cat b.txt").await;
    assert_eq!(r.exit_code, 0, "{}", r.stderr_tail);
    assert_eq!(r.stdout_tail, "b.txt main.sh second");

    // Staged, then the task closed before it started again: gone.
    stage(&mut s, two_files(3)).await.unwrap();
    assert_eq!(staged_names(&s), [UID]);
    s.client
        .tasks
        .close_task(pb::CloseTaskRequest {
            run_uid: UID.into(),
        })
        .await
        .unwrap();
    assert!(staged_names(&s).is_empty());
    let e = s
        .client
        .tasks
        .start_task(with_inputs(inline("bash", 3, "true")))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{e:?}");

    // A task started without inputs drops what was staged; so does Reset.
    stage(&mut s, two_files(4)).await.unwrap();
    let r = {
        s.client
            .tasks
            .start_task(inline("bash", 4, "ls -A | tr '\\n' ' '"))
            .await
            .unwrap();
        watch(&mut s, 4, false).await.1
    };
    assert_eq!(r.stdout_tail, "main.sh ");
    assert!(staged_names(&s).is_empty());
    stage(&mut s, two_files(5)).await.unwrap();
    s.client.server.reset(pb::ResetRequest {}).await.unwrap();
    assert!(staged_names(&s).is_empty());
    s.stop().await;
}
