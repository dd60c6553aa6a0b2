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
    /// `GET /v1/namespaces/{ns}/runtimes/{runtime}/runs/{uid}/artifacts[/{name}]`
    Artifacts {
        /// Namespace.
        namespace: &'a str,
        /// Runtime name.
        runtime: &'a str,
        /// Run UID.
        uid: &'a str,
        /// The artifact (`None`: the list), a valid [`artifact_name`].
        name: Option<&'a str>,
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
    /// `files:watch`: what changes beneath a directory, streamed.
    WatchFiles,
    /// `metrics`: what the session uses (CPU, memory, disk, processes).
    Metrics,
    /// `processes`: `GET` lists the session's background processes, `POST`
    /// starts one.
    Processes,
    /// `processes/{pid}`: one process.
    Process(u32),
    /// `processes/{pid}:connect`: its output, replayed then followed.
    ConnectProcess(u32),
    /// `processes/{pid}:input`: bytes to its stdin or terminal.
    ProcessInput(u32),
    /// `processes/{pid}:closeStdin`.
    CloseStdin(u32),
    /// `processes/{pid}:signal`.
    SignalProcess(u32),
    /// `processes/{pid}:resize`: its terminal's size.
    ResizeProcess(u32),
}

/// The methods a route takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Methods {
    /// `GET` only.
    Get,
    /// `POST` only (a body).
    Post,
    /// `GET` and `POST` (a collection: list and create).
    GetOrPost,
}

impl Methods {
    /// Whether `method` (`GET`, `POST`, …) is one of them.
    pub fn allow(self, method: &str) -> bool {
        match self {
            Methods::Get => method == "GET",
            Methods::Post => method == "POST",
            Methods::GetOrPost => method == "GET" || method == "POST",
        }
    }

    /// How a 405 names them (`GET`, `POST`, `GET, POST`).
    pub fn as_str(self) -> &'static str {
        match self {
            Methods::Get => "GET",
            Methods::Post => "POST",
            Methods::GetOrPost => "GET, POST",
        }
    }
}

impl SessionOp {
    /// The methods the route takes.
    pub fn methods(self) -> Methods {
        match self {
            Self::Execute
            | Self::Stream
            | Self::Cancel
            | Self::ProcessInput(_)
            | Self::CloseStdin(_)
            | Self::SignalProcess(_)
            | Self::ResizeProcess(_) => Methods::Post,
            Self::Processes => Methods::GetOrPost,
            Self::Status
            | Self::WebSocket
            | Self::ListFiles
            | Self::ReadFile
            | Self::WatchFiles
            | Self::Metrics
            | Self::Process(_)
            | Self::ConnectProcess(_) => Methods::Get,
        }
    }
}

/// A process id segment: decimal digits, no leading zero, 1..=u32::MAX.
fn pid(s: &str) -> Option<u32> {
    if s.is_empty() || s.len() > 10 || s.starts_with('0') || !s.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    s.parse().ok()
}

/// The session route of a process: `{pid}` or `{pid}:verb`.
fn process_op(seg: &str) -> Result<SessionOp, PathError> {
    let (id, verb) = match seg.split_once(':') {
        Some((id, verb)) => (id, Some(verb)),
        None => (seg, None),
    };
    let Some(n) = pid(id) else {
        return Err(PathError::InvalidSegment("process id"));
    };
    Ok(match verb {
        None => SessionOp::Process(n),
        Some("connect") => SessionOp::ConnectProcess(n),
        Some("input") => SessionOp::ProcessInput(n),
        Some("closeStdin") => SessionOp::CloseStdin(n),
        Some("signal") => SessionOp::SignalProcess(n),
        Some("resize") => SessionOp::ResizeProcess(n),
        Some(_) => return Err(PathError::UnknownRoute),
    })
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

/// Longest artifact name, in bytes.
pub const MAX_ARTIFACT_NAME_BYTES: usize = 512;
/// Longest segment of an artifact name, in bytes.
pub const MAX_ARTIFACT_SEGMENT_BYTES: usize = 255;
/// Most segments (directory levels plus the file) of an artifact name.
pub const MAX_ARTIFACT_DEPTH: usize = 32;

/// Why a name cannot be an artifact's: `None` when it can. An artifact name
/// is a path relative to the artifacts directory, `/`-separated, that is
/// safe as an object-store key and a URL path as it is: 1–512 bytes,
/// at most 32 segments of 1–255 bytes, each made of ASCII letters, digits
/// and `. _ - + = @ ,`, none of them `.` or `..`. Shared by runtimed (the
/// export refuses other names) and the gateway (the download path).
pub fn artifact_name(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        return Some("the name is empty");
    }
    if name.len() > MAX_ARTIFACT_NAME_BYTES {
        return Some("the name is longer than 512 bytes");
    }
    let mut depth = 0;
    for seg in name.split('/') {
        depth += 1;
        if seg.is_empty() {
            return Some("the name has an empty segment (a leading, trailing or double `/`)");
        }
        if seg == "." || seg == ".." {
            return Some("the name has a `.` or `..` segment");
        }
        if seg.len() > MAX_ARTIFACT_SEGMENT_BYTES {
            return Some("a segment of the name is longer than 255 bytes");
        }
        if !seg
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || b"._-+=@,".contains(&c))
        {
            return Some(
                "the name has a character other than ASCII letters, digits and `. _ - + = @ ,`",
            );
        }
    }
    if depth > MAX_ARTIFACT_DEPTH {
        return Some("the name is more than 32 levels deep");
    }
    None
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
            if let Some(sub) = parts.next() {
                if sub != "artifacts" {
                    return Err(PathError::UnknownRoute);
                }
                check(namespace, runtime, last)?;
                // What follows `{uid}/`: `artifacts` or `artifacts/{name}`.
                let tail = rest.splitn(6, '/').nth(5).unwrap_or_default();
                let name = match tail.strip_prefix("artifacts") {
                    Some("") => None,
                    Some(t) => {
                        let name = t.strip_prefix('/').ok_or(PathError::UnknownRoute)?;
                        if artifact_name(name).is_some() {
                            return Err(PathError::InvalidSegment("artifact name"));
                        }
                        Some(name)
                    }
                    None => return Err(PathError::UnknownRoute),
                };
                return Ok(ApiPath::Artifacts {
                    namespace,
                    runtime,
                    uid: last,
                    name,
                });
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
                ["files:watch"] => SessionOp::WatchFiles,
                ["metrics"] => SessionOp::Metrics,
                ["operations:cancel"] => SessionOp::Cancel,
                ["processes"] => SessionOp::Processes,
                ["processes", seg] => process_op(seg)?,
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
    fn artifact_routes_parse_with_names_of_any_depth() {
        let base = format!("/v1/namespaces/a/runtimes/artifacts/runs/{UID}/artifacts");
        fn art(p: &str) -> Option<(&str, &str, &str, Option<&str>)> {
            match parse_path(p) {
                Ok(ApiPath::Artifacts {
                    namespace,
                    runtime,
                    uid,
                    name,
                }) => Some((namespace, runtime, uid, name)),
                _ => None,
            }
        }
        assert_eq!(art(&base), Some(("a", "artifacts", UID, None)));
        assert_eq!(
            art(&format!("{base}/report.json")),
            Some(("a", "artifacts", UID, Some("report.json")))
        );
        assert_eq!(
            art(&format!("{base}/out/2026/a_b-c+d=e@f,g.tar.gz")),
            Some(("a", "artifacts", UID, Some("out/2026/a_b-c+d=e@f,g.tar.gz")))
        );
        for bad in [
            "/", "//x", "x/", "../etc", "a/../b", "a/./b", "a%2Fb", "a b", "é",
        ] {
            assert_eq!(
                parse_path(&format!("{base}/{bad}")),
                Err(PathError::InvalidSegment("artifact name")),
                "{bad}"
            );
        }
        for unknown in ["artifactsx", "artifact", "files", ""] {
            assert_eq!(
                parse_path(&format!("/v1/namespaces/a/runtimes/b/runs/{UID}/{unknown}")),
                Err(PathError::UnknownRoute),
                "{unknown}"
            );
        }
        assert_eq!(
            parse_path("/v1/namespaces/a/runtimes/b/runs/NOT-A-UID/artifacts"),
            Err(PathError::InvalidSegment("run uid"))
        );
    }

    #[test]
    fn artifact_names_are_bounded_key_safe_relative_paths() {
        for ok in [
            "a",
            "a.txt",
            "dir/sub/file-1_2.json",
            ".hidden",
            "..a",
            "a..b",
        ] {
            assert_eq!(artifact_name(ok), None, "{ok}");
        }
        let long_segment = "a".repeat(256);
        let deep = vec!["d"; 33].join("/");
        let long = vec!["a".repeat(200); 3].join("/");
        for (bad, why) in [
            ("", "empty"),
            ("/abs", "empty segment"),
            ("a//b", "empty segment"),
            ("a/", "empty segment"),
            ("..", "`..`"),
            ("a/../b", "`..`"),
            (".", "`.`"),
            ("a b", "character"),
            ("a\\b", "character"),
            ("a\u{0}b", "character"),
            ("naïve", "character"),
            (long_segment.as_str(), "255"),
            (deep.as_str(), "32 levels"),
            (long.as_str(), "512"),
        ] {
            let got = artifact_name(bad).unwrap_or_else(|| panic!("{bad:?} accepted"));
            assert!(got.contains(why), "{bad:?}: {got}");
        }
        assert_eq!(artifact_name(&vec!["d"; 32].join("/")), None);
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
            ("/files:watch", SessionOp::WatchFiles),
            ("/metrics", SessionOp::Metrics),
            ("/processes", SessionOp::Processes),
            ("/processes/42", SessionOp::Process(42)),
            ("/processes/7:connect", SessionOp::ConnectProcess(7)),
            ("/processes/7:input", SessionOp::ProcessInput(7)),
            ("/processes/7:closeStdin", SessionOp::CloseStdin(7)),
            ("/processes/7:signal", SessionOp::SignalProcess(7)),
            (
                "/processes/4294967295:resize",
                SessionOp::ResizeProcess(u32::MAX),
            ),
        ] {
            let p = format!("{base}{suffix}");
            assert!(
                matches!(parse_path(&p), Ok(ApiPath::Session { op: o, .. }) if o == op),
                "{p}"
            );
        }
    }

    #[test]
    fn process_routes_take_only_pids_and_known_verbs() {
        let base = format!("/v1/namespaces/a/runtimes/python/sessions/{UID}/processes");
        for bad in [
            "0",
            "01",
            "-1",
            "+1",
            "1.5",
            "4294967296",
            "99999999999",
            "x",
            "",
            ":connect",
        ] {
            assert_eq!(
                parse_path(&format!("{base}/{bad}")),
                Err(PathError::InvalidSegment("process id")),
                "{bad:?}"
            );
        }
        for bad in ["/1:kill", "/1:", "/1/x", "/1:connect/x", "es"] {
            assert_eq!(
                parse_path(&format!("{base}{bad}")),
                Err(PathError::UnknownRoute),
                "{bad:?}"
            );
        }
        assert_eq!(SessionOp::Processes.methods(), Methods::GetOrPost);
        assert!(Methods::GetOrPost.allow("GET") && Methods::GetOrPost.allow("POST"));
        assert!(!Methods::GetOrPost.allow("PUT"));
        assert_eq!(SessionOp::ConnectProcess(1).methods(), Methods::Get);
        assert_eq!(SessionOp::SignalProcess(1).methods(), Methods::Post);
        assert_eq!(Methods::GetOrPost.as_str(), "GET, POST");
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
