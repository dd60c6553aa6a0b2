//! User processes' stderr — handler prints and tracebacks, text derived
//! from payloads — goes to a bounded log of its Run's own
//! (`RUN_LOGS/<uid>.log`, JSON lines, rotated once to `<uid>.log.1` at
//! [`MAX_RUN_LOG`] bytes, removed with the Run's registration), never into
//! the server's log or runtimed's; with no per-Run log directory, nowhere.
//! Lines are bounded, and a short tail is kept for error messages.

use std::collections::VecDeque;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, BufReader};

/// A Run's log is rotated (once: `.log.1`) when it reaches this size.
pub const MAX_RUN_LOG: u64 = 1024 * 1024;

static RUN_LOGS: OnceLock<PathBuf> = OnceLock::new();

/// Sets the directory of the per-Run logs (once, at start-up).
pub fn set_run_logs(dir: PathBuf) {
    let _ = RUN_LOGS.set(dir);
}

/// The log file of `run_uid` under `dir`, if the UID is a plain name.
pub fn run_log(dir: &Path, run_uid: &str) -> Option<PathBuf> {
    let plain = !run_uid.is_empty()
        && run_uid.len() <= 64
        && run_uid
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-');
    plain.then(|| dir.join(format!("{run_uid}.log")))
}

/// Removes `run_uid`'s log (and its rotated part).
pub fn remove_run_log(run_uid: &str) {
    if let Some(path) = RUN_LOGS.get().and_then(|d| run_log(d, run_uid)) {
        let _ = std::fs::remove_file(path.with_extension("log.1"));
        let _ = std::fs::remove_file(path);
    }
}

/// One stream's open handle on a Run's log: opened once, its size kept
/// here, so a line costs one write (a reopen only to rotate).
struct RunLogWriter {
    path: PathBuf,
    file: std::fs::File,
    size: u64,
    max: u64,
}

impl RunLogWriter {
    fn open(path: PathBuf, max: u64) -> std::io::Result<Self> {
        use std::os::unix::fs::OpenOptionsExt;
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&path)?;
        let size = file.metadata()?.len();
        Ok(Self {
            path,
            file,
            size,
            max,
        })
    }

    /// Appends `line`, first rotating the log to `.log.1` at `max` bytes.
    fn write(&mut self, line: &str) -> std::io::Result<()> {
        if self.size >= self.max {
            std::fs::rename(&self.path, self.path.with_extension("log.1"))?;
            *self = Self::open(std::mem::take(&mut self.path), self.max)?;
        }
        self.file.write_all(line.as_bytes())?;
        self.size += line.len() as u64;
        Ok(())
    }
}

/// Which of a user process's outputs a line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// Its stdout (a Python handler's `print()`).
    Stdout,
    /// Its stderr (tracebacks, a shell's diagnostics).
    Stderr,
}

impl Stream {
    fn as_str(self) -> &'static str {
        match self {
            Self::Stdout => "stdout",
            Self::Stderr => "stderr",
        }
    }
}

fn record(run_uid: &str, stream: Stream, text: &str) -> Option<String> {
    let now = time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .ok()?;
    let mut v = serde_json::json!({"timestamp": now, "stream": stream.as_str(), "line": text});
    v["run_uid"] = run_uid.into();
    Some(format!("{v}\n"))
}

/// Longest logged line; longer lines are split.
const MAX_LINE: u64 = 8 * 1024;
/// Bytes of stderr kept for the error message of a failed Bash call.
pub const TAIL_BYTES: usize = 512;

/// The last bytes a process wrote to stderr.
#[derive(Debug, Clone, Default)]
pub struct Tail(Arc<Mutex<VecDeque<u8>>>);

impl Tail {
    /// Appends bytes, keeping the last [`TAIL_BYTES`].
    pub fn push(&self, line: &[u8]) {
        let mut t = self.0.lock().unwrap_or_else(|p| p.into_inner());
        t.extend(line);
        let excess = t.len().saturating_sub(TAIL_BYTES);
        t.drain(..excess);
    }

    /// The tail as (lossy) text, trimmed.
    pub fn text(&self) -> String {
        let t = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let bytes: Vec<u8> = t.iter().copied().collect();
        String::from_utf8_lossy(&bytes).trim().to_owned()
    }
}

/// The Run UID a process's output is logged under; a spare worker gets its
/// Run only when it is assigned.
#[derive(Debug, Clone, Default)]
pub struct Label(Arc<Mutex<String>>);

impl Label {
    /// A label naming `run_uid`.
    pub fn new(run_uid: &str) -> Self {
        Self(Arc::new(Mutex::new(run_uid.to_owned())))
    }

    /// Renames the label.
    pub fn set(&self, run_uid: &str) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = run_uid.to_owned();
    }

    fn get(&self) -> String {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl From<String> for Label {
    fn from(s: String) -> Self {
        Self(Arc::new(Mutex::new(s)))
    }
}

/// Reads `output` (the process's `stream`) to its end, logging each line
/// with the Run UID.
pub async fn forward<R: AsyncRead + Unpin>(
    output: R,
    stream: Stream,
    label: impl Into<Label>,
    tail: Option<Tail>,
) {
    let label = label.into();
    let mut reader = BufReader::new(output);
    let mut line = Vec::new();
    // The log of the Run the label names now (a spare is labelled late).
    let mut log: Option<(String, RunLogWriter)> = None;
    loop {
        line.clear();
        match (&mut reader)
            .take(MAX_LINE)
            .read_until(b'\n', &mut line)
            .await
        {
            Ok(0) | Err(_) => return,
            Ok(_) => {
                if let Some(t) = &tail {
                    t.push(&line);
                }
                let text = String::from_utf8_lossy(&line);
                let uid = label.get();
                let (Some(dir), Some(rec)) =
                    (RUN_LOGS.get(), record(&uid, stream, text.trim_end()))
                else {
                    continue;
                };
                if log.as_ref().is_none_or(|(u, _)| *u != uid) {
                    log = run_log(dir, &uid)
                        .and_then(|p| RunLogWriter::open(p, MAX_RUN_LOG).ok())
                        .map(|w| (uid.clone(), w));
                }
                if let Some((_, w)) = log.as_mut()
                    && let Err(e) = w.write(&rec)
                {
                    tracing::warn!(run_uid = %uid, error = %e, "could not write the Run's log");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_uids_name_a_log() {
        let d = Path::new("/logs");
        assert_eq!(
            run_log(d, "0b5c-41aa"),
            Some(PathBuf::from("/logs/0b5c-41aa.log"))
        );
        for bad in ["", "../x", "a/b", "a.b", &"x".repeat(65)] {
            assert_eq!(run_log(d, bad), None, "{bad}");
        }
    }

    #[test]
    fn a_runs_log_rotates_once_and_stays_bounded() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("u.log");
        let mut w = RunLogWriter::open(path.clone(), 1000).unwrap();
        for i in 0..200 {
            w.write(&format!("{i:0>99}\n")).unwrap();
        }
        let now = std::fs::metadata(&path).unwrap().len();
        let old = std::fs::metadata(path.with_extension("log.1"))
            .unwrap()
            .len();
        assert!(now <= 1000 && old <= 1100, "{now} {old}");
        let last = std::fs::read_to_string(&path).unwrap();
        assert!(last.ends_with(&format!("{:0>99}\n", 199)));
    }

    #[test]
    fn records_are_json_lines_with_a_timestamp() {
        let r = record("u-1", Stream::Stderr, "Traceback").unwrap();
        let v: serde_json::Value = serde_json::from_str(r.trim_end()).unwrap();
        assert_eq!(v["run_uid"], "u-1");
        assert_eq!(v["line"], "Traceback");
        assert_eq!(v["stream"], "stderr");
        assert!(v["timestamp"].as_str().unwrap().ends_with('Z'));
        let r = record("u-1", Stream::Stdout, "hello").unwrap();
        let v: serde_json::Value = serde_json::from_str(r.trim_end()).unwrap();
        assert_eq!(v["stream"], "stdout");
    }
}
