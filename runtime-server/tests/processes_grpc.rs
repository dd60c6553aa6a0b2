//! Background processes of a session over the Unix socket, as runtimed
//! drives them: output replayed to every client that connects and then
//! followed, stdin, signals, terminals and their size, the bounds (the
//! ring, the running count) and a closed session leaving no process.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use kruntimes_proto::runtime::v1 as pb;
use kruntimes_testkit::{read_pids, wait_gone};
use tokio_stream::StreamExt;

fn start_req(argv: &[&str]) -> pb::StartProcessRequest {
    pb::StartProcessRequest {
        run_uid: UID.into(),
        argv: argv.iter().map(|a| a.to_string()).collect(),
        display: argv.join(" "),
        ..Default::default()
    }
}

async fn spawn(s: &mut Server, req: pb::StartProcessRequest) -> u32 {
    s.client
        .sessions
        .start_process(req)
        .await
        .unwrap()
        .into_inner()
        .pid
}

/// Everything a connect yields: (lost bytes, output by stream, exit code).
#[derive(Debug, Default)]
struct Seen {
    lost: u64,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    pty: Vec<u8>,
    exit: Option<Option<i32>>,
    last_offset: u64,
}

async fn connect(s: &mut Server, pid: u32) -> tonic::Streaming<pb::ProcessEvent> {
    s.client
        .sessions
        .connect_process(pb::ConnectProcessRequest {
            run_uid: UID.into(),
            pid,
        })
        .await
        .unwrap()
        .into_inner()
}

/// Reads until the exit, or until `until` holds for what was read.
async fn read_until(
    events: &mut tonic::Streaming<pb::ProcessEvent>,
    seen: &mut Seen,
    until: impl Fn(&Seen) -> bool,
) {
    while !until(seen) {
        let ev = tokio::time::timeout(WITHIN, events.next())
            .await
            .expect("no event in time");
        let Some(ev) = ev else { return };
        match ev.unwrap().event.unwrap() {
            pb::process_event::Event::Output(o) => {
                match pb::ProcessStream::try_from(o.stream).unwrap() {
                    pb::ProcessStream::Stdout => seen.stdout.extend(&o.data),
                    pb::ProcessStream::Stderr => seen.stderr.extend(&o.data),
                    _ => seen.pty.extend(&o.data),
                }
                assert!(o.offset > seen.last_offset, "offsets grow");
                seen.last_offset = o.offset;
            }
            pb::process_event::Event::Lost(l) => seen.lost += l.bytes,
            pb::process_event::Event::Exited(e) => {
                seen.exit = Some(e.exit_code);
                return;
            }
        }
    }
}

async fn to_exit(s: &mut Server, pid: u32) -> Seen {
    let mut events = connect(s, pid).await;
    let mut seen = Seen::default();
    read_until(&mut events, &mut seen, |s| s.exit.is_some()).await;
    assert!(seen.exit.is_some(), "the stream ends with the exit");
    seen
}

async fn input(s: &mut Server, pid: u32, data: &[u8], close: bool) -> Result<(), tonic::Status> {
    s.client
        .sessions
        .process_input(pb::ProcessInputRequest {
            run_uid: UID.into(),
            pid,
            data: data.to_vec(),
            close,
        })
        .await
        .map(|_| ())
}

async fn signal(s: &mut Server, pid: u32, sig: i32) -> Result<(), tonic::Status> {
    s.client
        .sessions
        .signal_process(pb::SignalProcessRequest {
            run_uid: UID.into(),
            pid,
            signal: sig,
        })
        .await
        .map(|_| ())
}

async fn list(s: &mut Server) -> Vec<pb::ProcessInfo> {
    s.client
        .sessions
        .list_processes(pb::ListProcessesRequest {
            run_uid: UID.into(),
            pid: 0,
        })
        .await
        .unwrap()
        .into_inner()
        .processes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_runs_on_without_clients_and_every_client_gets_its_whole_output() {
    let mut s = start().await;
    s.open().await;
    let pid = spawn(
        &mut s,
        start_req(&[
            "bash",
            "-c",
            "echo $GREETING; echo err >&2; read -t 2 x; echo done; exit 4",
        ]),
    )
    .await;
    // A client that leaves at once changes nothing.
    drop(connect(&mut s, pid).await);
    let first = to_exit(&mut s, pid).await;
    assert_eq!(first.stdout, b"hi\ndone\n");
    assert_eq!(first.stderr, b"err\n");
    assert_eq!((first.exit, first.lost), (Some(Some(4)), 0));
    // A client after the exit gets the same, then the exit at once.
    let again = to_exit(&mut s, pid).await;
    assert_eq!((again.stdout, again.exit), (first.stdout, first.exit));
    let listed = list(&mut s).await;
    let p = listed.iter().find(|p| p.pid == pid).unwrap();
    assert!(!p.running && p.exit_code == Some(4) && p.ended_at_ms >= p.started_at_ms);
    assert_eq!(
        p.display,
        "bash -c echo $GREETING; echo err >&2; read -t 2 x; echo done; exit 4"
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdin_is_written_closed_and_refused_once_closed() {
    let mut s = start().await;
    s.open().await;
    let pid = spawn(
        &mut s,
        pb::StartProcessRequest {
            stdin: true,
            ..start_req(&["cat"])
        },
    )
    .await;
    input(&mut s, pid, b"one\n", false).await.unwrap();
    input(&mut s, pid, b"two\n", true).await.unwrap();
    let e = input(&mut s, pid, b"three\n", false).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{e:?}");
    let seen = to_exit(&mut s, pid).await;
    assert_eq!(
        (seen.stdout, seen.exit),
        (b"one\ntwo\n".to_vec(), Some(Some(0)))
    );
    // Without `stdin` the process reads end of file, and input is refused.
    let pid = spawn(&mut s, start_req(&["bash", "-c", "cat; echo eof"])).await;
    let e = input(&mut s, pid, b"x", false).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition);
    assert_eq!(to_exit(&mut s, pid).await.stdout, b"eof\n");
    let e = input(&mut s, pid, b"x", false).await.unwrap_err();
    assert!(e.message().contains("ended"), "{e:?}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signals_reach_the_process_and_kill_ends_its_whole_tree() {
    let mut s = start().await;
    s.open().await;
    let pid = spawn(
        &mut s,
        start_req(&[
            "bash",
            "-c",
            "trap 'echo got INT; exit 3' INT; echo ready; while :; do sleep 0.1; done",
        ]),
    )
    .await;
    let mut events = connect(&mut s, pid).await;
    let mut seen = Seen::default();
    read_until(&mut events, &mut seen, |s| s.stdout.ends_with(b"ready\n")).await;
    signal(&mut s, pid, libc_signal("INT")).await.unwrap();
    read_until(&mut events, &mut seen, |s| s.exit.is_some()).await;
    assert_eq!(seen.stdout, b"ready\ngot INT\n");
    assert_eq!(seen.exit, Some(Some(3)));
    // A tree of processes, double forks included, all gone on SIGKILL.
    let tree = spawn(
        &mut s,
        start_req(&["bash", "-c", "setsid sleep 2991 & echo $! >> pids; (sleep 2992 & echo $! >> pids); echo $$ >> pids; sleep 2993"]),
    )
    .await;
    let pids = read_pids(&s.workspace().join("pids"), 3, WITHIN)
        .await
        .unwrap();
    signal(&mut s, tree, libc_signal("KILL")).await.unwrap();
    assert_eq!(to_exit(&mut s, tree).await.exit, Some(Some(137)));
    assert_eq!(wait_gone(&pids, WITHIN).await, Vec::<i32>::new());
    // Signals that are not for processes, and ended processes, are refused.
    let e = signal(&mut s, tree, libc_signal("KILL")).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition);
    let e = signal(&mut s, pid, 99).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    let unknown = signal(&mut s, 1, libc_signal("INT")).await.unwrap_err();
    assert_eq!(unknown.code(), tonic::Code::NotFound);
    s.stop().await;
}

fn libc_signal(name: &str) -> i32 {
    match name {
        "INT" => 2,
        "KILL" => 9,
        "TERM" => 15,
        _ => unreachable!(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminal_has_its_size_job_control_and_takes_a_resize() {
    let mut s = start().await;
    s.open().await;
    let pid = spawn(
        &mut s,
        pb::StartProcessRequest {
            pty: Some(pb::PtySize { rows: 24, cols: 80 }),
            ..start_req(&[
                "bash",
                "-c",
                "tty; stty size; echo $TERM; read x; stty size; echo \"got $x\"",
            ])
        },
    )
    .await;
    let mut events = connect(&mut s, pid).await;
    let mut seen = Seen::default();
    read_until(&mut events, &mut seen, |s| {
        String::from_utf8_lossy(&s.pty).contains("xterm-256color")
    })
    .await;
    let text = String::from_utf8_lossy(&seen.pty).into_owned();
    assert!(text.contains("/dev/pts/"), "{text}");
    assert!(text.contains("24 80"), "{text}");
    s.client
        .sessions
        .resize_process(pb::ResizeProcessRequest {
            run_uid: UID.into(),
            pid,
            size: Some(pb::PtySize {
                rows: 40,
                cols: 120,
            }),
        })
        .await
        .unwrap();
    input(&mut s, pid, b"keys\r", false).await.unwrap();
    read_until(&mut events, &mut seen, |s| s.exit.is_some()).await;
    let text = String::from_utf8_lossy(&seen.pty).into_owned();
    assert!(text.contains("40 120"), "{text}");
    assert!(text.contains("got keys"), "{text}");
    assert_eq!(seen.exit, Some(Some(0)));
    // A process without a terminal cannot be resized; sizes are bounded.
    let plain = spawn(&mut s, start_req(&["sleep", "30"])).await;
    for (size, code) in [
        (
            pb::PtySize { rows: 10, cols: 10 },
            tonic::Code::FailedPrecondition,
        ),
        (
            pb::PtySize { rows: 0, cols: 10 },
            tonic::Code::InvalidArgument,
        ),
        (
            pb::PtySize {
                rows: 10,
                cols: 1001,
            },
            tonic::Code::InvalidArgument,
        ),
    ] {
        let e = s
            .client
            .sessions
            .resize_process(pb::ResizeProcessRequest {
                run_uid: UID.into(),
                pid: plain,
                size: Some(size),
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), code, "{e:?}");
    }
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_keeps_the_last_mib_and_tells_a_late_client_what_it_lost() {
    let mut s = start().await;
    s.open().await;
    // 3 MiB and a marker, nobody connected.
    let pid = spawn(
        &mut s,
        start_req(&[
            "bash",
            "-c",
            "head -c 3145728 /dev/zero | tr '\\0' x; echo END",
        ]),
    )
    .await;
    while list(&mut s).await.iter().any(|p| p.pid == pid && p.running) {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let seen = to_exit(&mut s, pid).await;
    let written = 3 * 1024 * 1024 + 4;
    assert!(seen.stdout.len() <= 1024 * 1024, "{}", seen.stdout.len());
    assert_eq!(seen.lost + seen.stdout.len() as u64, written);
    assert_eq!(seen.last_offset, written);
    assert!(seen.stdout.ends_with(b"xEND\n"));
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn running_processes_are_bounded_and_a_closed_session_leaves_none() {
    let mut s = start().await;
    s.open().await;
    let mut started = Vec::new();
    for _ in 0..64 {
        started.push(
            spawn(
                &mut s,
                start_req(&["bash", "-c", "echo $$ >> pids; exec sleep 2990"]),
            )
            .await,
        );
    }
    let e = s
        .client
        .sessions
        .start_process(start_req(&["true"]))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{e:?}");
    let pids = read_pids(&s.workspace().join("pids"), 64, WITHIN)
        .await
        .unwrap();
    assert_eq!(list(&mut s).await.iter().filter(|p| p.running).count(), 64);
    // One ends: room for one more.
    signal(&mut s, started[0], libc_signal("TERM"))
        .await
        .unwrap();
    assert_eq!(to_exit(&mut s, started[0]).await.exit, Some(Some(143)));
    spawn(&mut s, start_req(&["true"])).await;
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
    assert_eq!(wait_gone(&pids, WITHIN).await, Vec::<i32>::new());
    s.stop().await;
}
