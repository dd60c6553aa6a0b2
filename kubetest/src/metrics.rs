//! Counting API calls from the test API server's own Prometheus metrics, so
//! a test can check a component's calls independently of the component.

use crate::server::ApiServer;
use crate::users::User;

impl ApiServer {
    /// Sum of the API server's `apiserver_request_total` samples for
    /// `resource` and `verb` (all codes): an independent count of the API
    /// calls a component made.
    pub async fn request_count(&self, resource: &str, verb: &str) -> anyhow::Result<u64> {
        let text = self
            .http()?
            .get(format!("{}/metrics", self.url()))
            .bearer_auth(self.token(User::Admin))
            .send()
            .await?
            .error_for_status()?
            .text()
            .await?;
        Ok(request_total(&text, resource, verb))
    }
}

/// Sum of the `apiserver_request_total` samples of `text` (Prometheus text
/// format) labelled with `resource` and `verb`. Pure.
fn request_total(text: &str, resource: &str, verb: &str) -> u64 {
    let resource_label = format!("resource=\"{resource}\"");
    let verb_label = format!("verb=\"{verb}\"");
    let mut total = 0u64;
    for line in text.lines() {
        if line.starts_with("apiserver_request_total{")
            && line.contains(&resource_label)
            && line.contains(&verb_label)
            && let Some(v) = line.rsplit(' ').next()
        {
            total += v.parse::<f64>().unwrap_or(0.0) as u64;
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_total_sums_the_samples_of_one_resource_and_verb() {
        let text = "\
# TYPE apiserver_request_total counter
apiserver_request_total{code=\"201\",resource=\"tokenreviews\",verb=\"POST\"} 3
apiserver_request_total{code=\"500\",resource=\"tokenreviews\",verb=\"POST\"} 2
apiserver_request_total{code=\"200\",resource=\"tokenreviews\",verb=\"GET\"} 7
apiserver_request_total{code=\"201\",resource=\"subjectaccessreviews\",verb=\"POST\"} 5
apiserver_request_duration_seconds{resource=\"tokenreviews\",verb=\"POST\"} 9
";
        assert_eq!(request_total(text, "tokenreviews", "POST"), 5);
        assert_eq!(request_total(text, "subjectaccessreviews", "POST"), 5);
        assert_eq!(request_total(text, "pods", "POST"), 0);
    }
}
