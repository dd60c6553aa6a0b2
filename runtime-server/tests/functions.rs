//! Function registrations with real Python and Bash processes: the worker
//! imports once, errors and crashes are reported, deadlines kill the whole
//! tree, and a caller that goes away never shifts the worker's replies.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use kruntimes_proto::runtime::v1 as pb;
use kruntimes_runtime_server::Error;
use kruntimes_runtime_server::contain::Shim;
use kruntimes_runtime_server::function::python::spare::SparePool;
use kruntimes_runtime_server::function::{Functions, Interpreter, InvokeError};
use kruntimes_runtime_server::validate;
use kruntimes_testkit::{read_pids, wait_gone};

const UID: &str = "0f0e0d0c-0000-4000-8000-000000000001";
const WITHIN: Duration = Duration::from_secs(20);

const PY: &str = r#"
import os, subprocess, time
def invoke(request):
    if request.get("raise"):
        raise ValueError("bad " + request["raise"])
    if request.get("spawn"):
        child = subprocess.Popen(["sleep", "2998"])
        with open("pids", "a") as f:
            f.write(f"{os.getpid()} {child.pid}\n")
    if request.get("crash"):
        os._exit(3)
    if request.get("sleep"):
        time.sleep(request["sleep"])
    if request.get("big"):
        return "x" * request["big"]
    if request.get("set"):
        return {"tags": {1, 2}}
    if request.get("nan"):
        return float("nan")
    print("to stderr, not the protocol")
    return {"who": request.get("who", "world"), "pid": os.getpid(), "home": os.environ.get("HOME"), "leak": os.environ.get("CARGO")}
"#;

const SH: &str = r#"
greet() { printf '{"got": %s}\n' "$1"; }
fail() { echo "boom" >&2; return 4; }
nap() { sleep 2999 & echo $! >> pids; echo $$ >> pids; wait; }
bytes() { LC_ALL=C; printf '{"len": %d, "tail": "%s"}' "${#1}" "$(printf '%s' "${1: -3}" | od -An -tx1 | tr -d ' \n')"; }
"#;

struct Fixture {
    dir: tempfile::TempDir,
    functions: Arc<Functions>,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let shim = Shim::new(env!("CARGO_BIN_EXE_runtime-server"), &[]);
    let root = dir.path().canonicalize().unwrap();
    let spares = SparePool::new(shim.clone(), "python3".into(), root.clone(), 1);
    let interpreter = Interpreter {
        shim,
        python: "python3".into(),
        spares: Some(spares),
    };
    Fixture {
        functions: Arc::new(Functions::new(root, interpreter)),
        dir,
    }
}

fn request(runtime: &str, attempt: u64, handler: &str, source: &str) -> validate::Register {
    validate::register(pb::RegisterFunctionRequest {
        run: Some(pb::RunRef {
            namespace: "default".into(),
            name: "hello".into(),
            uid: UID.into(),
            runtime: runtime.into(),
        }),
        attempt,
        handler: handler.into(),
        source: Some(pb::Source {
            inline: source.into(),
            path: String::new(),
        }),
        ..Default::default()
    })
    .unwrap()
}

impl Fixture {
    async fn register(&self, runtime: &str, handler: &str, source: &str) -> String {
        self.register_at(1, runtime, handler, source).await
    }

    /// Registers `attempt`, replacing a lower one.
    async fn register_at(
        &self,
        attempt: u64,
        runtime: &str,
        handler: &str,
        source: &str,
    ) -> String {
        self.functions
            .register(request(runtime, attempt, handler, source))
            .await
            .unwrap()
    }

    async fn call(
        &self,
        handle: &str,
        input: &str,
        timeout: Duration,
    ) -> Result<serde_json::Value, InvokeError> {
        self.functions
            .invoke(UID, handle, input.as_bytes().to_vec(), timeout, 1 << 20)
            .await
            .map(|out| serde_json::from_slice(&out).unwrap())
    }

    fn pids(&self) -> std::path::PathBuf {
        self.dir.path().join(UID).join("pids")
    }
}

const T: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worker_imports_once_serves_many_and_gets_only_its_environment() {
    let fx = fixture();
    let h = fx.register("python", "main.invoke", PY).await;
    let a = fx.call(&h, r#"{"who":"a"}"#, T).await.unwrap();
    let b = fx.call(&h, r#"{"who":"b"}"#, T).await.unwrap();
    assert_eq!(
        (a["who"].as_str(), b["who"].as_str()),
        (Some("a"), Some("b"))
    );
    assert_eq!(a["pid"], b["pid"], "the same warm worker serves both calls");
    assert_eq!(
        a["home"],
        fx.dir
            .path()
            .canonicalize()
            .unwrap()
            .join(UID)
            .display()
            .to_string()
    );
    assert!(
        a["leak"].is_null(),
        "the server's environment is not passed on"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abandoned_call_never_hands_its_reply_to_the_next_caller() {
    let fx = fixture();
    let h = fx.register("python", "main.invoke", PY).await;
    let functions = fx.functions.clone();
    let handle = h.clone();
    let abandoned = tokio::spawn(async move {
        functions
            .invoke(
                UID,
                &handle,
                br#"{"who":"alice","sleep":1.5}"#.to_vec(),
                T,
                1 << 20,
            )
            .await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    abandoned.abort();
    for who in ["bob", "carol"] {
        let out = fx
            .call(&h, &format!(r#"{{"who":"{who}"}}"#), T)
            .await
            .unwrap();
        assert_eq!(out["who"], who, "{who} gets its own answer");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_call_whose_caller_goes_away_takes_the_worker_tree_with_it() {
    let fx = fixture();
    let h = fx.register("python", "main.invoke", PY).await;
    let first = fx.call(&h, "{}", T).await.unwrap()["pid"].as_i64().unwrap();
    let functions = fx.functions.clone();
    let handle = h.clone();
    // Far from its deadline: only the caller's going away can end it.
    let call = tokio::spawn(async move {
        let input = br#"{"spawn":true,"sleep":3000}"#.to_vec();
        functions
            .invoke(UID, &handle, input, Duration::from_secs(3600), 1 << 20)
            .await
    });
    let pids = read_pids(&fx.pids(), 2, WITHIN).await.unwrap();
    assert_eq!(i64::from(pids[0]), first, "the warm worker took the call");
    call.abort();
    assert_eq!(wait_gone(&pids, WITHIN).await, Vec::<i32>::new());
    let out = fx.call(&h, r#"{"who":"bob"}"#, T).await.unwrap();
    assert_eq!(out["who"], "bob");
    assert_ne!(out["pid"].as_i64().unwrap(), first, "a fresh worker");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handler_errors_are_answers_and_the_worker_survives_them() {
    let fx = fixture();
    let h = fx.register("python", "main.invoke", PY).await;
    match fx.call(&h, r#"{"raise":"input"}"#, T).await {
        Err(InvokeError::Function { kind, message }) => {
            assert_eq!(
                (kind.as_str(), message.as_str()),
                ("ValueError", "bad input")
            );
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(fx.call(&h, "{}", T).await.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_kills_what_the_worker_started_and_the_next_call_gets_a_fresh_worker() {
    let fx = fixture();
    let h = fx.register("python", "main.invoke", PY).await;
    let first = fx.call(&h, "{}", T).await.unwrap();
    let err = fx
        .call(&h, r#"{"spawn":true,"crash":true}"#, T)
        .await
        .unwrap_err();
    assert!(
        matches!(err, InvokeError::Crashed(ref m) if m.contains("exit status: 3")),
        "{err:?}"
    );
    let pids = read_pids(&fx.pids(), 2, WITHIN).await.unwrap();
    assert_eq!(
        wait_gone(&pids, WITHIN).await,
        Vec::<i32>::new(),
        "worker and its child"
    );
    let after = fx.call(&h, "{}", T).await.unwrap();
    assert_ne!(first["pid"], after["pid"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadline_kills_the_worker_tree_and_the_next_call_is_served() {
    let fx = fixture();
    let h = fx.register("python", "main.invoke", PY).await;
    let err = fx
        .call(
            &h,
            r#"{"spawn":true,"sleep":30}"#,
            Duration::from_millis(800),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, InvokeError::Timeout(_)), "{err:?}");
    let pids = read_pids(&fx.pids(), 2, WITHIN).await.unwrap();
    assert_eq!(wait_gone(&pids, WITHIN).await, Vec::<i32>::new());
    assert!(fx.call(&h, "{}", T).await.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_over_the_bound_is_refused_and_the_worker_replaced() {
    let fx = fixture();
    let h = fx.register("python", "main.invoke", PY).await;
    let err = fx
        .functions
        .invoke(UID, &h, br#"{"big":5000}"#.to_vec(), T, 1000)
        .await
        .unwrap_err();
    assert!(matches!(err, InvokeError::InvalidOutput(_)), "{err:?}");
    assert!(fx.call(&h, "{}", T).await.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_return_value_json_cannot_hold_is_invalid_output_and_the_worker_stays() {
    let fx = fixture();
    let h = fx.register("python", "main.invoke", PY).await;
    let before = fx.call(&h, "{}", T).await.unwrap();
    for (input, why) in [
        (
            r#"{"set": true}"#,
            "TypeError: Object of type set is not JSON serializable",
        ),
        (r#"{"nan": true}"#, "ValueError: Out of range float values"),
    ] {
        let err = fx.call(&h, input, T).await.unwrap_err();
        let InvokeError::InvalidOutput(message) = &err else {
            panic!("{input}: {err:?}");
        };
        assert!(
            message.contains("not JSON-serializable") && message.contains(why),
            "{message}"
        );
    }
    // The handler returned: nothing to replace.
    let after = fx.call(&h, "{}", T).await.unwrap();
    assert_eq!(before["pid"], after["pid"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registrations_are_idempotent_by_attempt_replaced_by_higher_and_refuse_lower() {
    let fx = fixture();
    let h1 = fx
        .functions
        .register(request("python", 2, "main.invoke", PY))
        .await
        .unwrap();
    let again = fx
        .functions
        .register(request("python", 2, "main.invoke", PY))
        .await
        .unwrap();
    assert_eq!(h1, again);
    let stale = fx
        .functions
        .register(request("python", 1, "main.invoke", PY))
        .await;
    assert!(matches!(
        stale,
        Err(Error::Stale {
            requested: 1,
            current: 2
        })
    ));
    let h3 = fx
        .functions
        .register(request("python", 3, "main.invoke", PY))
        .await
        .unwrap();
    assert_ne!(h1, h3);
    assert!(
        matches!(
            fx.call(&h1, "{}", T).await,
            Err(InvokeError::NotRegistered(_))
        ),
        "the old handle reaches nothing"
    );
    assert!(fx.call(&h3, "{}", T).await.is_ok());
    assert!(
        !fx.functions.unregister(UID, &h1).await,
        "a stale handle unregisters nothing"
    );
    assert!(fx.functions.unregister(UID, &h3).await);
    assert!(
        !fx.dir.path().join(UID).exists(),
        "the working directory is removed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn import_errors_fail_the_registration() {
    let fx = fixture();
    let missing = fx
        .functions
        .register(request("python", 1, "main.nope", PY))
        .await;
    assert!(
        matches!(missing, Err(Error::Load(ref m)) if m.contains("AttributeError")),
        "{missing:?}"
    );
    let syntax = fx
        .functions
        .register(request("python", 1, "main.invoke", "def ("))
        .await;
    assert!(
        matches!(syntax, Err(Error::Load(ref m)) if m.contains("SyntaxError")),
        "{syntax:?}"
    );
    assert!(fx.functions.get(UID).is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bash_gets_the_payload_as_one_argument_never_as_source() {
    let fx = fixture();
    let h = fx.register("bash", "hello.greet", SH).await;
    let marker = fx.dir.path().join("pwned");
    let evil = format!(
        r#"{{"name":"$(touch {m}); `touch {m}`"}}"#,
        m = marker.display()
    );
    let out = fx.call(&h, &evil, T).await.unwrap();
    assert!(out["got"]["name"].as_str().unwrap().contains("$(touch"));
    assert!(!marker.exists(), "payload must never be evaluated");
    let missing = fx
        .functions
        .register(request("bash", 2, "hello.absent", SH))
        .await;
    assert!(
        matches!(missing, Err(Error::Load(ref m)) if m.contains("does not define")),
        "{missing:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bash_gets_the_exact_payload_bytes_whatever_the_locale() {
    let fx = fixture();
    // The file sets a multibyte locale: the payload is still read by bytes.
    let sh = format!("export LC_ALL=C.UTF-8\n{SH}");
    let h = fx.register("bash", "hello.bytes", &sh).await;
    for input in [
        // Multibyte text, backslashes, trailing newlines (JSON whitespace).
        "{\"n\": \"h\u{e9}llo \\\\ \\n\"}\n\n".to_owned(),
        // Larger than any pipe buffer or bash read chunk.
        format!("\"{}\"", "x".repeat(300_000)),
        "[1]".to_owned(),
    ] {
        let out = fx.call(&h, &input, T).await.unwrap();
        assert_eq!(out["len"], input.len(), "{}", &input[..input.len().min(40)]);
        let tail: String = input.as_bytes()[input.len() - 3..]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(out["tail"], tail);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bash_exit_status_is_a_function_error_quoting_stderr() {
    let fx = fixture();
    let h = fx.register("bash", "hello.fail", SH).await;
    match fx.call(&h, "{}", T).await {
        Err(InvokeError::Function { kind, message }) => {
            assert_eq!(kind, "ExitStatus");
            assert!(
                message.contains("exit status 4") && message.contains("boom"),
                "{message}"
            );
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bash_call_whose_caller_goes_away_leaves_nothing_running() {
    let fx = fixture();
    let h = fx.register("bash", "hello.nap", SH).await;
    let functions = fx.functions.clone();
    let call =
        tokio::spawn(async move { functions.invoke(UID, &h, b"{}".to_vec(), T, 1 << 20).await });
    let pids = read_pids(&fx.pids(), 2, WITHIN).await.unwrap();
    call.abort();
    assert_eq!(wait_gone(&pids, WITHIN).await, Vec::<i32>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unregistering_stops_a_call_in_flight_and_its_tree() {
    let fx = fixture();
    let h = fx.register("python", "main.invoke", PY).await;
    let functions = fx.functions.clone();
    let handle = h.clone();
    let call = tokio::spawn(async move {
        functions
            .invoke(
                UID,
                &handle,
                br#"{"spawn":true,"sleep":30}"#.to_vec(),
                T,
                1 << 20,
            )
            .await
    });
    let pids = read_pids(&fx.pids(), 2, WITHIN).await.unwrap();
    assert!(fx.functions.unregister(UID, &h).await);
    let err = call.await.unwrap().unwrap_err();
    assert!(matches!(err, InvokeError::Stopped), "{err:?}");
    assert_eq!(wait_gone(&pids, WITHIN).await, Vec::<i32>::new());
}

/// A file that sets strict options and state at its top level; the payload
/// (a JSON string) names what a call does.
const WARM: &str = r#"
set -euo pipefail
counter=0
state() {
    local before=$PWD opts=$-
    counter=$((counter + 1))
    cd /
    set +e
    trap 'echo "$BASHPID" >> "$OLDPWD/trapped"' EXIT
    printf '{"counter": %d, "shell": %d, "pwd": "%s", "opts": "%s"}' "$counter" "$$" "$before" "$opts"
}
strict() { false; echo unreachable; }
leave() {
    sleep 3001 &
    echo $! >> pids
    setsid sleep 3002 &
    echo $! >> pids
    echo $$ >> pids
}
# Past the span a pid window is trusted for: the whole table is read.
late_leave() { sleep 0.2; leave; }
suicide() { kill $$; }
slow() { sleep 0.5; printf '{"shell": %d}' "$$"; }
main() { "${1//\"/}"; }
"#;

impl Fixture {
    async fn register_warm(&self) -> String {
        let h = self.register("bash", "warm.main", WARM).await;
        assert!(self.functions.get(UID).unwrap().worker_running());
        h
    }
}

fn shell_of(out: &serde_json::Value) -> i32 {
    out["shell"]
        .as_i64()
        .unwrap_or_else(|| panic!("no shell in {out}")) as i32
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warm_bash_shell_keeps_globals_and_resets_directory_and_options() {
    let fx = fixture();
    let h = fx.register_warm().await;
    let workdir = fx.dir.path().canonicalize().unwrap().join(UID);
    let first = fx.call(&h, r#""state""#, T).await.unwrap();
    let second = fx.call(&h, r#""state""#, T).await.unwrap();
    assert_eq!(shell_of(&first), shell_of(&second), "one warm shell");
    // Globals live as long as the warm shell, like a Python module's...
    assert_eq!(
        (&first["counter"], &second["counter"]),
        (&1.into(), &2.into())
    );
    for out in [&first, &second] {
        // ...but each call starts in the directory the file left, with the
        // options the file set (`set +e` in one call does not reach the next).
        assert_eq!(out["pwd"], workdir.to_str().unwrap(), "{out}");
        assert!(out["opts"].as_str().unwrap().contains('e'), "{out}");
    }
    // An EXIT trap set in a call does not run as the call ends.
    assert!(!workdir.join("trapped").exists());
    // `set -e` from the file holds inside a call: the failure ends the shell
    // with its status, and the next call gets a fresh shell.
    let strict = fx.call(&h, r#""strict""#, T).await;
    assert!(
        matches!(strict, Err(InvokeError::Function { ref message, .. })
            if message.contains("exit status 1")),
        "{strict:?}"
    );
    let third = fx.call(&h, r#""state""#, T).await.unwrap();
    assert_eq!(third["counter"], 1);
    assert_ne!(shell_of(&third), shell_of(&first));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whatever_a_bash_call_leaves_running_dies_with_its_shell() {
    let fx = fixture();
    let h = fx.register_warm().await;
    for (round, call) in [r#""leave""#, r#""late_leave""#].into_iter().enumerate() {
        let before = shell_of(&fx.call(&h, r#""state""#, T).await.unwrap());
        assert_eq!(fx.call(&h, call, T).await.unwrap(), "");
        // A background job, a `setsid` escapee and the shell that ran them.
        let pids = read_pids(&fx.pids(), 3 * (round + 1), WITHIN)
            .await
            .unwrap();
        let pids = &pids[3 * round..];
        assert!(pids.contains(&before), "{pids:?}");
        assert_eq!(wait_gone(pids, WITHIN).await, Vec::<i32>::new());
        // The next call gets a fresh shell.
        let next = fx.call(&h, r#""state""#, T).await.unwrap();
        assert!(!pids.contains(&shell_of(&next)), "{pids:?} {next}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bash_function_that_kills_its_shell_fails_and_the_next_call_is_served() {
    let fx = fixture();
    let h = fx.register_warm().await;
    let err = fx.call(&h, r#""suicide""#, T).await.unwrap_err();
    assert!(
        matches!(err, InvokeError::Function { ref message, .. }
            if message.contains("exit status 143")),
        "{err:?}"
    );
    assert_eq!(fx.call(&h, r#""state""#, T).await.unwrap()["counter"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_bash_calls_each_get_a_shell_and_a_deadline_kills_only_its_own() {
    let fx = fixture();
    let h = fx.register_warm().await;
    let slow = r#""slow""#;
    let (a, b) = tokio::join!(fx.call(&h, slow, T), fx.call(&h, slow, T));
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_ne!(shell_of(&a), shell_of(&b), "two calls at once, two shells");
    let late = fx.call(&h, slow, Duration::from_millis(100)).await;
    assert!(matches!(late, Err(InvokeError::Timeout(_))), "{late:?}");
    let alive: Vec<i32> = wait_gone(&[shell_of(&a), shell_of(&b)], Duration::ZERO).await;
    assert!(
        !alive.is_empty(),
        "the shells that served in time stay warm"
    );
    fx.call(&h, slow, T).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bash_file_that_shadows_builtins_and_sets_ifs_still_gets_its_payload() {
    let fx = fixture();
    let sh = r#"
IFS=$'\n\t'
set -u
read() { return 7; }
cd() { return 7; }
echoarg() { builtin printf '%s' "$1"; }
early() { printf '{"early": true}'; exit 0; }
"#;
    let h = fx.register("bash", "odd.echoarg", sh).await;
    // Many calls: output written just before the answer is never lost.
    for _ in 0..50 {
        let out = fx.call(&h, r#"{"a": "b c", "d": [1]}"#, T).await.unwrap();
        assert_eq!(out, serde_json::json!({"a": "b c", "d": [1]}));
    }
    // `exit 0` ends the shell, not the call's success.
    let h = fx.register_at(2, "bash", "odd.early", sh).await;
    for _ in 0..2 {
        assert_eq!(fx.call(&h, "{}", T).await.unwrap()["early"], true);
    }
}

/// The FIFO directories of Bash registrations beside the working directories.
fn fifo_dirs(fx: &Fixture) -> Vec<String> {
    let mut dirs: Vec<String> = std::fs::read_dir(fx.dir.path())
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with(&format!(".{UID}.bash")))
        .collect();
    dirs.sort();
    dirs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replaced_bash_registration_never_takes_its_successors_fifos() {
    let fx = fixture();
    let old = fx.register_warm().await;
    // The old registration's shell goes in the background (a call that left
    // something behind), while its successor starts.
    assert_eq!(fx.call(&old, r#""leave""#, T).await.unwrap(), "");
    let new = fx.register_at(2, "bash", "warm.main", WARM).await;
    for _ in 0..20 {
        fx.call(&new, r#""state""#, T).await.unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let dirs = fifo_dirs(&fx);
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    assert!(fx.functions.unregister(UID, &new).await);
    assert_eq!(fifo_dirs(&fx), Vec::<String>::new());
}

/// A file whose top level keeps a process, exports everything and sets an
/// idle timeout and an EXIT trap.
const LIVELY: &str = r#"
set -a
TMOUT=1
sleep 3003 &
echo $! > "$PWD/../lively-top"
trap 'echo exited >> "$PWD/../lively-exit"' EXIT
shell() { sleep "${1//[^0-9.]/}"; printf '{"shell": %d}' "$$"; }
big() { /bin/true; printf '{"len": %d, "shell": %d}' "${#1}" "$$"; }
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warm_shell_outlives_idle_timeouts_and_keeps_what_its_file_started() {
    let fx = fixture();
    let h = fx.register("bash", "lively.shell", LIVELY).await;
    let first = shell_of(&fx.call(&h, "0", T).await.unwrap());
    // Longer than the file's TMOUT: the idle shell does not time out.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    // Longer than a trusted pid window: the whole table is read, and the
    // top level's `sleep` is the shell's, not the call's.
    let second = shell_of(&fx.call(&h, "0.2", T).await.unwrap());
    assert_eq!(first, second, "one warm shell served both");
    let top: i32 = std::fs::read_to_string(fx.dir.path().join("lively-top"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(wait_gone(&[top], Duration::ZERO).await, vec![top]);
    // `set -a` does not export the payload: a large one still reaches a
    // function that runs a program.
    let h = fx.register_at(2, "bash", "lively.big", LIVELY).await;
    let input = format!("\"{}\"", "x".repeat(200_000));
    assert_eq!(fx.call(&h, &input, T).await.unwrap()["len"], input.len());
    // Retiring the shells kills what the top level started, and never runs
    // the file's EXIT trap.
    assert!(fx.functions.unregister(UID, &h).await);
    assert_eq!(wait_gone(&[top], WITHIN).await, Vec::<i32>::new());
    assert!(!fx.dir.path().join("lively-exit").exists());
}
