//! A log writer for processes that log on their request path (the
//! gateway's access log): a line is copied into a shared buffer where it is
//! logged, and a thread of its own writes the buffer out every
//! [`FLUSH_EVERY`] while lines keep coming, or as soon as a batch's worth
//! ([`LogBuffer::flush_at`]) is waiting — one write for many lines, no
//! wake-up per line, and no system call on the logging thread but the one
//! wake-up per full batch. With nothing logged for a whole period the
//! writer blocks until a line comes: an idle process is not woken to find
//! the buffer empty, and only the line that ends such a pause wakes it.
//!
//! Bounded: past [`MAX_PENDING`] bytes waiting, new lines are dropped (a
//! flood must neither grow memory nor stall requests on a slow disk) and
//! counted ([`Dropped`]), and so are the lines of a batch the output
//! refused. A line reaches the output within about [`FLUSH_EVERY`]; a
//! process writes what is still pending with [`LogBuffer::flush_to`] before
//! it exits. Lines are never split: each `write` of the formatter is one
//! whole line.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// The longest a line waits to be written while lines keep coming (a full
/// batch is written sooner). Each batch costs the writer a wake-up (~50 µs
/// of CPU on the 2-core bench machine): every 100 ms that was ~2.7 µs per
/// request at 200 requests/s, ~2.5 % of the gateway's cost there; every
/// 20 ms, ~4 times as much (docs/benchmarks.md).
pub const FLUSH_EVERY: Duration = Duration::from_secs(1);
/// Bytes that may wait for the writer thread.
pub const MAX_PENDING: usize = 4 << 20;
/// The share of [`MAX_PENDING`] (or of a buffer's own bound) that wakes the
/// writer before its period is over: under a flood, batches go out as they
/// fill, long before lines would be dropped.
const FLUSH_AT_DIVISOR: usize = 8;

/// Lines dropped because the buffer was full or the output refused them,
/// for a metric.
#[derive(Debug, Clone, Default)]
pub struct Dropped(Arc<AtomicU64>);

impl Dropped {
    /// Lines dropped so far.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// The shared buffer; cloned into every event's writer.
#[derive(Debug, Clone)]
pub struct LogBuffer {
    shared: Arc<Shared>,
    max: usize,
    dropped: Dropped,
}

#[derive(Debug, Default)]
struct Shared {
    pending: Mutex<Pending>,
    /// Held while a batch is taken and written, so a final
    /// [`LogBuffer::flush_to`] writes after the batch the writer thread holds.
    output: Mutex<Output>,
    /// Signalled when a line lands while the writer is blocked.
    arrived: Condvar,
}

#[derive(Debug, Default)]
struct Pending {
    bytes: Vec<u8>,
    /// What the writer thread is doing, for whoever pushes a line.
    writer: Writer,
}

/// The writer thread, as [`LogBuffer::push`] sees it.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Writer {
    /// Awake (or not started): nobody signals it.
    #[default]
    Busy,
    /// Between batches, waiting for its period to end: only the line that
    /// fills a batch ([`LogBuffer::flush_at`]) wakes it, so logging a line
    /// costs no system call.
    Filling,
    /// Blocked on an empty buffer (it found a whole period without lines):
    /// the next line wakes it.
    Idle,
}

/// What the writing side remembers between batches.
#[derive(Debug, Default)]
struct Output {
    /// A write failed, maybe part-way through a line: the next batch starts
    /// on a line of its own.
    broken: bool,
}

impl LogBuffer {
    /// A buffer holding at most `max` pending bytes, not yet drained.
    pub fn new(max: usize) -> Self {
        Self {
            shared: Arc::default(),
            max,
            dropped: Dropped::default(),
        }
    }

    /// The dropped-lines counter.
    pub fn dropped(&self) -> Dropped {
        self.dropped.clone()
    }

    /// Pending bytes that wake a writer between batches: an eighth of the
    /// bound.
    pub fn flush_at(&self) -> usize {
        (self.max / FLUSH_AT_DIVISOR).max(1)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.shared
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Appends one whole line (ending in a newline), or drops it when the
    /// buffer is full. Wakes the writer only when it is blocked on an empty
    /// buffer, or waiting while this line fills a batch; once per wait.
    pub fn push(&self, line: &[u8]) {
        let mut p = self.lock();
        if p.bytes.len() + line.len() > self.max {
            self.dropped.0.fetch_add(1, Ordering::Relaxed);
            return;
        }
        p.bytes.extend_from_slice(line);
        let wake = match p.writer {
            Writer::Busy => false,
            Writer::Filling => p.bytes.len() >= self.flush_at(),
            Writer::Idle => true,
        };
        if wake {
            p.writer = Writer::Busy;
        }
        drop(p);
        if wake {
            self.shared.arrived.notify_one();
        }
    }

    /// Takes what is pending, leaving `spare` (emptied) in its place.
    fn take(&self, spare: &mut Vec<u8>) {
        spare.clear();
        std::mem::swap(&mut self.lock().bytes, spare);
    }

    /// Takes what is pending and writes it to `out`, after any batch the
    /// writer thread is writing: the last lines of a process that is about
    /// to exit. Lines `out` refuses are counted as dropped.
    pub fn flush_to(&self, out: &mut impl Write) -> std::io::Result<()> {
        let mut batch = Vec::new();
        self.write_batch(out, &mut batch)
    }

    /// One batch: takes what is pending into `batch` and writes it, under
    /// the output lock. A failed write counts the batch's lines as dropped.
    fn write_batch(&self, out: &mut impl Write, batch: &mut Vec<u8>) -> std::io::Result<()> {
        let mut output = self.shared.output.lock().unwrap_or_else(|e| e.into_inner());
        self.take(batch);
        if batch.is_empty() {
            return Ok(());
        }
        let mut write = || {
            if output.broken {
                out.write_all(b"\n")?;
            }
            out.write_all(batch)?;
            out.flush()
        };
        let written = write();
        output.broken = written.is_err();
        if written.is_err() {
            let lines = batch.iter().filter(|&&b| b == b'\n').count();
            self.dropped.0.fetch_add(lines as u64, Ordering::Relaxed);
        }
        written
    }

    /// Blocks until a line is pending.
    fn wait_for_line(&self) {
        let mut p = self.lock();
        while p.bytes.is_empty() {
            p.writer = Writer::Idle;
            p = self
                .shared
                .arrived
                .wait(p)
                .unwrap_or_else(|e| e.into_inner());
        }
        p.writer = Writer::Busy;
    }

    /// Waits `period`, or less once a batch's worth is pending.
    fn wait_for_batch(&self, period: Duration) {
        let deadline = Instant::now() + period;
        let mut p = self.lock();
        while p.bytes.len() < self.flush_at() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            p.writer = Writer::Filling;
            p = self
                .shared
                .arrived
                .wait_timeout(p, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        p.writer = Writer::Busy;
    }

    /// Writes pending lines to `out` on a thread of its own, forever: every
    /// `every` while lines keep coming, so a line waits at most about
    /// `every`, and sooner when a batch's worth is pending; after a period
    /// without lines the thread blocks until one comes.
    pub fn drain_to(
        &self,
        mut out: impl Write + Send + 'static,
        every: Duration,
    ) -> std::io::Result<()> {
        let buf = self.clone();
        std::thread::Builder::new()
            .name("log-writer".into())
            .spawn(move || {
                let mut batch = Vec::new();
                loop {
                    buf.wait_for_line();
                    // Under load: one wake-up per period or per full batch.
                    loop {
                        // Let the batch fill: one write for every line of it.
                        buf.wait_for_batch(every);
                        // Nowhere to report a failing stderr: its lines are
                        // counted as dropped.
                        let _ = buf.write_batch(&mut out, &mut batch);
                        if batch.is_empty() {
                            break;
                        }
                    }
                }
            })
            .map(drop)
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogBuffer {
    type Writer = LineWriter<'a>;

    fn make_writer(&'a self) -> Self::Writer {
        LineWriter { buf: self }
    }
}

/// The writer of one event: the formatter writes the whole line at once.
pub struct LineWriter<'a> {
    buf: &'a LogBuffer,
}

impl Write for LineWriter<'_> {
    fn write(&mut self, line: &[u8]) -> std::io::Result<usize> {
        self.buf.push(line);
        Ok(line.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_kept_whole_in_order_and_dropped_past_the_bound() {
        let buf = LogBuffer::new(10);
        buf.push(b"one\n");
        buf.push(b"two\n");
        buf.push(b"three\n"); // 8 + 6 > 10: dropped whole
        buf.push(b"x\n");
        assert_eq!(buf.dropped().get(), 1);
        let mut out = Vec::new();
        buf.take(&mut out);
        assert_eq!(out, b"one\ntwo\nx\n");
        // Room again once drained.
        buf.push(b"three\n");
        buf.take(&mut out);
        assert_eq!(out, b"three\n");
        assert_eq!(buf.dropped().get(), 1);
    }

    #[test]
    fn the_writer_thread_writes_what_was_logged() {
        #[derive(Clone, Default)]
        struct Out(Arc<Mutex<Vec<u8>>>);
        impl Write for Out {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let buf = LogBuffer::new(MAX_PENDING);
        let out = Out::default();
        buf.drain_to(out.clone(), Duration::from_millis(1)).unwrap();
        let mut w = tracing_subscriber::fmt::MakeWriter::make_writer(&buf);
        w.write_all(b"{\"a\":1}\n").unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while out.0.lock().unwrap().is_empty() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(*out.0.lock().unwrap(), b"{\"a\":1}\n");
    }

    /// Takes `accept` bytes, then refuses every write until reset.
    struct Refusing {
        got: Vec<u8>,
        accept: usize,
    }

    impl Write for Refusing {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            let n = b.len().min(self.accept);
            if n == 0 {
                return Err(std::io::ErrorKind::BrokenPipe.into());
            }
            self.accept -= n;
            self.got.extend_from_slice(&b[..n]);
            Ok(n)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_final_flush_writes_what_is_pending() {
        let buf = LogBuffer::new(MAX_PENDING);
        let mut out = Vec::new();
        buf.flush_to(&mut out).unwrap();
        assert!(out.is_empty(), "nothing pending, nothing written");
        buf.push(b"one\n");
        buf.push(b"two\n");
        buf.flush_to(&mut out).unwrap();
        assert_eq!(out, b"one\ntwo\n");
        buf.flush_to(&mut out).unwrap();
        assert_eq!(out, b"one\ntwo\n", "written once");
        assert_eq!(buf.dropped().get(), 0);
    }

    #[test]
    fn a_refused_batch_is_counted_and_the_next_starts_on_a_line_of_its_own() {
        let buf = LogBuffer::new(MAX_PENDING);
        // The output takes half a line, then refuses.
        let mut out = Refusing {
            got: Vec::new(),
            accept: 3,
        };
        buf.push(b"first\n");
        buf.push(b"second\n");
        assert!(buf.flush_to(&mut out).is_err());
        assert_eq!(buf.dropped().get(), 2, "both lines of the batch");
        assert_eq!(out.got, b"fir");
        // The output recovers: the broken line is ended before the next
        // batch, so every line after it parses on its own.
        out.accept = usize::MAX;
        buf.push(b"third\n");
        buf.flush_to(&mut out).unwrap();
        assert_eq!(out.got, b"fir\nthird\n");
        assert_eq!(buf.dropped().get(), 2);
        // And only once.
        buf.push(b"fourth\n");
        buf.flush_to(&mut out).unwrap();
        assert_eq!(out.got, b"fir\nthird\nfourth\n");
    }

    /// Waits until the writer is in `state`.
    fn until_writer(buf: &LogBuffer, state: Writer) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while buf.lock().writer != state {
            assert!(Instant::now() < deadline, "the writer never got {state:?}");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn only_a_blocked_writer_is_signalled() {
        let buf = LogBuffer::new(MAX_PENDING);
        // The writer is awake: a line owes it no signal.
        buf.push(b"one\n");
        assert_eq!(buf.lock().writer, Writer::Busy);
        let mut out = Vec::new();
        buf.take(&mut out);

        // Blocked on an empty buffer: the next line is flagged to wake it,
        // once.
        let waiter = buf.clone();
        let writer = std::thread::spawn(move || waiter.wait_for_line());
        until_writer(&buf, Writer::Idle);
        buf.push(b"two\n");
        assert_eq!(buf.lock().writer, Writer::Busy, "the signal is sent once");
        writer.join().unwrap();
        buf.push(b"three\n");
        buf.take(&mut out);
        assert_eq!(out, b"two\nthree\n");
    }

    #[test]
    fn a_full_batch_wakes_the_writer_before_its_period_ends() {
        // 80 bytes at most; a batch is 10.
        let buf = LogBuffer::new(80);
        assert_eq!(buf.flush_at(), 10);
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let waiter = buf.clone();
        let writer = std::thread::spawn(move || {
            // A period far longer than the test.
            waiter.wait_for_batch(Duration::from_secs(3600));
            done_tx.send(()).unwrap();
        });
        until_writer(&buf, Writer::Filling);
        // Less than a batch: no signal, the writer keeps waiting.
        buf.push(b"1234\n");
        assert_eq!(buf.lock().writer, Writer::Filling);
        assert!(
            done_rx.recv_timeout(Duration::from_millis(50)).is_err(),
            "the writer returned before a batch was pending"
        );
        // The line that fills the batch wakes it, once.
        buf.push(b"56789\n");
        assert_eq!(buf.lock().writer, Writer::Busy, "the signal is sent once");
        done_rx
            .recv_timeout(Duration::from_secs(10))
            .expect("a full batch wakes the writer");
        writer.join().unwrap();
        let mut out = Vec::new();
        buf.take(&mut out);
        assert_eq!(out, b"1234\n56789\n");
    }

    #[test]
    fn a_writer_waiting_for_a_batch_returns_when_its_period_ends() {
        let buf = LogBuffer::new(MAX_PENDING);
        buf.push(b"one\n");
        // Less than a batch pending, a short period: it returns on its own.
        buf.wait_for_batch(Duration::from_millis(5));
        assert_eq!(buf.lock().writer, Writer::Busy);
        // A full batch already pending: no waiting at all.
        buf.push(&vec![b'x'; buf.flush_at()]);
        buf.wait_for_batch(Duration::from_secs(3600));
        assert_eq!(buf.lock().writer, Writer::Busy);
    }

    #[test]
    fn the_writer_writes_batch_after_batch_under_load() {
        #[derive(Clone, Default)]
        struct Writes(Arc<Mutex<Vec<Vec<u8>>>>);
        impl Write for Writes {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().push(b.to_vec());
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let buf = LogBuffer::new(MAX_PENDING);
        let out = Writes::default();
        buf.drain_to(out.clone(), Duration::from_millis(5)).unwrap();
        for i in 0..40 {
            buf.push(format!("{i}\n").as_bytes());
            std::thread::sleep(Duration::from_millis(1));
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let expected: Vec<u8> = (0..40)
            .flat_map(|i| format!("{i}\n").into_bytes())
            .collect();
        loop {
            let written: Vec<u8> = out.0.lock().unwrap().concat();
            if written == expected {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "lines lost or reordered"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        // Each write is a batch of whole lines.
        assert!(out.0.lock().unwrap().iter().all(|w| w.ends_with(b"\n")));
    }

    #[test]
    fn the_writer_sleeps_until_a_line_comes() {
        let buf = LogBuffer::new(MAX_PENDING);
        // A line already pending: no waiting at all.
        buf.push(b"early\n");
        buf.wait_for_line();
        let mut out = Vec::new();
        buf.take(&mut out);
        assert_eq!(out, b"early\n");

        // Nothing pending: the writer blocks (it is not polling) ...
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let waiter = buf.clone();
        let writer = std::thread::spawn(move || {
            waiter.wait_for_line();
            done_tx.send(()).unwrap();
        });
        assert!(
            done_rx.recv_timeout(Duration::from_millis(50)).is_err(),
            "the writer returned with nothing pending"
        );
        // ... until a line lands, which wakes it.
        buf.push(b"late\n");
        done_rx
            .recv_timeout(Duration::from_secs(10))
            .expect("a pushed line wakes the writer");
        writer.join().unwrap();
        buf.take(&mut out);
        assert_eq!(out, b"late\n");
    }
}
