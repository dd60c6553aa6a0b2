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

/// Removes `run_uid`'s log (and its rotated part) from the server's per-Run
/// log directory.
pub fn remove_run_log(run_uid: &str) {
    remove_run_log_in(None, run_uid);
}

/// Removes `run_uid`'s log (and its rotated part) from `dir` (`None`: the
/// server's per-Run log directory).
pub fn remove_run_log_in(dir: Option<&Path>, run_uid: &str) {
    let dir = dir.or_else(|| RUN_LOGS.get().map(PathBuf::as_path));
    if let Some(path) = dir.and_then(|d| run_log(d, run_uid)) {
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

/// The last bytes a process wrote to one stream: [`TAIL_BYTES`] by
/// default ([`Tail::with_capacity`] for a task's result).
#[derive(Debug, Clone)]
pub struct Tail(Arc<Mutex<TailBuf>>);

#[derive(Debug)]
struct TailBuf {
    bytes: VecDeque<u8>,
    capacity: usize,
    dropped: bool,
}

impl Default for Tail {
    fn default() -> Self {
        Self::with_capacity(TAIL_BYTES)
    }
}

impl Tail {
    /// A tail keeping the last `capacity` bytes.
    pub fn with_capacity(capacity: usize) -> Self {
        Self(Arc::new(Mutex::new(TailBuf {
            bytes: VecDeque::with_capacity(capacity.min(64 * 1024)),
            capacity,
            dropped: false,
        })))
    }

    /// Appends bytes, keeping the last `capacity`.
    pub fn push(&self, line: &[u8]) {
        let mut t = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let skip = line.len().saturating_sub(t.capacity);
        t.dropped |= skip > 0;
        t.bytes.extend(&line[skip..]);
        let excess = t.bytes.len().saturating_sub(t.capacity);
        t.dropped |= excess > 0;
        t.bytes.drain(..excess);
    }

    /// The tail as (lossy) text, trimmed.
    pub fn text(&self) -> String {
        self.utf8().0.trim().to_owned()
    }

    /// The tail as text, and whether earlier bytes were dropped. A
    /// character cut by the bound is left out whole; bytes that are not
    /// UTF-8 become U+FFFD.
    pub fn utf8(&self) -> (String, bool) {
        let t = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let bytes: Vec<u8> = t.bytes.iter().copied().collect();
        // Continuation bytes at the start belong to a character whose
        // first byte was dropped (at most three of them).
        let start = if t.dropped {
            bytes
                .iter()
                .take(3)
                .take_while(|b| (**b & 0b1100_0000) == 0b1000_0000)
                .count()
        } else {
            0
        };
        (
            String::from_utf8_lossy(&bytes[start..]).into_owned(),
            t.dropped,
        )
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

/// One stream of a process as its Run's log receives it: bytes in as they
/// come, one record per line (lines longer than the bound are split), the
/// log opened on the first line and rotated like every Run's log.
pub struct StreamLog {
    dir: Option<PathBuf>,
    run_uid: String,
    stream: Stream,
    line: Vec<u8>,
    writer: Option<RunLogWriter>,
    opened: bool,
}

impl StreamLog {
    /// The log of `run_uid`'s `stream` in `dir` (`None`: the server's
    /// per-Run log directory, if it has one).
    pub fn new(dir: Option<&Path>, run_uid: &str, stream: Stream) -> Self {
        Self {
            dir: dir
                .or_else(|| RUN_LOGS.get().map(PathBuf::as_path))
                .map(Path::to_path_buf),
            run_uid: run_uid.to_owned(),
            stream,
            line: Vec::new(),
            writer: None,
            opened: false,
        }
    }

    /// Logs the complete lines of `bytes`, keeping a partial last line.
    pub fn push(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let room = MAX_LINE as usize - self.line.len();
            let end = bytes[..bytes.len().min(room)]
                .iter()
                .position(|b| *b == b'\n')
                .map(|i| i + 1);
            match end {
                Some(n) => {
                    self.line.extend_from_slice(&bytes[..n]);
                    bytes = &bytes[n..];
                    self.flush();
                }
                None if bytes.len() >= room => {
                    self.line.extend_from_slice(&bytes[..room]);
                    bytes = &bytes[room..];
                    self.flush();
                }
                None => {
                    self.line.extend_from_slice(bytes);
                    bytes = &[];
                }
            }
        }
    }

    /// Logs what is left of the last line.
    pub fn finish(&mut self) {
        if !self.line.is_empty() {
            self.flush();
        }
    }

    fn flush(&mut self) {
        let text = String::from_utf8_lossy(&self.line).into_owned();
        self.line.clear();
        if !self.opened {
            self.opened = true;
            self.writer = self
                .dir
                .as_deref()
                .and_then(|d| run_log(d, &self.run_uid))
                .and_then(|p| RunLogWriter::open(p, MAX_RUN_LOG).ok());
        }
        let (Some(w), Some(rec)) = (
            self.writer.as_mut(),
            record(
                &self.run_uid,
                self.stream,
                text.trim_end_matches(['\n', '\r']),
            ),
        ) else {
            return;
        };
        if let Err(e) = w.write(&rec) {
            tracing::warn!(run_uid = %self.run_uid, error = %e, "could not write the Run's log");
        }
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
    fn a_tail_keeps_the_last_bytes_and_never_half_a_character() {
        let t = Tail::with_capacity(8);
        t.push(b"abc");
        assert_eq!(t.utf8(), ("abc".to_owned(), false));
        // "é" is two bytes: cut in the middle, it is left out whole.
        t.push("xyzé1234".as_bytes());
        let (text, dropped) = t.utf8();
        assert!(dropped);
        assert_eq!(text, "yzé1234");
        t.push("€€€".as_bytes());
        assert_eq!(t.utf8().0, "€€");
        // A push larger than the tail keeps its end.
        t.push(&[b'q'; 100]);
        assert_eq!(t.utf8().0, "q".repeat(8));
        let bad = Tail::with_capacity(4);
        bad.push(&[0xff, b'a']);
        assert_eq!(bad.utf8(), ("\u{fffd}a".to_owned(), false));
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
