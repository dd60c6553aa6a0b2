//! What `krt up` writes for its clients (`STATE_DIR/client.json`), and the
//! HTTPS client `krt up` itself uses to wait for its gateway.

use anyhow::Context as _;

pub use kruntimes_client::embedded::ClientConfig;

/// An HTTP client trusting the stack's public CA.
pub fn http_client(cfg: &ClientConfig) -> anyhow::Result<reqwest::Client> {
    let ca =
        std::fs::read(&cfg.ca_file).with_context(|| format!("read {}", cfg.ca_file.display()))?;
    Ok(reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(&ca)?)
        .build()?)
}
