//! Bash functions: `file.function` sources `file.sh` from the Run's working
//! directory and calls `function` with the JSON payload as one argument. The
//! payload travels on stdin into a variable (read by the `read` builtin, its
//! exact byte length given), so it is never shell source and never hits the
//! kernel's per-argument size limit.

//!
//! Every call runs under a shim of its own: when the call ends, times out
//! or its caller goes away, whatever the function started is killed with
//! it.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{InvokeError, Spec, StartError, bounded};
use crate::contain::{Contained, Launch, Shim};
use crate::logs;

/// Validates that sourcing the file defines the function. `$1` is the file,
/// `$2` the function: both are data, never spliced into the script.
const VALIDATE: &str =
    r#"source "./$1" </dev/null >&2 || exit 97; declare -F -- "$2" >/dev/null || exit 98"#;

/// Calls the function with stdin as its single argument; its own stdin is
/// empty, its stdout is the output. `$3` is the payload's length in bytes:
/// the `read` builtin takes exactly that many (bytes, whatever locale the
/// file sets: `LC_ALL=C` for the read alone), trailing newlines included,
/// in 4 KiB reads and without a subshell or a `cat` process per call.
const INVOKE: &str = r#"source "./$1" </dev/null >&2 || exit 97; LC_ALL=C IFS= read -r -N "$3" __krt_payload || [ "$3" = 0 ] || exit 96; "$2" "$__krt_payload" </dev/null"#;

/// A registered Bash function.
#[derive(Debug)]
pub struct BashFunction {
    spec: Spec,
    shim: Shim,
    file: String,
}

impl BashFunction {
    /// Runs `script` with `$1` the file, `$2` the function and `$3`
    /// `payload_len`.
    fn spawn(
        &self,
        script: &str,
        payload_len: usize,
        stdio: [Stdio; 3],
    ) -> std::io::Result<Contained> {
        let argv = [
            "bash".to_owned(),
            "-c".into(),
            script.into(),
            "krt-bash".into(),
            self.file.clone(),
            self.spec.handler.function.clone(),
            payload_len.to_string(),
        ];
        self.shim.spawn(Launch {
            argv: &argv,
            cwd: &self.spec.workdir,
            env: &self.spec.env,
            grace: Duration::ZERO,
            stdio,
        })
    }

    /// Checks that the file exists beneath the working directory and defines
    /// the function.
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
        let f = Self { spec, shim, file };
        let mut tree = f.spawn(VALIDATE, 0, [Stdio::null(), Stdio::null(), Stdio::piped()])?;
        let tail = logs::Tail::default();
        if let Some(stderr) = tree.child().stderr.take() {
            tokio::spawn(logs::forward(
                stderr,
                f.spec.run_uid.clone(),
                Some(tail.clone()),
            ));
        }
        let status = match tokio::time::timeout(f.spec.start_timeout, tree.wait()).await {
            Ok(s) => s?,
            Err(_) => {
                tree.kill_and_wait().await;
                return Err(StartError::Timeout(f.spec.start_timeout));
            }
        };
        match status.code() {
            Some(0) => Ok(f),
            Some(98) => Err(StartError::Load(format!(
                "{} does not define function {}",
                f.file, f.spec.handler.function
            ))),
            _ => Err(StartError::Load(format!(
                "sourcing {} failed ({status}): {}",
                f.file,
                bounded(&tail.text(), logs::TAIL_BYTES)
            ))),
        }
    }

    /// Runs the function once. Dropping the future kills the call's tree.
    pub async fn invoke(
        &self,
        input: &[u8],
        timeout: Duration,
        max_output: usize,
    ) -> Result<Vec<u8>, InvokeError> {
        let mut tree = self
            .spawn(
                INVOKE,
                input.len(),
                [Stdio::piped(), Stdio::piped(), Stdio::piped()],
            )
            .map_err(|e| InvokeError::Crashed(e.to_string()))?;
        let child = tree.child();
        let tail = logs::Tail::default();
        let stderr_done = child.stderr.take().map(|stderr| {
            tokio::spawn(logs::forward(
                stderr,
                self.spec.run_uid.clone(),
                Some(tail.clone()),
            ))
        });
        let mut stdin = child.stdin.take();
        let mut stdout = child.stdout.take();
        let input = input.to_vec();
        let run = async {
            let feed = async {
                if let Some(mut s) = stdin.take() {
                    // The function may exit without reading: a broken pipe is fine.
                    let _ = s.write_all(&input).await;
                }
            };
            let collect = async {
                let mut out = Vec::new();
                if let Some(s) = stdout.as_mut() {
                    s.take(max_output as u64 + 1).read_to_end(&mut out).await?;
                }
                Ok::<_, std::io::Error>(out)
            };
            let ((), out) = tokio::join!(feed, collect);
            let out = out?;
            if out.len() > max_output {
                return Ok((None, out));
            }
            let status = tree.wait().await?;
            Ok::<_, std::io::Error>((Some(status), out))
        };
        let result = tokio::time::timeout(timeout, run).await;
        // Whatever the function left running ends with the call.
        tree.kill_and_wait().await;
        let (status, out) = match result {
            Err(_) => return Err(InvokeError::Timeout(timeout)),
            Ok(Err(e)) => return Err(InvokeError::Crashed(e.to_string())),
            Ok(Ok((None, _))) => {
                return Err(InvokeError::OutputTooLarge(format!(
                    "output exceeds the {max_output}-byte limit"
                )));
            }
            Ok(Ok((Some(status), out))) => (status, out),
        };
        if !status.success() {
            // The message quotes stderr's tail: let the forwarder drain it.
            if let Some(done) = stderr_done {
                let _ = tokio::time::timeout(Duration::from_secs(1), done).await;
            }
            let code = status
                .code()
                .map_or_else(|| status.to_string(), |c| format!("exit status {c}"));
            let detail = tail.text();
            let message = if detail.is_empty() {
                format!(
                    "{}.{} failed with {code}",
                    self.spec.handler.module, self.spec.handler.function
                )
            } else {
                format!(
                    "{}.{} failed with {code}: {}",
                    self.spec.handler.module,
                    self.spec.handler.function,
                    bounded(&detail, logs::TAIL_BYTES)
                )
            };
            return Err(InvokeError::Function {
                kind: "ExitStatus".into(),
                message,
            });
        }
        Ok(to_json(out))
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
