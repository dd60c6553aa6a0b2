use super::*;

fn run(uid: &str, runtime: &str) -> Option<pb::RunRef> {
    Some(pb::RunRef {
        namespace: "default".into(),
        name: "hello".into(),
        uid: uid.into(),
        runtime: runtime.into(),
    })
}

fn registration() -> pb::RegisterFunctionRequest {
    pb::RegisterFunctionRequest {
        run: run("0f0e-01", "python"),
        attempt: 1,
        handler: "main.invoke".into(),
        source: Some(pb::Source {
            inline: "def invoke(r): return r".into(),
            path: String::new(),
        }),
        ..Default::default()
    }
}

#[test]
fn a_registration_names_a_backend_a_handler_and_safe_paths() {
    let r = register(registration()).unwrap();
    assert_eq!((r.kind, r.attempt), (Backend::Python, 1));
    assert_eq!(r.handler.module, "main");
    assert_eq!(r.source, Some((None, "def invoke(r): return r".into())));
    assert_eq!(r.start_timeout, DEFAULT_START_TIMEOUT);

    let mut by_backend = registration();
    by_backend.run = run("0f0e-01", "my-runtime");
    by_backend.backend = "bash".into();
    by_backend.handler = "hello.greet".into();
    assert_eq!(register(by_backend).unwrap().kind, Backend::Bash);
}

/// A change that breaks a registration request.
type Breaks = Box<dyn Fn(&mut pb::RegisterFunctionRequest)>;

#[test]
fn malformed_registrations_are_invalid_arguments() {
    let cases: Vec<(&str, Breaks)> = vec![
        ("no run", Box::new(|r| r.run = None)),
        (
            "uid as a path",
            Box::new(|r| r.run = run("../etc", "python")),
        ),
        ("uppercase uid", Box::new(|r| r.run = run("ABC", "python"))),
        ("attempt 0", Box::new(|r| r.attempt = 0)),
        (
            "unknown runtime",
            Box::new(|r| r.run = run("0f0e-01", "node")),
        ),
        ("handler", Box::new(|r| r.handler = "main".into())),
        (
            "env name",
            Box::new(|r| {
                r.env.insert("A=B".into(), "x".into());
            }),
        ),
        (
            "source path",
            Box::new(|r| {
                if let Some(s) = r.source.as_mut() {
                    s.path = "../main.py".into();
                }
            }),
        ),
        (
            "absolute source path",
            Box::new(|r| {
                if let Some(s) = r.source.as_mut() {
                    s.path = "/tmp/main.py".into();
                }
            }),
        ),
    ];
    for (what, change) in cases {
        let mut req = registration();
        change(&mut req);
        assert!(
            matches!(register(req), Err(Error::Invalid(_))),
            "{what} must be refused"
        );
    }
}

#[test]
fn invocations_need_a_handle_and_a_deadline() {
    let req = pb::InvokeFunctionRequest {
        run_uid: "0f0e-01".into(),
        handle: "fn-1".into(),
        invocation_id: "inv".into(),
        input: b"{}".to_vec(),
        timeout_ms: 1500,
        max_output_bytes: 0,
    };
    let i = invoke(req.clone()).unwrap();
    assert_eq!(i.timeout, Duration::from_millis(1500));
    assert_eq!(i.max_output, DEFAULT_MAX_OUTPUT);
    assert!(matches!(
        invoke(pb::InvokeFunctionRequest {
            timeout_ms: 0,
            ..req.clone()
        }),
        Err(InvokeError::InvalidInput(_))
    ));
    assert!(matches!(
        invoke(pb::InvokeFunctionRequest {
            input: b"{\"a\": \"\0\"}".to_vec(),
            ..req.clone()
        }),
        Err(InvokeError::InvalidInput(_))
    ));
    assert!(matches!(
        invoke(pb::InvokeFunctionRequest {
            handle: String::new(),
            ..req.clone()
        }),
        Err(InvokeError::InvalidInput(_))
    ));
    let long = invoke(pb::InvokeFunctionRequest {
        timeout_ms: u32::MAX,
        ..req
    })
    .unwrap();
    assert_eq!(long.timeout, MAX_TIMEOUT);
}

#[test]
fn commands_need_a_program_and_stay_in_the_workspace() {
    let req = pb::RunCommandRequest {
        run_uid: "0f0e-02".into(),
        argv: vec!["ls".into()],
        cwd: "a/./b".into(),
        timeout_ms: 1000,
        ..Default::default()
    };
    assert_eq!(command(req.clone()).unwrap().cwd, "a/./b");
    for bad in [
        pb::RunCommandRequest {
            argv: vec![],
            ..req.clone()
        },
        pb::RunCommandRequest {
            argv: vec![String::new()],
            ..req.clone()
        },
        pb::RunCommandRequest {
            argv: vec!["a\0b".into()],
            ..req.clone()
        },
        pb::RunCommandRequest {
            cwd: "../x".into(),
            ..req.clone()
        },
        pb::RunCommandRequest {
            cwd: "/etc".into(),
            ..req.clone()
        },
        pb::RunCommandRequest {
            timeout_ms: 0,
            ..req.clone()
        },
    ] {
        assert!(command(bad.clone()).is_err(), "{bad:?}");
    }
}

#[test]
fn file_operations_refuse_escaping_paths_and_missing_ops() {
    use pb::file_operation_request::Op;
    let op = |op| pb::FileOperationRequest {
        run_uid: "0f0e-02".into(),
        op,
    };
    assert!(file_op(op(None)).is_err());
    assert!(
        file_op(op(Some(Op::Rename(pb::RenameRequest {
            from: "a".into(),
            to: "../b".into(),
        }))))
        .is_err()
    );
    assert_eq!(
        file_op(op(Some(Op::Mkdir(pb::PathRequest { path: "d".into() })))).unwrap(),
        ("0f0e-02".to_owned(), FileOp::Mkdir { path: "d".into() })
    );
}

#[test]
fn sessions_default_their_source_to_main_sh() {
    let o = open(pb::OpenSessionRequest {
        run: run("0f0e-02", "bash"),
        attempt: 2,
        source: Some(pb::Source {
            inline: "echo hi".into(),
            path: String::new(),
        }),
        env: Default::default(),
        artifacts: true,
        inputs: true,
    })
    .unwrap();
    assert_eq!(o.source, Some(("main.sh".into(), "echo hi".into())));
    assert!(o.artifacts);
    assert!(o.inputs);
}

#[test]
fn staged_paths_are_relative_without_empty_dot_or_dotdot_segments() {
    assert_eq!(staged_path("a/b.txt").unwrap(), ["a", "b.txt"]);
    assert_eq!(staged_path(".hidden").unwrap(), [".hidden"]);
    for bad in [
        "", "/abs", "../x", "a/../b", "a//b", "./a", "a/", "a/.", "a\0b",
    ] {
        assert!(staged_path(bad).is_err(), "{bad:?}");
    }
    assert!(staged_path(&"a".repeat(256)).is_err());
    assert!(staged_path(&"a/".repeat(2049)).is_err());
}
