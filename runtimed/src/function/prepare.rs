//! Turning a function assignment into what the Runtime Server is asked to
//! register: the backend, the bounds (clamped to runtimed's), and the
//! `RegisterFunction` request. Pure; the server validates the handler,
//! the environment and the source path itself.

use std::time::Duration;

use kruntimes_proto::agent::v1::FunctionAssignment;
use kruntimes_proto::runtime::Backend;
use kruntimes_proto::runtime::v1 as rt;

use super::config::{EngineConfig, MAX_IO_BYTES};
use super::registered::Bounds;
use crate::registration::Assignment;

/// The bounds a function asks for, clamped to runtimed's.
pub fn bounds(cfg: &EngineConfig, f: &FunctionAssignment) -> Bounds {
    let bound = |v: u64| if v == 0 { MAX_IO_BYTES } else { v.min(MAX_IO_BYTES) } as usize;
    Bounds {
        max_input: bound(f.max_input_bytes),
        max_output: bound(f.max_output_bytes),
        timeout: match f.timeout_ms {
            0 => cfg.default_timeout,
            ms => Duration::from_millis(ms.into()).min(cfg.max_timeout),
        },
        idle_timeout: (f.idle_timeout_seconds > 0)
            .then(|| Duration::from_secs(f.idle_timeout_seconds.into())),
    }
}

/// A registration, prepared.
#[derive(Debug, Clone, PartialEq)]
pub struct Prepared {
    /// The built-in backend; `None`: the Runtime Server chooses (a custom
    /// server, or the built-in one by the Run's runtime name, which rejects
    /// a runtime it has no backend for).
    pub kind: Option<Backend>,
    /// The bounds.
    pub bounds: Bounds,
    /// What the Runtime Server is asked.
    pub request: rt::RegisterFunctionRequest,
}

/// Resolves the backend and the bounds and builds the server's request.
pub fn prepare(cfg: &EngineConfig, a: &Assignment, f: &FunctionAssignment) -> Prepared {
    let kind = cfg.backend.or_else(|| Backend::for_runtime(&a.run.runtime));
    let request = rt::RegisterFunctionRequest {
        run: Some(a.run.clone()),
        attempt: a.attempt,
        handler: f.handler.clone(),
        source: a.source.clone(),
        env: a.env.clone(),
        start_timeout_ms: u32::try_from(cfg.start_timeout.as_millis()).unwrap_or(u32::MAX),
        backend: kind.map(Backend::as_str).unwrap_or_default().into(),
        // The engine's to say (it holds the store).
        artifacts: false,
    };
    Prepared {
        kind,
        bounds: bounds(cfg, f),
        request,
    }
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
        let b = bounds(&cfg(), &FunctionAssignment::default());
        assert_eq!((b.max_input, b.max_output), (1 << 20, 1 << 20));
        assert_eq!((b.timeout, b.idle_timeout), (Duration::from_secs(30), None));
        let f = FunctionAssignment {
            max_input_bytes: 10,
            max_output_bytes: 10 << 20,
            timeout_ms: 3_600_000,
            idle_timeout_seconds: 5,
            ..Default::default()
        };
        let b = bounds(&cfg(), &f);
        assert_eq!((b.max_input, b.max_output), (10, 1 << 20));
        assert_eq!(b.timeout, Duration::from_secs(300));
        assert_eq!(b.idle_timeout, Some(Duration::from_secs(5)));
    }

    fn assignment(runtime: &str) -> Assignment {
        Assignment {
            run: rt::RunRef {
                namespace: "default".into(),
                name: "hello".into(),
                uid: "uid-1".into(),
                runtime: runtime.into(),
            },
            attempt: 3,
            digest: "d".into(),
            source: Some(rt::Source {
                inline: "x".into(),
                path: "src/main.py".into(),
            }),
            env: Default::default(),
            inputs: Vec::new(),
        }
    }

    #[test]
    fn the_backend_comes_from_the_pod_or_else_the_runs_runtime() {
        let f = FunctionAssignment {
            handler: "main.invoke".into(),
            ..Default::default()
        };
        let p = prepare(&cfg(), &assignment("python"), &f);
        assert_eq!(p.kind, Some(Backend::Python));
        assert_eq!(p.request.backend, "python");
        assert_eq!(p.request.attempt, 3);
        assert_eq!(p.request.handler, "main.invoke");
        assert_eq!(p.request.source.unwrap().path, "src/main.py");
        assert_eq!(p.request.start_timeout_ms, 30_000);
        // A runtime without a built-in backend is the server's to serve
        // (or to reject): runtimed names no backend.
        let custom = prepare(&cfg(), &assignment("node"), &f);
        assert_eq!(custom.kind, None);
        assert_eq!(custom.request.backend, "");
        let pod = EngineConfig {
            backend: Some(Backend::Bash),
            ..cfg()
        };
        assert_eq!(
            prepare(&pod, &assignment("node"), &f).request.backend,
            "bash"
        );
    }
}
