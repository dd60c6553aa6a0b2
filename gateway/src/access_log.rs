//! The access log: one JSON line per invoke, formatted on the request path
//! straight into the process's log buffer ([`LogBuffer`], written out in
//! batches by a thread of its own).
//!
//! The line has the shape of every other log line of the gateway
//! (tracing's JSON format: `timestamp`, `level`, `fields` with `message`,
//! `target`), so a log pipeline reads one format, and `RUST_LOG` filters it
//! like any `info` event of `kruntimes_gateway::proxy`. It is not a tracing
//! event because it is the one line written per request: serialising a
//! borrowed struct into a reused buffer costs a fraction of the generic
//! event path (field visitors, a formatter per event), which measured ~8 %
//! of the gateway's CPU per request (docs/benchmarks.md).
//!
//! What a line holds: the Run UID, the invocation id, the subject, the
//! owner Pod, the status and the duration. Never a token, a header or a
//! payload.

use std::cell::RefCell;
use std::time::{Duration, SystemTime};

use kruntimes_process::logbuf::LogBuffer;
use serde::Serialize;

/// The tracing target the line is filtered and labelled under.
const TARGET: &str = "kruntimes_gateway::proxy";

/// One finished invoke.
#[derive(Debug, Clone, Copy)]
pub struct Entry<'a> {
    /// Run UID from the path.
    pub run_uid: &'a str,
    /// The invocation id answered to the caller.
    pub invocation_id: &'a str,
    /// The authenticated subject (empty with authentication off or before
    /// it ran).
    pub subject: &'a str,
    /// The owner Pod the request was routed to (empty when it was not).
    pub owner: &'a str,
    /// Status answered (0 when no answer was written).
    pub status: u16,
    /// From the request's arrival to its end.
    pub duration: Duration,
}

/// Writes [`Entry`] lines into the log buffer.
#[derive(Debug, Clone)]
pub struct AccessLog {
    buffer: LogBuffer,
}

thread_local! {
    /// The line being formatted, reused by the requests of this thread.
    static LINE: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

impl AccessLog {
    /// Logs into `buffer` (the one [`kruntimes_process::init_buffered_logging`]
    /// drains).
    pub fn new(buffer: LogBuffer) -> Self {
        Self { buffer }
    }

    /// Logs `entry`, unless `RUST_LOG` leaves out `info` for this target.
    pub fn record(&self, entry: &Entry<'_>) {
        if !tracing::enabled!(target: TARGET, tracing::Level::INFO) {
            return;
        }
        LINE.with_borrow_mut(|line| {
            line.clear();
            format_line(line, entry, SystemTime::now());
            self.buffer.push(line);
        });
    }
}

/// `entry` as one JSON line (ending in a newline) at `now`. Pure.
pub fn format_line(out: &mut Vec<u8>, entry: &Entry<'_>, now: SystemTime) {
    #[derive(Serialize)]
    struct Line<'a> {
        timestamp: Timestamp,
        level: &'static str,
        fields: Fields<'a>,
        target: &'static str,
    }
    #[derive(Serialize)]
    struct Fields<'a> {
        message: &'static str,
        run_uid: &'a str,
        invocation_id: &'a str,
        subject: &'a str,
        owner: &'a str,
        status: u16,
        duration_us: u64,
    }
    let line = Line {
        timestamp: Timestamp(now),
        level: "INFO",
        fields: Fields {
            message: "invoke",
            run_uid: entry.run_uid,
            invocation_id: entry.invocation_id,
            subject: entry.subject,
            owner: entry.owner,
            status: entry.status,
            duration_us: u64::try_from(entry.duration.as_micros()).unwrap_or(u64::MAX),
        },
        target: TARGET,
    };
    // Writing into a Vec cannot fail, and every field serialises.
    let _ = serde_json::to_writer(&mut *out, &line);
    out.push(b'\n');
}

/// RFC 3339 in UTC with microseconds, as tracing's JSON lines carry it.
struct Timestamp(SystemTime);

impl Serialize for Timestamp {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&humantime::format_rfc3339_micros(self.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry() -> Entry<'static> {
        Entry {
            run_uid: "8f0c1b8e-6f55-4b5e-9e0e-3d1f2f4a9b10",
            invocation_id: "0b5c1f6e-3f5e-4a53-9d55-0d2e6a1f4b11",
            subject: "system:serviceaccount:demo:caller",
            owner: "runtimed-0",
            status: 200,
            duration: Duration::from_micros(1234),
        }
    }

    #[test]
    fn a_line_is_one_json_object_in_the_log_format() {
        let mut out = Vec::new();
        let at = SystemTime::UNIX_EPOCH + Duration::from_micros(1_764_806_400_123_456);
        format_line(&mut out, &entry(), at);
        assert_eq!(out.last(), Some(&b'\n'));
        assert_eq!(out.iter().filter(|b| **b == b'\n').count(), 1);
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(
            v,
            serde_json::json!({
                "timestamp": "2025-12-04T00:00:00.123456Z",
                "level": "INFO",
                "fields": {
                    "message": "invoke",
                    "run_uid": "8f0c1b8e-6f55-4b5e-9e0e-3d1f2f4a9b10",
                    "invocation_id": "0b5c1f6e-3f5e-4a53-9d55-0d2e6a1f4b11",
                    "subject": "system:serviceaccount:demo:caller",
                    "owner": "runtimed-0",
                    "status": 200,
                    "duration_us": 1234,
                },
                "target": "kruntimes_gateway::proxy",
            })
        );
    }

    #[test]
    fn hostile_text_stays_inside_its_field() {
        // A subject comes from a token's claims: quotes, newlines and
        // control characters must not end the line or forge fields.
        let e = Entry {
            subject: "a\"b\n{\"level\":\"ERROR\"}\u{1}\u{2028}",
            owner: "",
            ..entry()
        };
        let mut out = Vec::new();
        format_line(&mut out, &e, SystemTime::UNIX_EPOCH);
        assert_eq!(out.iter().filter(|b| **b == b'\n').count(), 1);
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["fields"]["subject"], e.subject);
        assert_eq!(v["level"], "INFO");
        assert_eq!(v["fields"]["owner"], "");
    }

    #[test]
    fn lines_reach_the_output_whole_and_only_when_enabled() {
        #[derive(Clone, Default)]
        struct Out(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
        impl std::io::Write for Out {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let buffer = LogBuffer::new(1 << 20);
        let out = Out::default();
        buffer
            .drain_to(out.clone(), Duration::from_millis(1))
            .unwrap();
        let log = AccessLog::new(buffer);
        // Outside the subscriber below nothing enables `info`: not logged.
        log.record(&Entry {
            status: 599,
            ..entry()
        });
        tracing::subscriber::with_default(EnablesAll, || {
            log.record(&entry());
            log.record(&Entry {
                status: 503,
                ..entry()
            });
        });
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let text = loop {
            let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
            if text.lines().count() >= 2 || std::time::Instant::now() > deadline {
                break text;
            }
            std::thread::sleep(Duration::from_millis(1));
        };
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert_eq!(lines[0]["fields"]["status"], 200);
        assert_eq!(lines[1]["fields"]["status"], 503);
    }

    /// A subscriber that enables everything and records nothing.
    struct EnablesAll;

    impl tracing::Subscriber for EnablesAll {
        fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
            tracing::span::Id::from_u64(1)
        }
        fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
        fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
        fn event(&self, _: &tracing::Event<'_>) {}
        fn enter(&self, _: &tracing::span::Id) {}
        fn exit(&self, _: &tracing::span::Id) {}
    }
}
