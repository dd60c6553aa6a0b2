//! API-server writes, counted by the API server itself: the
//! `apiserver_request_total` samples of its `/metrics` whose verb writes,
//! kept by resource, subresource, verb and code, and summed by resource
//! (subresources included: `runs` counts `runs/status`). Pure, but for the
//! one read of `/metrics`.

use std::collections::BTreeMap;

/// Verbs that write.
const WRITE_VERBS: [&str; 6] = [
    "POST",
    "PUT",
    "PATCH",
    "APPLY",
    "DELETE",
    "DELETECOLLECTION",
];

/// Write requests so far, by `resource[/subresource] VERB code`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Writes(pub BTreeMap<String, f64>);

/// The key of a sample: `runs/status APPLY 200`.
fn key(resource: &str, subresource: &str, verb: &str, code: &str) -> String {
    if subresource.is_empty() {
        format!("{resource} {verb} {code}")
    } else {
        format!("{resource}/{subresource} {verb} {code}")
    }
}

/// The resource of a key.
fn resource_of(key: &str) -> &str {
    key.split([' ', '/']).next().unwrap_or_default()
}

impl Writes {
    /// From the text of `/metrics`.
    pub fn parse(text: &str) -> Self {
        let mut out = BTreeMap::new();
        for line in text
            .lines()
            .filter(|l| l.starts_with("apiserver_request_total{"))
        {
            let Some(verb) = label(line, "verb") else {
                continue;
            };
            if !WRITE_VERBS.contains(&verb) {
                continue;
            }
            let k = key(
                label(line, "resource").unwrap_or_default(),
                label(line, "subresource").unwrap_or_default(),
                verb,
                label(line, "code").unwrap_or_default(),
            );
            let n: f64 = line
                .rsplit(' ')
                .next()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0.0);
            *out.entry(k).or_default() += n;
        }
        Self(out)
    }

    /// The API server's counts now.
    pub async fn read(client: &kube::Client) -> anyhow::Result<Self> {
        let req = http::Request::get("/metrics").body(Vec::new())?;
        Ok(Self::parse(&client.request_text(req).await?))
    }

    /// What was written since `before`, less `background` (writes per
    /// second by resource at rest) over `seconds`, never below 0.
    pub fn since(&self, before: &Self, background: &Self, seconds: f64) -> Self {
        Self(
            self.0
                .iter()
                .map(|(k, v)| {
                    let idle = background.0.get(k).copied().unwrap_or(0.0) * seconds;
                    let was = before.0.get(k).copied().unwrap_or(0.0);
                    (k.clone(), (v - was - idle).max(0.0))
                })
                .filter(|(_, v)| *v > 0.0)
                .collect(),
        )
    }

    /// Writes per second since `before`, `seconds` ago.
    pub fn rate(&self, before: &Self, seconds: f64) -> Self {
        let none = Self::default();
        let d = self.since(before, &none, 0.0);
        Self(
            d.0.into_iter()
                .map(|(k, v)| (k, v / seconds.max(1e-9)))
                .collect(),
        )
    }

    /// The writes to these resources.
    pub fn of(&self, resources: &[&str]) -> f64 {
        self.0
            .iter()
            .filter(|(k, _)| resources.contains(&resource_of(k)))
            .map(|(_, v)| v)
            .sum()
    }

    /// The writes to these resources, each key per task (`n` tasks).
    pub fn per_task(&self, resources: &[&str], n: usize) -> BTreeMap<String, f64> {
        self.0
            .iter()
            .filter(|(k, _)| resources.contains(&resource_of(k)))
            .map(|(k, v)| (k.clone(), v / n.max(1) as f64))
            .collect()
    }

    /// Every write.
    pub fn total(&self) -> f64 {
        self.0.values().sum()
    }
}

fn label<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    let key = format!("{name}=\"");
    let start = line
        .match_indices(&key)
        .map(|(i, _)| i)
        // Not the tail of another label's name (`subresource` is not `resource`).
        .find(|&i| i == 0 || matches!(line.as_bytes()[i - 1], b'{' | b','))?
        + key.len();
    let end = line[start..].find('"')? + start;
    Some(&line[start..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    const METRICS: &str = r#"# TYPE apiserver_request_total counter
apiserver_request_total{code="201",component="apiserver",dry_run="",group="kruntimes.io",resource="runs",scope="resource",subresource="",verb="POST",version="v1alpha1"} 100
apiserver_request_total{code="200",component="apiserver",dry_run="",group="kruntimes.io",resource="runs",scope="resource",subresource="status",verb="APPLY",version="v1alpha1"} 300
apiserver_request_total{code="409",component="apiserver",dry_run="",group="kruntimes.io",resource="runs",scope="resource",subresource="status",verb="PATCH",version="v1alpha1"} 2
apiserver_request_total{code="200",component="apiserver",dry_run="",group="kruntimes.io",resource="runs",scope="namespace",subresource="",verb="LIST",version="v1alpha1"} 7
apiserver_request_total{code="200",component="apiserver",dry_run="",group="coordination.k8s.io",resource="leases",scope="resource",subresource="",verb="PUT",version="v1"} 40
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="binding",verb="POST",version="v1"} 5
apiserver_request_duration_seconds_count{resource="runs",verb="POST"} 9
"#;

    #[test]
    fn writes_are_summed_by_resource_with_their_subresources() {
        let w = Writes::parse(METRICS);
        assert_eq!(w.of(&["runs"]), 402.0, "{w:?}");
        assert_eq!(w.of(&["leases"]), 40.0);
        assert_eq!(w.of(&["pods"]), 5.0, "a binding is a write to pods");
        assert_eq!(w.total(), 447.0);
        assert_eq!(w.of(&["jobs"]), 0.0);
    }

    #[test]
    fn what_was_written_since_leaves_the_background_out() {
        let before = Writes::parse(METRICS);
        let mut after = before.clone();
        *after.0.get_mut("runs POST 201").unwrap() += 400.0;
        *after.0.get_mut("leases PUT 200").unwrap() += 20.0;
        // 2 lease writes a second at rest, over 10 s: all 20 of them.
        let background = Writes([("leases PUT 200".to_owned(), 2.0)].into_iter().collect());
        let d = after.since(&before, &background, 10.0);
        assert_eq!(d.of(&["runs"]), 400.0);
        assert_eq!(d.of(&["leases"]), 0.0);
        assert_eq!(d.total(), 400.0);
        let rate = after.rate(&before, 10.0);
        assert_eq!(rate.of(&["leases"]), 2.0);
        assert_eq!(
            d.per_task(&["runs"], 100),
            [("runs POST 201".to_owned(), 4.0)].into()
        );
    }

    #[test]
    fn each_write_is_kept_by_subresource_verb_and_code() {
        let w = Writes::parse(METRICS);
        assert_eq!(w.0["runs/status APPLY 200"], 300.0);
        assert_eq!(w.0["runs/status PATCH 409"], 2.0);
        assert_eq!(w.0["pods/binding POST 201"], 5.0);
        assert!(!w.0.keys().any(|k| k.contains("LIST")));
    }

    #[test]
    fn a_label_is_read_by_its_whole_name() {
        let line =
            r#"apiserver_request_total{resource="pods",subresource="binding",verb="POST"} 1"#;
        assert_eq!(label(line, "resource"), Some("pods"));
        assert_eq!(label(line, "subresource"), Some("binding"));
        assert_eq!(label(line, "code"), None);
    }
}
