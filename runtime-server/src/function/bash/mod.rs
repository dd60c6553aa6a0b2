//! Bash functions: `file.function` calls `function`, defined by `file.sh` in
//! the Run's working directory, with the JSON payload as one argument. The
//! payload travels on a socket into a variable (read by the `read` builtin,
//! its exact byte length given), so it is never shell source and never hits
//! the kernel's per-argument size limit.
//!
//! A registration keeps warm shells ([`shell`]): each has sourced the file
//! once and calls the function in itself, one call at a time, so a call
//! costs neither a `fork` nor a new `bash`. What that means for a function
//! (docs/functions.md):
//! - globals, functions and traps a call sets persist into later calls the
//!   same shell serves (as a Python module's globals do); the working
//!   directory and the options `-aeuvx`/`pipefail` are reset before each;
//! - a call ends when the function returns: whatever it left running is
//!   killed, and the shell is replaced, not reused; so is one whose call
//!   timed out, overflowed its output, lost its caller, or ended the shell
//!   (`exit`, a failure under `set -e`);
//! - concurrent calls each get a shell of their own; up to [`MAX_IDLE`]
//!   stay warm between calls.

pub mod shell;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{InvokeError, Spec, StartError, bounded};
use crate::contain::Shim;
use crate::logs;
use shell::Shell;

/// Warm shells kept between calls.
pub const MAX_IDLE: usize = 4;

/// A registered Bash function.
#[derive(Debug, Clone)]
pub struct BashFunction {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    spec: Spec,
    shim: Shim,
    file: String,
    /// This registration's FIFOs, beside the working directory (never in
    /// it, where the function's `ls` would see them), its own.
    fifos: PathBuf,
    seq: AtomicU64,
    pool: Mutex<Pool>,
}

#[derive(Debug, Default)]
struct Pool {
    idle: Vec<Shell>,
    /// Shells serving a call now.
    busy: usize,
    /// Shells being started in the background.
    starting: usize,
    stopped: bool,
}

/// A call's claim on the pool: counted busy until it ends, however it ends.
struct Busy<'a>(&'a Inner);

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.pool().busy -= 1;
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.fifos);
    }
}

impl Inner {
    fn pool(&self) -> std::sync::MutexGuard<'_, Pool> {
        self.pool.lock().unwrap_or_else(|p| p.into_inner())
    }

    async fn start_shell(&self) -> Result<Shell, StartError> {
        let n = self.seq.fetch_add(1, Ordering::Relaxed);
        Shell::start(
            &self.spec,
            &self.shim,
            &self.file,
            &self.fifos.join(n.to_string()),
        )
        .await
    }

    /// Keeps `shell` warm if there is room and the registration runs.
    fn give_back(&self, shell: Shell) {
        let mut pool = self.pool();
        if !pool.stopped && pool.idle.len() < MAX_IDLE {
            pool.idle.push(shell);
        }
    }
}

impl BashFunction {
    /// Checks that the file exists beneath the working directory and
    /// defines the function, and keeps the shell that checked it warm.
    pub async fn start(spec: Spec, shim: Shim) -> Result<Self, StartError> {
        let file = format!("{}.sh", spec.handler.module);
        let path = spec.workdir.join(&file);
        match std::fs::symlink_metadata(&path) {
            Ok(md) if md.file_type().is_file() => {}
            Ok(_) => return Err(StartError::Load(format!("{file} is not a regular file"))),
            Err(_) => {
                return Err(StartError::Load(format!(
                    "{file} not found in the working directory"
                )));
            }
        }
        let name = spec
            .workdir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        // One directory per registration, never reused while the server
        // runs: a replaced registration's last shell may go after its
        // successor started, and must not take the successor's FIFOs along.
        static REGISTRATIONS: AtomicU64 = AtomicU64::new(0);
        let n = REGISTRATIONS.fetch_add(1, Ordering::Relaxed);
        let fifos = spec.workdir.with_file_name(format!(".{name}.bash-{n}"));
        std::fs::create_dir_all(&fifos)?;
        let inner = Arc::new(Inner {
            spec,
            shim,
            file,
            fifos,
            seq: AtomicU64::new(0),
            pool: Mutex::new(Pool::default()),
        });
        let first = inner.start_shell().await?;
        inner.give_back(first);
        Ok(Self { inner })
    }

    /// Whether a warm shell waits for calls or serves one.
    pub fn worker_running(&self) -> bool {
        let pool = self.inner.pool();
        !pool.idle.is_empty() || pool.busy > 0
    }

    /// Kills the warm shells; a shell serving a call is killed when the
    /// call is dropped (the registry drops calls it stops), never kept.
    pub fn stop(&self) {
        let idle = {
            let mut pool = self.inner.pool();
            pool.stopped = true;
            std::mem::take(&mut pool.idle)
        };
        drop(idle);
        let _ = std::fs::remove_dir_all(&self.inner.fifos);
    }

    /// Starts a shell in the background when none is warm, so the call after
    /// one whose shell was dropped finds one ready.
    fn refill(&self) {
        {
            let mut pool = self.inner.pool();
            if pool.stopped || !pool.idle.is_empty() || pool.starting > 0 {
                return;
            }
            pool.starting += 1;
        }
        let inner = self.inner.clone();
        tokio::spawn(async move {
            if inner.pool().stopped {
                inner.pool().starting -= 1;
                return;
            }
            let started = inner.start_shell().await;
            inner.pool().starting -= 1;
            match started {
                Ok(shell) => inner.give_back(shell),
                Err(e) => tracing::warn!(
                    run_uid = %inner.spec.run_uid,
                    error = %e,
                    "could not start a warm Bash shell"
                ),
            }
        });
    }

    /// Runs the function once. Dropping the future kills the shell serving
    /// it, and whatever the function started.
    pub async fn invoke(
        &self,
        input: &[u8],
        timeout: Duration,
        max_output: usize,
    ) -> Result<Vec<u8>, InvokeError> {
        let (mut slot, _busy) = {
            let mut pool = self.inner.pool();
            if pool.stopped {
                return Err(InvokeError::Stopped);
            }
            // An idle shell may have died meanwhile; dropping it is enough.
            let mut idle = None;
            while let Some(mut shell) = pool.idle.pop() {
                if shell.alive() {
                    idle = Some(shell);
                    break;
                }
            }
            pool.busy += 1;
            (idle, Busy(&self.inner))
        };
        let run =
            async {
                let shell =
                    match &mut slot {
                        Some(shell) => shell,
                        None => slot.insert(self.inner.start_shell().await.map_err(|e| {
                            InvokeError::Crashed(format!("start a warm shell: {e}"))
                        })?),
                    };
                shell.call(input, max_output).await
            };
        let ended = tokio::time::timeout(timeout, run).await;
        match slot {
            Some(shell) if shell.reusable() => self.inner.give_back(shell),
            other => {
                drop(other);
                self.refill();
            }
        }
        let ended = match ended {
            Err(_) => return Err(InvokeError::timeout(timeout)),
            Ok(r) => r?,
        };
        if ended.code != 0 {
            let code = format!("exit status {}", ended.code);
            let detail = ended.stderr.text();
            let spec = &self.inner.spec;
            let message = if detail.is_empty() {
                format!(
                    "{}.{} failed with {code}",
                    spec.handler.module, spec.handler.function
                )
            } else {
                format!(
                    "{}.{} failed with {code}: {}",
                    spec.handler.module,
                    spec.handler.function,
                    bounded(&detail, logs::TAIL_BYTES)
                )
            };
            return Err(InvokeError::Function {
                kind: "ExitStatus".into(),
                message,
            });
        }
        Ok(to_json(ended.stdout))
    }
}

/// Stdout that is JSON passes through; anything else becomes a JSON string
/// (without the trailing newline).
fn to_json(mut out: Vec<u8>) -> Vec<u8> {
    if serde_json::from_slice::<serde::de::IgnoredAny>(&out).is_ok() {
        while out.last().is_some_and(u8::is_ascii_whitespace) {
            out.pop();
        }
        return out;
    }
    let text = String::from_utf8_lossy(&out);
    let text = text.strip_suffix('\n').unwrap_or(&text);
    serde_json::to_vec(text).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_stdout_passes_through_and_text_is_quoted() {
        assert_eq!(to_json(b"{\"a\":1}\n".to_vec()), b"{\"a\":1}");
        assert_eq!(to_json(b"hello X\n".to_vec()), b"\"hello X\"");
        assert_eq!(to_json(b"".to_vec()), b"\"\"");
    }
}
