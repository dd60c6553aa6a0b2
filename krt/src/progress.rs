//! What krt shows while it waits (`krt up` for its first Runs, `krt wait`,
//! `krt session create`): on a terminal one line redrawn with a spinner,
//! otherwise a plain line on stderr each time it changes — never silence.

use std::io::IsTerminal as _;

/// The progress line of one wait.
pub struct Progress {
    tty: bool,
    last: String,
    frame: usize,
    drawn: bool,
}

impl Progress {
    /// A progress line on stderr.
    pub fn new() -> Self {
        Self {
            tty: std::io::stderr().is_terminal(),
            last: String::new(),
            frame: 0,
            drawn: false,
        }
    }

    /// Shows `line`: redrawn with the next spinner frame on a terminal,
    /// printed once per change otherwise.
    pub fn show(&mut self, line: String) {
        if self.tty {
            const FRAMES: [char; 4] = ['|', '/', '-', '\\'];
            self.frame = (self.frame + 1) % FRAMES.len();
            let shown: String = line.chars().take(160).collect();
            eprint!("\r\x1b[2K{} {shown}", FRAMES[self.frame]);
            self.drawn = true;
        } else if line != self.last {
            eprintln!("{line}");
        }
        self.last = line;
    }

    /// Clears the line on a terminal once the wait is over (when dropped).
    fn finish(&mut self) {
        if self.drawn {
            eprint!("\r\x1b[2K");
            self.drawn = false;
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}
