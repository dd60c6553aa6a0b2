//! [`Ctx`]: what every local scenario writes to — the report under
//! construction and the progress bar — with the small recording helpers the
//! scenarios share.

use std::future::Future;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;

use crate::load::{self, Outcome, Recorder, Summary};
use crate::report::Report;
use crate::{Args, Sizes};

/// The report being built and the progress bar of one local run.
pub(super) struct Ctx {
    /// The report the scenarios fill in.
    pub(super) report: Report,
    /// Progress over every recorded request of every scenario.
    pub(super) bar: ProgressBar,
    /// Whether the baselines run (not `--no-baselines`).
    pub(super) baselines: bool,
    /// `--trace`'s file, open.
    pub(super) trace: Option<std::io::BufWriter<std::fs::File>>,
}

impl Ctx {
    /// An empty report with the run's configuration, and a progress bar
    /// (hidden with `--no-progress`) sized for every scenario.
    pub(super) fn new(args: &Args, sizes: &Sizes) -> Self {
        let bar = if args.no_progress {
            ProgressBar::hidden()
        } else {
            ProgressBar::new(total_requests(sizes))
        };
        bar.set_style(
            ProgressStyle::with_template("{spinner} {msg:<28} [{bar:40}] {pos}/{len} {elapsed}")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        let mut ctx = Self {
            report: Report::default(),
            bar,
            baselines: !args.no_baselines,
            trace: None,
        };
        let cfg = &mut ctx.report.config;
        cfg.insert("quick".into(), json!(args.quick));
        cfg.insert("sequential_requests".into(), json!(sizes.requests));
        cfg.insert("reps".into(), json!(sizes.reps));
        cfg.insert("open_loop_rate".into(), json!(sizes.rate));
        cfg.insert("open_loop_requests".into(), json!(sizes.open_requests));
        cfg.insert("gateway_threads".into(), json!(args.gateway_threads));
        cfg.insert(
            "client_protocol".into(),
            json!(if args.client_http1 {
                "http/1.1"
            } else {
                "h2 where negotiated"
            }),
        );
        // Since 2026-12-05; before, the baselines got no token.
        cfg.insert(
            "baseline_requests".into(),
            json!("the gateway's, bearer token included"),
        );
        cfg.insert(
            "cpus".into(),
            json!(
                std::thread::available_parallelism()
                    .map(|n| n.get())
                    .unwrap_or(1)
            ),
        );
        ctx
    }

    /// Records scenario `name` over `elapsed` and returns its figures.
    pub(super) fn put(&mut self, name: &str, rec: &Recorder, elapsed: Duration) -> Summary {
        let s = rec.summary(elapsed);
        self.report.scenarios.insert(name.to_owned(), s.clone());
        s
    }

    /// Marks scenario `name` as not run, with the reason.
    pub(super) fn skip(&mut self, name: &str, why: impl Into<String>) {
        self.report.skipped.insert(name.to_owned(), why.into());
    }

    /// Sets the headline figure `key`.
    pub(super) fn figure(&mut self, key: &str, value: serde_json::Value) {
        self.report.summary.insert(key.to_owned(), value);
    }

    /// A callback that advances the progress bar by one request.
    pub(super) fn tick(&self) -> impl Fn() + Send + Sync + 'static {
        let bar = self.bar.clone();
        move || bar.inc(1)
    }

    /// Runs `call` sequentially (`warmup` unrecorded, then `n` recorded) and
    /// records the result as scenario `name`.
    pub(super) async fn sequential<F, Fut>(
        &mut self,
        name: &str,
        warmup: u64,
        n: u64,
        call: F,
    ) -> Summary
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Outcome>,
    {
        let (rec, el) = load::sequential(warmup, n, call, self.tick()).await;
        self.put(name, &rec, el)
    }
}

/// Every recorded request of a local run, for the progress bar's length.
fn total_requests(sizes: &Sizes) -> u64 {
    sizes.session * 4
        + (sizes.session / 5).max(5) * 2
        + sizes.reps * sizes.requests * 5
        // The direct path, the gateway and three baselines.
        + sizes.open_requests * 5
        + sizes.spawn
        + sizes.auth_misses
        + sizes.kube_requests
        + 3 * sizes.requests
}
