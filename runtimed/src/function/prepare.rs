//! Turning a `Register` request into a started function: the backend and
//! handler, the bounds, the environment, a fresh working directory with the
//! inline source, and the backend started (a Python import, a Bash check).

use std::time::Duration;

use kruntimes_proto::function::v1 as pb;

use super::backend::{self, Backend, Kind};
use super::config::{EngineConfig, MAX_IO_BYTES};
use super::registered::{Bounds, Function};
use crate::registration::RegisterError;
use crate::source;

/// What preparing a function needs besides the request.
pub struct Context<'a> {
    /// The engine's configuration.
    pub cfg: &'a EngineConfig,
    /// The Run's working directory.
    pub workdir: std::path::PathBuf,
    /// Pre-started Python interpreters.
    pub spares: Option<std::sync::Arc<backend::SparePool>>,
}

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

/// Where inline source goes when `inlinePath` is not set: the handler's
/// module file.
fn default_source_path(kind: Kind, module: &str) -> String {
    match kind {
        Kind::Python => format!("{}.py", module.replace('.', "/")),
        Kind::Bash => format!("{module}.sh"),
    }
}

/// Validates the request, lays out the working directory and starts the
/// backend; a failed start removes the directory again.
pub async fn prepare(
    ctx: Context<'_>,
    run: &pb::RunRef,
    req: pb::RegisterRequest,
) -> Result<Function, RegisterError> {
    let kind = ctx
        .cfg
        .backend
        .or_else(|| Kind::for_runtime(&run.runtime))
        .ok_or_else(|| {
            RegisterError::Invalid(format!("runtime {:?} has no built-in backend", run.runtime))
        })?;
    let handler = backend::parse_handler(kind, &req.handler).map_err(RegisterError::Invalid)?;
    let bounds = bounds(ctx.cfg, &req);
    for key in req.env.keys() {
        if key.is_empty() || key.contains('=') || key.contains('\0') {
            return Err(RegisterError::Invalid(format!("invalid env name {key:?}")));
        }
    }
    let workdir = ctx.workdir;
    if workdir.exists() {
        std::fs::remove_dir_all(&workdir)?;
    }
    std::fs::create_dir_all(&workdir)?;
    if let Some(src) = req.source.as_ref().filter(|s| !s.inline.is_empty()) {
        let path = if src.inline_path.is_empty() {
            default_source_path(kind, &handler.module)
        } else {
            src.inline_path.clone()
        };
        source::write_inline(&workdir, &path, src.inline.as_bytes())?;
    }
    let spec = backend::Spec {
        run_uid: run.uid.clone(),
        workdir: workdir.clone(),
        handler,
        env: req.env.into_iter().collect(),
        python: ctx.cfg.python.clone(),
        start_timeout: ctx.cfg.start_timeout,
        spares: ctx.spares,
    };
    let backend = match Backend::start(kind, spec).await {
        Ok(b) => b,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&workdir);
            return Err(RegisterError::Load(e.to_string()));
        }
    };
    Ok(Function::new(kind, bounds, workdir, backend))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> EngineConfig {
        EngineConfig {
            python: "python3".into(),
            default_timeout: Duration::from_secs(30),
            max_timeout: Duration::from_secs(300),
            start_timeout: Duration::from_secs(30),
            python_spares: 0,
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

    #[test]
    fn inline_source_defaults_to_the_handlers_module_file() {
        assert_eq!(default_source_path(Kind::Python, "pkg.main"), "pkg/main.py");
        assert_eq!(default_source_path(Kind::Bash, "hello"), "hello.sh");
    }
}
