//! The request a Run's owner receives, built from the Run alone: the same
//! Run at the same attempt always yields the same `Assign` request, which is
//! what makes re-registration idempotent.

use kruntimes_proto::agent::v1 as pb;
use kruntimes_proto::agent::v1::assign_request::Mode;
use kruntimes_proto::runtime::v1 as rt;

use crate::Run;

fn run_ref(run: &Run) -> rt::RunRef {
    rt::RunRef {
        namespace: run.namespace_or_default().to_owned(),
        name: run.name_str().to_owned(),
        uid: run.uid_str().to_owned(),
        runtime: run.spec.runtime.clone(),
    }
}

/// The `Assign` request of a Run at `attempt`; `None` for a Run with no
/// mode (an invalid one).
pub fn assign_request(run: &Run, attempt: u64) -> Option<pb::AssignRequest> {
    let mode = if let Some(f) = &run.spec.mode.function {
        Mode::Function(pb::FunctionAssignment {
            handler: f.handler.clone(),
            timeout_ms: f
                .invocation_timeout_seconds
                .unwrap_or(0)
                .saturating_mul(1000),
            max_input_bytes: 0,
            max_output_bytes: 0,
            idle_timeout_seconds: f.idle_timeout_seconds.unwrap_or(0),
        })
    } else if let Some(s) = &run.spec.mode.session {
        Mode::Session(pb::SessionAssignment {
            queue_size: s.queue_size.unwrap_or(0),
            operation_timeout_seconds: s.operation_timeout.unwrap_or(0),
            idle_timeout_seconds: s.idle_timeout_seconds.unwrap_or(0),
        })
    } else if let Some(t) = &run.spec.mode.task {
        Mode::Task(pb::TaskAssignment {
            entrypoint: t.entrypoint.clone().unwrap_or_default(),
            args: t.args.clone(),
        })
    } else {
        return None;
    };
    Some(pb::AssignRequest {
        run: Some(run_ref(run)),
        attempt,
        digest: run.digest(),
        source: run.spec.source.inline.as_ref().map(|inline| rt::Source {
            inline: inline.clone(),
            path: run.spec.source.inline_path.clone().unwrap_or_default(),
        }),
        env: run.env().into_iter().collect(),
        mode: Some(mode),
        inputs: run
            .spec
            .inputs
            .iter()
            .flat_map(|i| &i.artifacts)
            .map(crate::InputArtifact::to_wire)
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{EnvVar, FunctionMode, RunMode, RunSpec, SessionMode, SourceSpec, TaskMode};

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
    fn function_assignments_are_deterministic_and_carry_the_inputs() {
        let run = function_run();
        let a = assign_request(&run, 2).unwrap();
        assert_eq!(Some(&a), assign_request(&run, 2).as_ref());
        let r = a.run.unwrap();
        assert_eq!(
            (r.namespace.as_str(), r.name.as_str(), r.uid.as_str()),
            ("team", "hello", "uid-1")
        );
        assert_eq!(a.attempt, 2);
        assert_eq!(a.digest, run.digest());
        assert_eq!(a.source.unwrap().path, "main.py");
        assert_eq!(a.env.get("A").map(String::as_str), Some("1"));
        match a.mode {
            Some(Mode::Function(f)) => {
                assert_eq!(f.handler, "main.invoke");
                assert_eq!(f.timeout_ms, 5000);
                assert_eq!(f.idle_timeout_seconds, 60);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn session_assignments_carry_the_session_bounds() {
        let mut run = function_run();
        run.spec.mode = RunMode {
            session: Some(SessionMode {
                idle_timeout_seconds: Some(60),
                queue_size: Some(4),
                operation_timeout: Some(30),
            }),
            ..Default::default()
        };
        let req = assign_request(&run, 1).unwrap();
        match &req.mode {
            Some(Mode::Session(s)) => assert_eq!(
                (
                    s.queue_size,
                    s.operation_timeout_seconds,
                    s.idle_timeout_seconds
                ),
                (4, 30, 60)
            ),
            other => panic!("{other:?}"),
        }
        assert_eq!(req.source.unwrap().path, "main.py");
        run.spec.source = SourceSpec::default();
        assert!(assign_request(&run, 1).unwrap().source.is_none());
    }

    #[test]
    fn a_task_assignment_carries_its_entrypoint_and_args() {
        let mut run = function_run();
        run.spec.mode = RunMode {
            task: Some(TaskMode {
                entrypoint: Some("run.py".into()),
                args: vec!["--n".into(), "3".into()],
            }),
            ..Default::default()
        };
        let req = assign_request(&run, 3).unwrap();
        assert_eq!(req.attempt, 3);
        match req.mode {
            Some(Mode::Task(t)) => {
                assert_eq!(t.entrypoint, "run.py");
                assert_eq!(t.args, ["--n", "3"]);
            }
            other => panic!("{other:?}"),
        }
        run.spec.mode = RunMode::default();
        assert_eq!(assign_request(&run, 1), None);
    }
}
