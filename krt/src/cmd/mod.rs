//! krt's verbs, each over a [`kruntimes_client::Target`] so it works the same
//! against `krt up` and a cluster.

pub mod artifacts;
pub mod invoke;
pub mod logs;
pub mod run;
pub mod runs;
pub mod runtime;
pub mod session;
pub mod version;

use std::time::Duration;

use anyhow::{Context as _, bail};

/// Parses `90`, `90s`, `2m` or `1h` as a duration.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let (num, unit) = match s.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => s.split_at(i),
        None => (s, "s"),
    };
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a duration like 90s, 2m or 1h"))?;
    let secs = match unit {
        "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        _ => return Err(format!("{s:?}: the unit must be s, m or h")),
    };
    Ok(Duration::from_secs(secs))
}

/// Output formats of the listing verbs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    /// Aligned columns.
    Table,
    /// JSON.
    Json,
    /// YAML.
    Yaml,
}

/// Prints `v` as JSON or YAML.
pub fn print_doc(v: &impl serde::Serialize, output: Output) -> anyhow::Result<()> {
    match output {
        Output::Json | Output::Table => println!("{}", serde_json::to_string_pretty(v)?),
        Output::Yaml => print!("{}", serde_yaml::to_string(v)?),
    }
    Ok(())
}

/// Reads a file (`-` for stdin).
pub fn read_input(path: &std::path::Path) -> anyhow::Result<Vec<u8>> {
    if path.as_os_str() == "-" {
        let mut buf = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin(), &mut buf)?;
        return Ok(buf);
    }
    std::fs::read(path).with_context(|| format!("read {}", path.display()))
}

/// Every document of a YAML (or JSON) stream, empty ones skipped.
pub fn yaml_documents(text: &str) -> anyhow::Result<Vec<serde_json::Value>> {
    use serde::Deserialize as _;
    let mut docs = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(text) {
        let v = serde_json::Value::deserialize(doc).context("parse YAML")?;
        if v.is_null() {
            continue;
        }
        if !v.is_object() {
            bail!("a manifest document must be an object");
        }
        docs.push(v);
    }
    Ok(docs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_a_unit_or_default_to_seconds() {
        assert_eq!(parse_duration("90"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("5d").is_err());
    }

    #[test]
    fn yaml_streams_yield_each_document() {
        let docs =
            yaml_documents("kind: Run\nmetadata: {name: a}\n---\n---\nkind: Runtime\n").unwrap();
        assert_eq!(docs.len(), 2);
        assert_eq!(docs[1]["kind"], "Runtime");
        assert!(yaml_documents("- a\n- b\n").is_err());
    }
}
