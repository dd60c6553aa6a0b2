//! Log events a process counts instead of writing: faults its *clients*
//! cause that the libraries it links (Pingora, h2) log at WARN or ERROR.
//!
//! An unauthenticated client must not be able to fill a log, or page an
//! operator who alerts on ERROR, by sending malformed frames. The process
//! names those events ([`Quiet`]); the layer here drops them before any
//! output sees them, and the process counts them in a metric instead.

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer};

/// Decides which WARN and ERROR events are client faults to count, not log.
pub trait Quiet: Send + Sync + 'static {
    /// Whether the event of `target` (the log crate's target for events
    /// from `log`) at `level` with `message` is a client fault; counting it
    /// is the implementation's.
    fn quiet(&self, target: &str, level: Level, message: &str) -> bool;
}

/// A [`Layer`] that disables the events its [`Quiet`] names. Only WARN and
/// ERROR events are looked at.
#[derive(Debug)]
pub struct QuietLayer<Q> {
    quiet: Q,
}

impl<Q: Quiet> QuietLayer<Q> {
    /// A layer over `quiet`.
    pub fn new(quiet: Q) -> Self {
        Self { quiet }
    }
}

/// The `message` and `log.target` fields of an event.
#[derive(Default)]
struct Fields {
    message: String,
    log_target: Option<String>,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "message" => value.clone_into(&mut self.message),
            "log.target" => self.log_target = Some(value.to_owned()),
            _ => {}
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        match field.name() {
            "message" => self.message = format!("{value:?}"),
            "log.target" => self.log_target = Some(format!("{value:?}")),
            _ => {}
        }
    }
}

impl<S: Subscriber, Q: Quiet> Layer<S> for QuietLayer<Q> {
    fn event_enabled(&self, event: &Event<'_>, _cx: Context<'_, S>) -> bool {
        let level = *event.metadata().level();
        if level > Level::WARN {
            return true;
        }
        let mut fields = Fields::default();
        event.record(&mut fields);
        let target = fields
            .log_target
            .as_deref()
            .unwrap_or(event.metadata().target());
        !self.quiet.quiet(target, level, &fields.message)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};

    use tracing_subscriber::layer::SubscriberExt;

    use super::*;

    #[derive(Clone, Default)]
    struct Seen(Arc<AtomicUsize>);

    impl Quiet for Seen {
        fn quiet(&self, target: &str, _level: Level, message: &str) -> bool {
            let q = target == "noisy" && message.starts_with("client broke");
            if q {
                self.0.fetch_add(1, Ordering::Relaxed);
            }
            q
        }
    }

    /// Records what reaches the output.
    struct Output(Arc<Mutex<Vec<String>>>);

    impl<S: Subscriber> Layer<S> for Output {
        fn on_event(&self, event: &Event<'_>, _cx: Context<'_, S>) {
            let mut f = Fields::default();
            event.record(&mut f);
            self.0.lock().unwrap().push(f.message);
        }
    }

    #[test]
    fn named_warnings_and_errors_are_counted_and_never_written_others_pass() {
        let seen = Seen::default();
        let written = Arc::new(Mutex::new(Vec::new()));
        let subscriber = tracing_subscriber::registry()
            .with(QuietLayer::new(seen.clone()))
            .with(Output(written.clone()));
        tracing::subscriber::with_default(subscriber, || {
            tracing::error!(target: "noisy", "client broke the frame");
            tracing::warn!(target: "noisy", "client broke it again");
            tracing::error!(target: "noisy", "the disk is full");
            tracing::error!(target: "other", "client broke the frame");
            tracing::info!(target: "noisy", "client broke, at info");
        });
        assert_eq!(seen.0.load(Ordering::Relaxed), 2);
        assert_eq!(
            *written.lock().unwrap(),
            [
                "the disk is full",
                "client broke the frame",
                "client broke, at info"
            ]
        );
    }
}
