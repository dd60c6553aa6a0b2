//! Turning a `Register` request into what the Runtime Server is asked to
//! register: the backend, the bounds (clamped to runtimed's), and the
//! `RegisterFunction` request. Pure; the server validates the handler,
//! the environment and the source path itself.

use std::time::Duration;

use kruntimes_proto::function::v1 as pb;
use kruntimes_proto::runtime::v1 as rt;

use super::backend::Kind;
use super::config::{EngineConfig, MAX_IO_BYTES};
use super::registered::Bounds;
use crate::registration::RegisterError;
use crate::runtime;

/// The bounds a registration asks for, clamped to runtimed's.
pub fn bounds(cfg: &EngineConfig, req: &pb::RegisterRequest) -> Bounds {
    let limits = req.limits.unwrap_or_default();
    let bound = |v: u64| if v == 0 { MAX_IO_BYTES } else { v.min(MAX_IO_BYTES) } as usize;
    Bounds {
        max_input: bound(limits.max_input_bytes),
        max_output: bound(limits.max_output_bytes),
        timeout: match limits.timeout_ms {
            0 => cfg.default_timeout,
            ms => Duration::from_millis(ms.into()).min(cfg.max_timeout),
        },
        idle_timeout: (req.idle_timeout_seconds > 0)
            .then(|| Duration::from_secs(req.idle_timeout_seconds.into())),
    }
}

/// A registration, prepared.
#[derive(Debug, Clone, PartialEq)]
pub struct Prepared {
    /// The built-in backend; `None`: the Runtime Server chooses (a custom
    /// server, or the built-in one by the Run's runtime name, which rejects
    /// a runtime it has no backend for).
    pub kind: Option<Kind>,
    /// The bounds.
    pub bounds: Bounds,
    /// What the Runtime Server is asked.
    pub request: rt::RegisterFunctionRequest,
}

/// Resolves the backend and the bounds and builds the server's request.
pub fn prepare(
    cfg: &EngineConfig,
    run: &pb::RunRef,
    req: pb::RegisterRequest,
) -> Result<Prepared, RegisterError> {
    let kind = cfg.backend.or_else(|| Kind::for_runtime(&run.runtime));
    let bounds = bounds(cfg, &req);
    let request = rt::RegisterFunctionRequest {
        run: Some(runtime::run_ref(run)),
        attempt: req.attempt,
        handler: req.handler,
        source: req.source.as_ref().map(runtime::source),
        env: req.env,
        start_timeout_ms: u32::try_from(cfg.start_timeout.as_millis()).unwrap_or(u32::MAX),
        backend: kind.map(Kind::as_str).unwrap_or_default().into(),
    };
    Ok(Prepared {
        kind,
        bounds,
        request,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> EngineConfig {
        EngineConfig {
            default_timeout: Duration::from_secs(30),
            max_timeout: Duration::from_secs(300),
            start_timeout: Duration::from_secs(30),
            backend: None,
        }
    }

    #[test]
    fn bounds_default_to_and_never_exceed_runtimeds_limits() {
        let mut req = pb::RegisterRequest::default();
        let b = bounds(&cfg(), &req);
        assert_eq!((b.max_input, b.max_output), (1 << 20, 1 << 20));
        assert_eq!((b.timeout, b.idle_timeout), (Duration::from_secs(30), None));
        req.limits = Some(pb::Limits {
            max_input_bytes: 10,
            max_output_bytes: 10 << 20,
            timeout_ms: 3_600_000,
        });
        req.idle_timeout_seconds = 5;
        let b = bounds(&cfg(), &req);
        assert_eq!((b.max_input, b.max_output), (10, 1 << 20));
        assert_eq!(b.timeout, Duration::from_secs(300));
        assert_eq!(b.idle_timeout, Some(Duration::from_secs(5)));
    }

    fn run(runtime: &str) -> pb::RunRef {
        pb::RunRef {
            namespace: "default".into(),
            name: "hello".into(),
            uid: "uid-1".into(),
            runtime: runtime.into(),
        }
    }

    #[test]
    fn the_backend_comes_from_the_pod_or_else_the_runs_runtime() {
        let req = || pb::RegisterRequest {
            attempt: 3,
            handler: "main.invoke".into(),
            source: Some(pb::Source {
                inline: "x".into(),
                inline_path: "src/main.py".into(),
            }),
            ..Default::default()
        };
        let p = prepare(&cfg(), &run("python"), req()).unwrap();
        assert_eq!(p.kind, Some(Kind::Python));
        assert_eq!(p.request.backend, "python");
        assert_eq!(p.request.attempt, 3);
        assert_eq!(p.request.source.unwrap().path, "src/main.py");
        assert_eq!(p.request.start_timeout_ms, 30_000);
        // A runtime without a built-in backend is the server's to serve
        // (or to reject): runtimed names no backend.
        let custom = prepare(&cfg(), &run("node"), req()).unwrap();
        assert_eq!(custom.kind, None);
        assert_eq!(custom.request.backend, "");
        let pod = EngineConfig {
            backend: Some(Kind::Bash),
            ..cfg()
        };
        assert_eq!(
            prepare(&pod, &run("node"), req()).unwrap().request.backend,
            "bash"
        );
    }
}
