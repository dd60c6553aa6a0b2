//! The Runs the end-to-end tests start stacks with: a Python and a Bash
//! handler, their Run manifests, and a stack over them.

// Test helpers panic on failure: that is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::{Options, Stack, function_run, krt_binary};

/// A Python handler that greets, reports its pid, raises, sleeps, prints or
/// returns a `set` (not JSON) on request; `{"started": FILE}` writes its pid to FILE in the Run's work
/// directory first, so a test can wait for a call to be running.
pub const PY: &str = r#"import os, time

def invoke(request):
    if request.get("started"):
        with open(request["started"], "w") as f:
            f.write(str(os.getpid()))
    if request.get("raise"):
        raise ValueError("bad " + str(request["raise"]))
    if request.get("sleep"):
        time.sleep(request["sleep"])
    if request.get("set"):
        return {"tags": {1, 2}}
    if request.get("print"):
        print(request["print"])
    return {"message": "hello " + request.get("name", "world"), "pid": os.getpid()}
"#;

/// A Python handler that does not load (`SyntaxError: expected ':'`): its
/// Run ends `Failed` (`RegistrationFailed`).
pub const BROKEN_PY: &str = "def invoke(request)\n    return request\n";

/// A Bash handler that greets.
pub const SH: &str = r#"greet() {
  local name
  name=$(printf '%s' "$1" | sed -n 's/.*"name"[[:space:]]*:[[:space:]]*"\([^"]*\)".*/\1/p')
  printf '{"message": "hello %s"}\n' "${name:-world}"
}
"#;

/// A Python function Run `name` of [`PY`], as (file name, manifest).
pub fn python_run(name: &str) -> (String, String) {
    (
        format!("{name}.yaml"),
        function_run(name, "python", "main.invoke", "main.py", PY, ""),
    )
}

/// [`python_run`] with `extra` appended to its `function` fields.
pub fn python_run_with(name: &str, extra: &str) -> (String, String) {
    (
        format!("{name}.yaml"),
        function_run(name, "python", "main.invoke", "main.py", PY, extra),
    )
}

/// A Python function Run `name` of [`BROKEN_PY`], as (file name, manifest).
pub fn broken_python_run(name: &str) -> (String, String) {
    (
        format!("{name}.yaml"),
        function_run(name, "python", "main.invoke", "main.py", BROKEN_PY, ""),
    )
}

/// A Bash function Run `name` of [`SH`], as (file name, manifest).
pub fn bash_run(name: &str) -> (String, String) {
    (
        format!("{name}.yaml"),
        function_run(name, "bash", "hello.greet", "hello.sh", SH, ""),
    )
}

/// Starts `krt up` (the binary [`krt_binary`] finds) with a fixed set of
/// `runtimed` runtimed processes, `runs` (file name, manifest) and
/// `extra_args`.
pub fn start(runtimed: usize, runs: Vec<(String, String)>, extra_args: &[&str]) -> Stack {
    Stack::start(
        krt_binary(),
        Options {
            env: Vec::new(),
            runtimed,
            max_runtimed: None,
            runs,
            extra_args: extra_args.iter().map(|s| s.to_string()).collect(),
        },
    )
    .expect("start the embedded stack")
}
