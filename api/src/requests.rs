//! The requests a Run's owner receives, built from the Run alone: the same
//! Run at the same attempt always yields the same request, which is what
//! makes re-registration idempotent.

use kruntimes_proto::function::v1 as pb;
use kruntimes_proto::session::v1 as spb;

use crate::Run;

fn run_ref(run: &Run) -> pb::RunRef {
    pb::RunRef {
        namespace: run.namespace_or_default().to_owned(),
        name: run.name_str().to_owned(),
        uid: run.uid_str().to_owned(),
        runtime: run.spec.runtime.clone(),
    }
}

/// The `Register` request of a function Run at `attempt`.
pub fn register_request(run: &Run, attempt: u64) -> pb::RegisterRequest {
    let f = run.spec.mode.function.clone().unwrap_or_default();
    pb::RegisterRequest {
        run: Some(run_ref(run)),
        attempt,
        digest: run.digest(),
        handler: f.handler,
        source: Some(pb::Source {
            inline: run.spec.source.inline.clone().unwrap_or_default(),
            inline_path: run.spec.source.inline_path.clone().unwrap_or_default(),
        }),
        env: run.env().into_iter().collect(),
        limits: Some(pb::Limits {
            max_input_bytes: 0,
            max_output_bytes: 0,
            timeout_ms: f
                .invocation_timeout_seconds
                .unwrap_or(0)
                .saturating_mul(1000),
        }),
        idle_timeout_seconds: f.idle_timeout_seconds.unwrap_or(0),
    }
}

/// The `OpenSession` request of a session Run at `attempt`.
pub fn open_session_request(run: &Run, attempt: u64) -> spb::OpenSessionRequest {
    let s = run.spec.mode.session.clone().unwrap_or_default();
    spb::OpenSessionRequest {
        run: Some(run_ref(run)),
        attempt,
        digest: run.digest(),
        source: run.spec.source.inline.as_ref().map(|inline| pb::Source {
            inline: inline.clone(),
            inline_path: run.spec.source.inline_path.clone().unwrap_or_default(),
        }),
        env: run.env().into_iter().collect(),
        queue_size: s.queue_size.unwrap_or(0),
        operation_timeout_seconds: s.operation_timeout.unwrap_or(0),
        idle_timeout_seconds: s.idle_timeout_seconds.unwrap_or(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{EnvVar, FunctionMode, RunMode, RunSpec, SessionMode, SourceSpec};

    fn function_run() -> Run {
        let mut run = Run::new(
            "hello",
            RunSpec {
                runtime: "python".into(),
                source: SourceSpec {
                    inline: Some("def invoke(r): return r".into()),
                    inline_path: Some("main.py".into()),
                },
                mode: RunMode {
                    function: Some(FunctionMode {
                        handler: "main.invoke".into(),
                        idle_timeout_seconds: Some(60),
                        invocation_timeout_seconds: Some(5),
                    }),
                    ..Default::default()
                },
                env: vec![EnvVar {
                    name: "A".into(),
                    value: "1".into(),
                }],
                ..Default::default()
            },
        );
        run.metadata.namespace = Some("team".into());
        run.metadata.uid = Some("uid-1".into());
        run
    }

    #[test]
    fn register_requests_are_deterministic_and_carry_the_inputs() {
        let run = function_run();
        let a = register_request(&run, 2);
        assert_eq!(a, register_request(&run, 2));
        let r = a.run.unwrap();
        assert_eq!(
            (r.namespace.as_str(), r.name.as_str(), r.uid.as_str()),
            ("team", "hello", "uid-1")
        );
        assert_eq!(a.attempt, 2);
        assert_eq!(a.digest, run.digest());
        assert_eq!(a.handler, "main.invoke");
        assert_eq!(a.limits.unwrap().timeout_ms, 5000);
        assert_eq!(a.idle_timeout_seconds, 60);
        assert_eq!(a.env.get("A").map(String::as_str), Some("1"));
    }

    #[test]
    fn open_session_requests_carry_the_session_bounds() {
        let mut run = function_run();
        run.spec.mode = RunMode {
            session: Some(SessionMode {
                idle_timeout_seconds: Some(60),
                queue_size: Some(4),
                operation_timeout: Some(30),
            }),
            ..Default::default()
        };
        let req = open_session_request(&run, 1);
        assert_eq!(
            (
                req.queue_size,
                req.operation_timeout_seconds,
                req.idle_timeout_seconds
            ),
            (4, 30, 60)
        );
        assert_eq!(req.source.unwrap().inline_path, "main.py");
        run.spec.source = SourceSpec::default();
        assert!(open_session_request(&run, 1).source.is_none());
    }
}
