//! Forwarding user processes' stderr into the Runtime Server's own
//! structured logs (never runtimed's), bounded per line, keeping a short
//! tail for error messages.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, BufReader};

/// Longest logged line; longer lines are split.
const MAX_LINE: u64 = 8 * 1024;
/// Bytes of stderr kept for the error message of a failed Bash call.
pub const TAIL_BYTES: usize = 512;

/// The last bytes a process wrote to stderr.
#[derive(Debug, Clone, Default)]
pub struct Tail(Arc<Mutex<VecDeque<u8>>>);

impl Tail {
    fn push(&self, line: &[u8]) {
        let mut t = self.0.lock().unwrap_or_else(|p| p.into_inner());
        t.extend(line);
        while t.len() > TAIL_BYTES {
            t.pop_front();
        }
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

/// Reads `stream` to its end, logging each line with the Run UID.
pub async fn forward<R: AsyncRead + Unpin>(stream: R, label: impl Into<Label>, tail: Option<Tail>) {
    let label = label.into();
    let mut reader = BufReader::new(stream);
    let mut line = Vec::new();
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
                tracing::info!(run_uid = %label.get(), stream = "stderr", line = %text.trim_end(), "handler output");
            }
        }
    }
}
