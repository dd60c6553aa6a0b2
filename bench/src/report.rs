//! Rendering results: a Markdown table, the JSON document and an SVG chart.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use crate::load::Summary;

/// Everything one benchmark run measured.
#[derive(Debug, Clone, Serialize, Default)]
pub struct Report {
    /// How it was run.
    pub config: BTreeMap<String, serde_json::Value>,
    /// Per-scenario figures, by name.
    pub scenarios: BTreeMap<String, Summary>,
    /// Headline figures (see docs/benchmarks.md).
    pub summary: BTreeMap<String, serde_json::Value>,
    /// Scenarios that could not run, with the reason.
    pub skipped: BTreeMap<String, String>,
}

fn ms(us: u64) -> String {
    format!("{:.3}", us as f64 / 1000.0)
}

impl Report {
    /// The Markdown rendering.
    pub fn markdown(&self) -> String {
        let mut out = String::new();
        out.push_str(
            "| scenario | n | ok | p50 ms | p90 ms | p99 ms | p99 95 % CI ms | p99.9 ms | max ms | rps | errors |\n",
        );
        out.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n");
        for (name, s) in &self.scenarios {
            let errors = if s.errors.is_empty() {
                "-".to_owned()
            } else {
                s.errors
                    .iter()
                    .map(|(k, v)| format!("{k}: {v}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let _ = writeln!(
                out,
                "| {name} | {} | {} | {} | {} | {} | {}–{} | {} | {} | {:.0} | {errors} |",
                s.count,
                s.ok,
                ms(s.p50_us),
                ms(s.p90_us),
                ms(s.p99_us),
                ms(s.p99_ci95_us[0]),
                ms(s.p99_ci95_us[1]),
                ms(s.p999_us),
                ms(s.max_us),
                s.achieved_rps
            );
        }
        out.push_str("\n| summary | value |\n|---|---:|\n");
        for (k, v) in &self.summary {
            let _ = writeln!(out, "| {k} | {v} |");
        }
        for (k, why) in &self.skipped {
            let _ = writeln!(out, "\nskipped {k}: {why}");
        }
        out
    }

    /// A grouped bar chart of p50/p90/p99 per scenario (log-free, linear,
    /// capped at the largest p99 shown).
    pub fn svg(&self, names: &[&str]) -> String {
        let rows: Vec<(&str, &Summary)> = names
            .iter()
            .filter_map(|n| self.scenarios.get(*n).map(|s| (*n, s)))
            .collect();
        let max = rows.iter().map(|(_, s)| s.p99_us).max().unwrap_or(1).max(1) as f64;
        let (left, bar_h, gap, width) = (260.0, 14.0, 14.0, 900.0);
        let height = 60.0 + rows.len() as f64 * (3.0 * bar_h + gap);
        let mut svg = format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" font-family=\"sans-serif\" font-size=\"12\">\n<text x=\"10\" y=\"20\" font-size=\"15\">kruntimes latency percentiles (ms): p50, p90, p99</text>\n"
        );
        let colors = ["#4c78a8", "#f58518", "#e45756"];
        for (i, (name, s)) in rows.iter().enumerate() {
            let y0 = 40.0 + i as f64 * (3.0 * bar_h + gap);
            let _ = writeln!(
                svg,
                "<text x=\"10\" y=\"{}\">{name}</text>",
                y0 + 1.8 * bar_h
            );
            for (j, v) in [s.p50_us, s.p90_us, s.p99_us].into_iter().enumerate() {
                let w = (v as f64 / max) * (width - left - 90.0);
                let y = y0 + j as f64 * bar_h;
                let _ = writeln!(
                    svg,
                    "<rect x=\"{left}\" y=\"{y}\" width=\"{w:.1}\" height=\"{}\" fill=\"{}\"/><text x=\"{:.1}\" y=\"{}\">{}</text>",
                    bar_h - 2.0,
                    colors[j],
                    left + w + 4.0,
                    y + bar_h - 4.0,
                    ms(v)
                );
            }
        }
        svg.push_str("</svg>\n");
        svg
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::Recorder;
    use std::time::Duration;

    #[test]
    fn markdown_and_svg_name_every_scenario() {
        let mut r = Report::default();
        let mut rec = Recorder::new();
        rec.record(Duration::from_micros(500), &Ok(200));
        r.scenarios
            .insert("gateway-python".into(), rec.summary(Duration::from_secs(1)));
        r.summary.insert("python_warm_p50_us".into(), 500.into());
        let md = r.markdown();
        assert!(md.contains("| gateway-python | 1 | 1 | 0.500"));
        assert!(md.contains("python_warm_p50_us"));
        let svg = r.svg(&["gateway-python", "absent"]);
        assert!(
            svg.starts_with("<svg") && svg.contains("gateway-python") && !svg.contains("absent")
        );
    }
}
