//! The caller's bearer token for the gateway, from the same kubeconfig (or
//! in-cluster service account) that reaches the API server: a static token,
//! a token file, or an exec credential plugin. The gateway authenticates
//! callers with TokenReview, so client certificates alone are not enough.

use std::collections::HashMap;

use kube::config::{AuthInfo, ExecConfig};
use secrecy::ExposeSecret as _;

use crate::{Error, Result};

/// The bearer token `auth` presents, if it presents one.
pub fn bearer_token(auth: &AuthInfo) -> Result<Option<String>> {
    if let Some(t) = &auth.token {
        return Ok(Some(t.expose_secret().to_owned()));
    }
    if let Some(f) = &auth.token_file {
        let t = std::fs::read_to_string(f)
            .map_err(|e| Error::Credentials(format!("read token file {f}: {e}")))?;
        return Ok(Some(t.trim().to_owned()));
    }
    if let Some(exec) = &auth.exec {
        return exec_token(exec).map(Some);
    }
    Ok(None)
}

/// Runs an exec credential plugin (`client.authentication.k8s.io`) and
/// returns `status.token` of the `ExecCredential` it prints.
fn exec_token(exec: &ExecConfig) -> Result<String> {
    let command = exec.command.as_deref().ok_or_else(|| {
        Error::Credentials("the kubeconfig's exec plugin names no command".into())
    })?;
    let mut cmd = std::process::Command::new(command);
    cmd.args(exec.args.iter().flatten());
    for env in exec.env.iter().flatten() {
        if let (Some(name), Some(value)) = (env.get("name"), env.get("value")) {
            cmd.env(name, value);
        }
    }
    let info = serde_json::json!({
        "apiVersion": exec.api_version.as_deref().unwrap_or("client.authentication.k8s.io/v1"),
        "kind": "ExecCredential",
        "spec": {"interactive": false},
    });
    cmd.env("KUBERNETES_EXEC_INFO", info.to_string());
    cmd.stdin(std::process::Stdio::null());
    let out = cmd
        .output()
        .map_err(|e| Error::Credentials(format!("run exec credential plugin {command}: {e}")))?;
    if !out.status.success() {
        return Err(Error::Credentials(format!(
            "exec credential plugin {command} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    parse_exec_credential(&out.stdout).map_err(|why| {
        Error::Credentials(format!(
            "exec credential plugin {command} printed no token: {why}"
        ))
    })
}

/// `status.token` of an `ExecCredential` document.
fn parse_exec_credential(stdout: &[u8]) -> Result<String, String> {
    #[derive(serde::Deserialize)]
    struct Credential {
        status: Option<HashMap<String, serde_json::Value>>,
    }
    let c: Credential =
        serde_json::from_slice(stdout).map_err(|e| format!("not an ExecCredential: {e}"))?;
    c.status
        .and_then(|s| s.get("token").and_then(|t| t.as_str()).map(str::to_owned))
        .filter(|t| !t.is_empty())
        .ok_or_else(|| "ExecCredential has no status.token (client certificates are not accepted by the gateway)".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exec_credentials_yield_their_token() {
        let doc = br#"{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"t0k","expirationTimestamp":"2030-01-01T00:00:00Z"}}"#;
        assert_eq!(parse_exec_credential(doc).unwrap(), "t0k");
        let certs = br#"{"kind":"ExecCredential","status":{"clientCertificateData":"x"}}"#;
        assert!(parse_exec_credential(certs).is_err());
        assert!(parse_exec_credential(b"not json").is_err());
    }

    #[test]
    fn static_tokens_and_token_files_are_used_as_they_are() {
        let auth = AuthInfo {
            token: Some("abc".to_owned().into()),
            ..Default::default()
        };
        assert_eq!(bearer_token(&auth).unwrap().as_deref(), Some("abc"));
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("token");
        std::fs::write(&f, "from-file\n").unwrap();
        let auth = AuthInfo {
            token_file: Some(f.display().to_string()),
            ..Default::default()
        };
        assert_eq!(bearer_token(&auth).unwrap().as_deref(), Some("from-file"));
        assert_eq!(bearer_token(&AuthInfo::default()).unwrap(), None);
    }

    #[test]
    fn an_exec_plugin_is_run_with_its_args_and_env() {
        let exec = ExecConfig {
            api_version: Some("client.authentication.k8s.io/v1".into()),
            command: Some("sh".into()),
            args: Some(vec![
                "-c".into(),
                r#"printf '{"kind":"ExecCredential","status":{"token":"%s"}}' "$TOKEN""#.into(),
            ]),
            env: Some(vec![HashMap::from([
                ("name".to_owned(), "TOKEN".to_owned()),
                ("value".to_owned(), "from-plugin".to_owned()),
            ])]),
            ..Default::default()
        };
        let auth = AuthInfo {
            exec: Some(exec),
            ..Default::default()
        };
        assert_eq!(bearer_token(&auth).unwrap().as_deref(), Some("from-plugin"));
    }
}
