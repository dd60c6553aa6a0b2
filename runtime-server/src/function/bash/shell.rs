//! One warm Bash shell: a `bash` under a shim of its own that has sourced
//! the function's file once and serves calls, one at a time, by calling the
//! function in itself ([`SCRIPT`]). A call costs neither a `fork` (some
//! 300 µs of page-table copying for a `bash` on the 2-core bench machine)
//! nor the `exec`s of a shim and a `bash` and a re-read of the file.
//!
//! The server talks to the shell over a socket pair on the shell's stdin:
//! a request is the payload's length in bytes on a line, then the payload;
//! the answer is the call's exit status on a line. The call's stdout and
//! stderr are two FIFOs of this shell's own, which the server keeps open
//! for reading — and, so that they never read an end of file, for writing
//! too — as long as the shell lives; it reads both while the call runs and
//! what is left in them once the answer arrives.
//!
//! After the answer the server looks for processes the call left behind:
//! every process a call starts has a pid the kernel handed out between the
//! request and the answer ([`tree::PidWindow`]), so only those pids' `/proc`
//! entries are read (the whole table when the window spans too long a time
//! to rule out a wrap). A shell whose call left anything running, timed
//! out, overflowed its output or lost its caller is never reused: dropping
//! it kills its whole tree.

use std::os::fd::OwnedFd;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tokio::net::unix::pipe;

use super::super::{InvokeError, Spec, StartError, bounded};
use crate::contain::{Contained, Launch, Shim, tree};
use crate::logs;

/// The warm shell. `$1` is the file, `$2` the function, `$3` and `$4` the
/// call's stdout and stderr FIFOs: all data, never spliced into the script.
///
/// The loop is a read-only function defined before the file is sourced, so
/// neither the file's aliases nor a function of its own can change it, and
/// it calls builtins as `builtin` (a `read` or `cd` of the file's cannot
/// stand in). The file is sourced at the top level with the positional
/// parameters cleared, its stdout on stderr; exit status 97 means sourcing
/// failed, 98 that the function is missing. The shell options the file set
/// (`set -a`, `set -euo pipefail`, `set -x`) are saved: the loop runs
/// without them and each call with them, in the directory the file left.
/// The payload is read by the `read` builtin (never timed out by a
/// `TMOUT`), its exact byte length given (bytes whatever locale the file
/// set: `LC_ALL=C` for the read alone), into a variable that becomes the
/// function's single argument. The function runs in the shell itself, a
/// simple command (so `set -e` holds in it as in a script, and a failure
/// under it ends the shell with that status). When the server lets go of
/// the shell, it exits without running the file's `EXIT` trap.
pub const SCRIPT: &str = r#"readonly __krt_file=$1 __krt_fn=$2 __krt_out=$3 __krt_err=$4
__krt_serve() {
  builtin printf 'R %s\n' "$$" >&0
  while builtin true; do
    builtin set +aeuvx +o pipefail
    builtin cd -- "$__krt_home" || { builtin trap - EXIT; builtin exit 95; }
    TMOUT= IFS= builtin read -r __krt_len || { builtin trap - EXIT; builtin exit 0; }
    __krt_payload=
    if [[ $__krt_len != 0 ]]; then
      TMOUT= LC_ALL=C IFS= builtin read -r -N "$__krt_len" __krt_payload || { builtin trap - EXIT; builtin exit 96; }
    fi
    builtin set "${__krt_opts[@]}"
    "$__krt_fn" "$__krt_payload" </dev/null >"$__krt_out" 2>"$__krt_err"
    __krt_rc=$?
    builtin printf '%s\n' "$__krt_rc" >&0
  done
}
readonly -f __krt_serve
builtin set --
source "./$__krt_file" </dev/null >&2 || builtin exit 97
builtin declare -F -- "$__krt_fn" >/dev/null || builtin exit 98
__krt_opts=(+m)
for __krt_o in allexport errexit nounset verbose xtrace pipefail; do
  if [[ -o $__krt_o ]]; then __krt_opts+=(-o "$__krt_o"); fi
done
builtin readonly __krt_opts __krt_home=$PWD
__krt_serve"#;

/// A call's span beyond which its pid window is not trusted (a wrap of the
/// pid space cannot be ruled out): the whole process table is read instead.
const WINDOW_SPAN: Duration = Duration::from_millis(100);

/// How long a failed start waits for the rest of its stderr, and a dead
/// shell for its status.
const DRAIN: Duration = Duration::from_secs(1);

/// How a call ended.
#[derive(Debug)]
pub struct Ended {
    /// The function's exit status (`128 + N` for signal N).
    pub code: i32,
    /// Its stdout, within the bound.
    pub stdout: Vec<u8>,
    /// The end of its stderr.
    pub stderr: logs::Tail,
}

/// A started shell, idle between calls.
#[derive(Debug)]
pub struct Shell {
    tree: Contained,
    shim: i32,
    pid: i32,
    io: BufReader<UnixStream>,
    /// The read ends of the calls' stdout and stderr FIFOs, open as long
    /// as the shell: the shell's `>` on them never blocks.
    out: pipe::Receiver,
    err: pipe::Receiver,
    /// Write ends held as long as the shell, so the read ends never see an
    /// end of file between calls.
    _pins: [std::fs::File; 2],
    /// The calls' stderr, on its way to the Run's log.
    log: tokio::io::DuplexStream,
    paths: [PathBuf; 2],
    /// What the file's top level left running (pid and start time), which
    /// is the shell's, not a call's.
    baseline: Vec<(i32, u64)>,
    /// Set while a call runs, cleared only by a call that ended cleanly.
    broken: bool,
}

impl Drop for Shell {
    fn drop(&mut self) {
        self.tree.kill();
        remove(&self.paths);
    }
}

/// Removes a shell's FIFOs (gone already is fine).
fn remove(paths: &[PathBuf]) {
    for p in paths {
        let _ = std::fs::remove_file(p);
    }
}

/// Makes a FIFO only its owner may open.
fn mkfifo(path: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    nix::unistd::mkfifo(
        path,
        nix::sys::stat::Mode::S_IRUSR | nix::sys::stat::Mode::S_IWUSR,
    )?;
    Ok(())
}

/// Makes a FIFO and opens its read end, then a write end that keeps the
/// read end from ever seeing an end of file.
fn open_fifo(path: &Path) -> std::io::Result<(pipe::Receiver, std::fs::File)> {
    mkfifo(path)?;
    let rx = pipe::OpenOptions::new().open_receiver(path)?;
    let pin = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(nix::libc::O_NONBLOCK | nix::libc::O_CLOEXEC)
        .open(path)?;
    Ok((rx, pin))
}

/// Parses the shell's ready line, `R <pid>`.
fn parse_ready(line: &[u8]) -> Option<i32> {
    line.strip_suffix(b"\n")?
        .strip_prefix(b"R ")
        .and_then(|p| std::str::from_utf8(p).ok()?.parse().ok())
}

/// Parses an answer line: the exit status.
fn parse_answer(line: &[u8]) -> Option<i32> {
    std::str::from_utf8(line.strip_suffix(b"\n")?)
        .ok()?
        .parse()
        .ok()
}

/// Bytes read from a FIFO at a time.
const CHUNK: usize = 16 * 1024;

/// The most a pipe holds (`/proc/sys/fs/pipe-max-size` by default).
const PIPE_MAX: usize = 1024 * 1024;

/// Reads what a FIFO holds now, without waiting. Not `try_read`: that
/// trusts the reactor's last readiness event, which may not have caught up
/// with bytes written just before the answer arrived.
fn read_now(rx: &pipe::Receiver, buf: &mut [u8]) -> nix::Result<usize> {
    nix::unistd::read(rx, buf)
}

fn too_large(max_output: usize) -> InvokeError {
    InvokeError::InvalidOutput(format!("output exceeds the {max_output}-byte limit"))
}

impl Shell {
    /// Starts a shell: sources `file` in the working directory, checks it
    /// defines the function, and waits until it is ready for calls. `fifos`
    /// names this shell's FIFOs (`<fifos>.out`, `<fifos>.err`).
    pub async fn start(
        spec: &Spec,
        shim: &Shim,
        file: &str,
        fifos: &Path,
    ) -> Result<Self, StartError> {
        let paths = [fifos.with_extension("out"), fifos.with_extension("err")];
        let (ours, theirs) = std::os::unix::net::UnixStream::pair()?;
        ours.set_nonblocking(true)?;
        let opened = open_fifo(&paths[0]).and_then(|o| Ok((o, open_fifo(&paths[1])?)));
        let ((out, out_pin), (err, err_pin)) = match opened {
            Ok(o) => o,
            Err(e) => {
                remove(&paths);
                return Err(e.into());
            }
        };
        let argv = [
            "bash".to_owned(),
            "-c".into(),
            SCRIPT.into(),
            "krt-bash".into(),
            file.to_owned(),
            spec.handler.function.clone(),
            paths[0].to_string_lossy().into_owned(),
            paths[1].to_string_lossy().into_owned(),
        ];
        let spawned = shim.spawn(Launch {
            argv: &argv,
            cwd: &spec.workdir,
            env: &spec.env,
            grace: Duration::ZERO,
            stdio: [
                Stdio::from(OwnedFd::from(theirs)),
                Stdio::null(),
                Stdio::piped(),
            ],
            pass: None,
        });
        let mut tree = match spawned {
            Ok(t) => t,
            Err(e) => {
                remove(&paths);
                return Err(e.into());
            }
        };
        let tail = logs::Tail::default();
        // The shell's own stderr (the file's top level, its stdout too):
        // the Run's log, and the message of a failed start.
        let forwarder = tree.child().stderr.take().map(|stderr| {
            tokio::spawn(logs::forward(
                stderr,
                logs::Stream::Stderr,
                spec.run_uid.clone(),
                Some(tail.clone()),
            ))
        });
        let (log, log_rx) = tokio::io::duplex(CHUNK);
        tokio::spawn(logs::forward(
            log_rx,
            logs::Stream::Stderr,
            spec.run_uid.clone(),
            None,
        ));
        let shim_pid = tree.id().and_then(|p| i32::try_from(p).ok()).unwrap_or(0);
        let mut shell = Self {
            tree,
            shim: shim_pid,
            pid: 0,
            io: BufReader::new(UnixStream::from_std(ours)?),
            out,
            err,
            _pins: [out_pin, err_pin],
            log,
            paths,
            baseline: Vec::new(),
            broken: true,
        };
        let mut line = Vec::new();
        let read = shell.io.read_until(b'\n', &mut line);
        if tokio::time::timeout(spec.start_timeout, read)
            .await
            .is_err()
        {
            return Err(StartError::Timeout(spec.start_timeout));
        }
        if let Some(pid) = parse_ready(&line) {
            shell.pid = pid;
            shell.baseline = tree::descendants(&tree::snapshot(), shim_pid)
                .into_iter()
                .filter(|p| p.pid != pid && !p.dead)
                .map(|p| (p.pid, p.start))
                .collect();
            shell.broken = false;
            return Ok(shell);
        }
        // The shell exited before it was ready: its status says why.
        let status = tokio::time::timeout(DRAIN, shell.tree.wait()).await;
        if let Some(f) = forwarder {
            let _ = tokio::time::timeout(DRAIN, f).await;
        }
        let code = match status {
            Ok(Ok(s)) => s.code(),
            _ => None,
        };
        Err(match code {
            Some(98) => StartError::Load(format!(
                "{file} does not define function {}",
                spec.handler.function
            )),
            _ => StartError::Load(format!(
                "sourcing {file} failed ({}): {}",
                code.map_or_else(|| "killed".to_owned(), |c| format!("exit status {c}")),
                bounded(&tail.text(), logs::TAIL_BYTES)
            )),
        })
    }

    /// Whether the shell may serve another call: its last call ended
    /// cleanly, leaving nothing behind.
    pub fn reusable(&self) -> bool {
        !self.broken
    }

    /// Runs one call. Dropping the future leaves the shell broken (its
    /// owner drops it, which kills its tree).
    pub async fn call(&mut self, input: &[u8], max_output: usize) -> Result<Ended, InvokeError> {
        self.broken = true;
        let crashed = |e: std::io::Error| InvokeError::Crashed(e.to_string());
        let before = tree::last_pid();
        let started = Instant::now();
        let mut request = Vec::with_capacity(input.len() + 12);
        request.extend_from_slice(format!("{}\n", input.len()).as_bytes());
        request.extend_from_slice(input);
        self.io
            .get_mut()
            .write_all(&request)
            .await
            .map_err(crashed)?;

        let Self {
            io, out, err, log, ..
        } = self;
        let tail = logs::Tail::default();
        let mut stdout = Vec::new();
        let mut stderr = Vec::with_capacity(CHUNK);
        // `read_until` is cancel safe: a partial line stays in `line`.
        let mut line = Vec::new();
        let answer = loop {
            stdout.reserve(CHUNK);
            tokio::select! {
                read = io.read_until(b'\n', &mut line) => match read {
                    Ok(0) | Err(_) => break None,
                    Ok(_) => break Some(parse_answer(&line)),
                },
                read = out.read_buf(&mut stdout) => {
                    read.map_err(crashed)?;
                    if stdout.len() > max_output {
                        return Err(too_large(max_output));
                    }
                }
                read = err.read_buf(&mut stderr) => {
                    read.map_err(crashed)?;
                    tail.push(&stderr);
                    let _ = log.write_all(&stderr).await;
                    stderr.clear();
                }
            }
        };
        // The function has returned: what it wrote is in the pipes, at most
        // a pipe's capacity each; what a process it left behind writes
        // later is not the call's, and no such writer keeps the drain going.
        let mut chunk = [0u8; CHUNK];
        let mut drained = 0;
        while drained < PIPE_MAX {
            let Ok(n @ 1..) = read_now(out, &mut chunk) else {
                break;
            };
            drained += n;
            stdout.extend_from_slice(&chunk[..n]);
            if stdout.len() > max_output {
                return Err(too_large(max_output));
            }
        }
        drained = 0;
        while drained < PIPE_MAX {
            let Ok(n @ 1..) = read_now(err, &mut chunk) else {
                break;
            };
            drained += n;
            tail.push(&chunk[..n]);
            let _ = log.write_all(&chunk[..n]).await;
        }
        // Bytes after the answer line were not written by the loop: the
        // answer itself may not have been.
        let answer = answer.map(|a| a.filter(|_| io.buffer().is_empty()));
        let code = match answer {
            Some(Some(code)) => {
                if !self.left_behind(before, started) {
                    self.broken = false;
                } else {
                    // Whatever the call left running ends with it.
                    self.tree.kill();
                }
                code
            }
            Some(None) => {
                self.tree.kill();
                return Err(InvokeError::Crashed(
                    "the warm shell broke its protocol".into(),
                ));
            }
            // The function ended the shell (`exit`, a failure under
            // `set -e`, `kill $$`): its status is the call's.
            None => match tokio::time::timeout(DRAIN, self.tree.wait()).await {
                Ok(Ok(status)) => crate::contain::shim::exit_code(&status),
                _ => {
                    self.tree.kill();
                    return Err(InvokeError::Crashed("the warm shell went away".into()));
                }
            },
        };
        Ok(Ended {
            code,
            stdout,
            stderr: tail,
        })
    }

    /// Whether the last call left anything of its own behind in this
    /// shell's tree: a live process, or a zombie orphan (something of the
    /// call's got away from the shell before it ended). The pids handed out
    /// since the call began are read, then those handed out while they were
    /// read, until a reading hands out none — so a process that forked and
    /// exited between two readings cannot hide its child; when that does not
    /// settle, the call spanned too long a time to trust the window, or the
    /// kernel's counter cannot be read, the whole table is.
    fn left_behind(&self, before: Option<(i32, i32)>, started: Instant) -> bool {
        const ROUNDS: usize = 8;
        let Some((mut after, pid_max)) = before else {
            return self.holds_leftovers(&tree::snapshot());
        };
        let mut procs = vec![tree::Proc {
            pid: self.pid,
            ppid: self.shim,
            dead: false,
            start: 0,
        }];
        for _ in 0..ROUNDS {
            let Some((through, _)) = tree::last_pid() else {
                break;
            };
            let window = tree::PidWindow {
                after,
                through,
                pid_max,
            };
            if window.is_empty() {
                return self.holds_leftovers(&procs);
            }
            if started.elapsed() >= WINDOW_SPAN
                || window.len() >= usize::try_from(pid_max / 2).unwrap_or(0)
            {
                break;
            }
            procs.extend(window.pids().filter_map(tree::stat));
            after = through;
        }
        self.holds_leftovers(&tree::snapshot())
    }

    /// Whether `procs` hold a process of this shell's tree that is neither
    /// the shell nor one its file's top level started.
    fn holds_leftovers(&self, procs: &[tree::Proc]) -> bool {
        tree::descendants(procs, self.shim).iter().any(|p| {
            p.pid != self.pid
                && !self.baseline.contains(&(p.pid, p.start))
                && (!p.dead || p.ppid == self.shim)
        })
    }

    /// Whether the shell still runs (an idle shell can die: the OOM killer,
    /// a `kill` from elsewhere).
    pub fn alive(&mut self) -> bool {
        matches!(self.tree.child().try_wait(), Ok(None))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_and_answer_lines_parse_and_garbage_does_not() {
        assert_eq!(parse_ready(b"R 4242\n"), Some(4242));
        assert_eq!(parse_ready(b"R 4242"), None);
        assert_eq!(parse_ready(b"X 1\n"), None);
        assert_eq!(parse_ready(b"R \xff\n"), None);
        assert_eq!(parse_answer(b"0\n"), Some(0));
        assert_eq!(parse_answer(b"137\n"), Some(137));
        assert_eq!(parse_answer(b"nope\n"), None);
        assert_eq!(parse_answer(b""), None);
    }
}
