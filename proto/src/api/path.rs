//! Parsing the public API paths. Pure; shared by the gateway (routing) and
//! runtimed (the dataplane re-checks what it is asked to serve).

/// A parsed API path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiPath<'a> {
    /// `POST /v1/namespaces/{ns}/runtimes/{runtime}/runs/{uid}:invoke`
    Invoke {
        /// Namespace.
        namespace: &'a str,
        /// Runtime name.
        runtime: &'a str,
        /// Run UID.
        uid: &'a str,
    },
    /// `/v1/namespaces/{ns}/runtimes/{runtime}/sessions/{uid}[/…]`
    Session {
        /// Namespace.
        namespace: &'a str,
        /// Runtime name.
        runtime: &'a str,
        /// Run UID.
        uid: &'a str,
        /// Which session route.
        op: SessionOp,
    },
    /// `GET /healthz`
    Healthz,
    /// `GET /readyz`
    Readyz,
    /// `GET /metrics`
    Metrics,
}

/// Session routes (served once session mode exists).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionOp {
    /// Session status.
    Status,
    /// `operations:execute`
    Execute,
    /// `operations:stream`
    Stream,
    /// `operations:ws`
    WebSocket,
    /// `files`
    ListFiles,
    /// `files:content`
    ReadFile,
    /// `operations:cancel`: cancels one queued or running operation.
    Cancel,
}

impl SessionOp {
    /// Whether the route takes `POST` (a body); the others take `GET`.
    pub fn is_post(self) -> bool {
        matches!(self, Self::Execute | Self::Stream | Self::Cancel)
    }
}

/// Why a path was rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathError {
    /// Not an API route at all.
    UnknownRoute,
    /// A segment is empty or not a DNS-1123 label / UID.
    InvalidSegment(&'static str),
}

impl std::fmt::Display for PathError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PathError::UnknownRoute => f.write_str("no such route"),
            PathError::InvalidSegment(what) => write!(f, "invalid {what} in path"),
        }
    }
}

impl std::error::Error for PathError {}

/// A Kubernetes namespace / object name segment: DNS-1123 label, ≤ 63 bytes.
pub fn dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// A Run UID: 1..=64 bytes of lowercase hex, digits and dashes (so it is
/// also safe as a file name).
pub fn valid_run_uid(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c) || c == b'-')
}

/// Parses a request path (without query string).
pub fn parse_path(path: &str) -> Result<ApiPath<'_>, PathError> {
    match path {
        "/healthz" => return Ok(ApiPath::Healthz),
        "/readyz" => return Ok(ApiPath::Readyz),
        "/metrics" => return Ok(ApiPath::Metrics),
        _ => {}
    }
    let rest = path
        .strip_prefix("/v1/namespaces/")
        .ok_or(PathError::UnknownRoute)?;
    let mut parts = rest.split('/');
    let namespace = parts.next().ok_or(PathError::UnknownRoute)?;
    if parts.next() != Some("runtimes") {
        return Err(PathError::UnknownRoute);
    }
    let runtime = parts.next().ok_or(PathError::UnknownRoute)?;
    let kind = parts.next().ok_or(PathError::UnknownRoute)?;
    let last = parts.next().ok_or(PathError::UnknownRoute)?;
    let check = |namespace, runtime, uid_seg| -> Result<(), PathError> {
        if !dns_label(namespace) {
            return Err(PathError::InvalidSegment("namespace"));
        }
        if !dns_label(runtime) {
            return Err(PathError::InvalidSegment("runtime"));
        }
        if !valid_run_uid(uid_seg) {
            return Err(PathError::InvalidSegment("run uid"));
        }
        Ok(())
    };
    match kind {
        "runs" => {
            if parts.next().is_some() {
                return Err(PathError::UnknownRoute);
            }
            let uid_seg = last
                .strip_suffix(":invoke")
                .ok_or(PathError::UnknownRoute)?;
            check(namespace, runtime, uid_seg)?;
            Ok(ApiPath::Invoke {
                namespace,
                runtime,
                uid: uid_seg,
            })
        }
        "sessions" => {
            let tail: Vec<&str> = parts.collect();
            let op = match tail.as_slice() {
                [] => SessionOp::Status,
                ["operations:execute"] => SessionOp::Execute,
                ["operations:stream"] => SessionOp::Stream,
                ["operations:ws"] => SessionOp::WebSocket,
                ["files"] => SessionOp::ListFiles,
                ["files:content"] => SessionOp::ReadFile,
                ["operations:cancel"] => SessionOp::Cancel,
                _ => return Err(PathError::UnknownRoute),
            };
            check(namespace, runtime, last)?;
            Ok(ApiPath::Session {
                namespace,
                runtime,
                uid: last,
                op,
            })
        }
        _ => Err(PathError::UnknownRoute),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const UID: &str = "2c24c1f0-9f8f-4f80-82d5-3dd16a12d1e6";

    #[test]
    fn invoke_path_parses_into_its_parts() {
        let p = format!("/v1/namespaces/default/runtimes/python/runs/{UID}:invoke");
        assert_eq!(
            parse_path(&p),
            Ok(ApiPath::Invoke {
                namespace: "default",
                runtime: "python",
                uid: UID
            })
        );
    }

    #[test]
    fn probes_and_metrics_are_routes() {
        assert_eq!(parse_path("/healthz"), Ok(ApiPath::Healthz));
        assert_eq!(parse_path("/readyz"), Ok(ApiPath::Readyz));
        assert_eq!(parse_path("/metrics"), Ok(ApiPath::Metrics));
    }

    #[test]
    fn session_routes_parse() {
        let base = format!("/v1/namespaces/a/runtimes/python/sessions/{UID}");
        for (suffix, op) in [
            ("", SessionOp::Status),
            ("/operations:execute", SessionOp::Execute),
            ("/operations:stream", SessionOp::Stream),
            ("/operations:ws", SessionOp::WebSocket),
            ("/files", SessionOp::ListFiles),
            ("/files:content", SessionOp::ReadFile),
            ("/operations:cancel", SessionOp::Cancel),
        ] {
            let p = format!("{base}{suffix}");
            assert!(
                matches!(parse_path(&p), Ok(ApiPath::Session { op: o, .. }) if o == op),
                "{p}"
            );
        }
    }

    #[test]
    fn malformed_paths_are_rejected_with_a_reason() {
        let cases: &[(&str, PathError)] = &[
            ("/", PathError::UnknownRoute),
            (
                "/v2/namespaces/a/runtimes/b/runs/abc:invoke",
                PathError::UnknownRoute,
            ),
            (
                "/v1/namespaces/a/runtimes/b/runs/abc",
                PathError::UnknownRoute,
            ),
            (
                "/v1/namespaces/a/runtimes/b/runs/abc:invoke/x",
                PathError::UnknownRoute,
            ),
            (
                "/v1/namespaces/a/runtimes/b/jobs/abc:invoke",
                PathError::UnknownRoute,
            ),
            (
                "/v1/namespaces/a/things/b/runs/abc:invoke",
                PathError::UnknownRoute,
            ),
            ("/v1/namespaces/a", PathError::UnknownRoute),
            (
                "/v1/namespaces/A/runtimes/b/runs/abc:invoke",
                PathError::InvalidSegment("namespace"),
            ),
            (
                "/v1/namespaces//runtimes/b/runs/abc:invoke",
                PathError::InvalidSegment("namespace"),
            ),
            (
                "/v1/namespaces/-a/runtimes/b/runs/abc:invoke",
                PathError::InvalidSegment("namespace"),
            ),
            (
                "/v1/namespaces/a/runtimes/b_c/runs/abc:invoke",
                PathError::InvalidSegment("runtime"),
            ),
            (
                "/v1/namespaces/a/runtimes/b/runs/:invoke",
                PathError::InvalidSegment("run uid"),
            ),
            (
                "/v1/namespaces/a/runtimes/b/runs/XYZ:invoke",
                PathError::InvalidSegment("run uid"),
            ),
            (
                "/v1/namespaces/a/runtimes/b/runs/..:invoke",
                PathError::InvalidSegment("run uid"),
            ),
            (
                "/v1/namespaces/a/runtimes/b/runs/a%2fb:invoke",
                PathError::InvalidSegment("run uid"),
            ),
            (
                "/v1/namespaces/a/runtimes/b/sessions/abc/nope",
                PathError::UnknownRoute,
            ),
        ];
        for (p, want) in cases {
            assert_eq!(parse_path(p).as_ref().err(), Some(want), "{p}");
        }
        let long = format!(
            "/v1/namespaces/{}/runtimes/b/runs/abc:invoke",
            "a".repeat(64)
        );
        assert_eq!(
            parse_path(&long),
            Err(PathError::InvalidSegment("namespace"))
        );
    }
}
