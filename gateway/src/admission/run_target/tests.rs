use kruntimes_proto::api::ErrorCode;

use super::*;

const UID: &str = "0e0c4f9a-1b2c-4d5e-8f90-123456789abc";

fn invoke_path() -> String {
    format!("/v1/namespaces/team-a/runtimes/python/runs/{UID}:invoke")
}

fn session_path(rest: &str) -> String {
    format!("/v1/namespaces/team-a/runtimes/shell/sessions/{UID}{rest}")
}

#[test]
fn an_invoke_path_names_a_function_run() {
    let path = invoke_path();
    let t = RunTarget::parse(&path).unwrap();
    assert_eq!(
        t,
        RunTarget {
            namespace: "team-a",
            runtime: "python",
            uid: UID,
            session: None,
            artifacts: false,
        }
    );
    assert_eq!(
        (t.methods(), t.verb(), t.mode()),
        (Methods::Post, Verb::Invoke, Mode::Function)
    );
}

#[test]
fn session_paths_name_a_session_run_and_its_route() {
    let cases = [
        ("", SessionOp::Status, Methods::Get),
        ("/operations:execute", SessionOp::Execute, Methods::Post),
        ("/operations:stream", SessionOp::Stream, Methods::Post),
        ("/operations:ws", SessionOp::WebSocket, Methods::Get),
        ("/files", SessionOp::ListFiles, Methods::Get),
        ("/files:content", SessionOp::ReadFile, Methods::Get),
        ("/processes", SessionOp::Processes, Methods::GetOrPost),
        ("/processes/12", SessionOp::Process(12), Methods::Get),
        (
            "/processes/12:connect",
            SessionOp::ConnectProcess(12),
            Methods::Get,
        ),
        (
            "/processes/12:input",
            SessionOp::ProcessInput(12),
            Methods::Post,
        ),
        (
            "/processes/12:resize",
            SessionOp::ResizeProcess(12),
            Methods::Post,
        ),
    ];
    for (rest, op, method) in cases {
        let path = session_path(rest);
        let t = RunTarget::parse(&path).unwrap();
        assert_eq!((t.runtime, t.uid), ("shell", UID));
        assert_eq!(t.session, Some(op), "{rest}");
        assert_eq!(t.methods(), method, "{rest}");
        assert_eq!((t.verb(), t.mode()), (Verb::Session, Mode::Session));
    }
}

#[test]
fn malformed_paths_are_400_invalid_path() {
    let bad = [
        format!("/v1/namespaces/Team-A/runtimes/python/runs/{UID}:invoke"),
        format!("/v1/namespaces/team-a/runtimes/python/runs/{UID}"),
        "/v1/namespaces/team-a/runtimes/python/runs/NOT-HEX:invoke".into(),
        "/v2/anything".into(),
        "/".into(),
    ];
    for path in bad {
        let r = RunTarget::parse(&path).unwrap_err();
        assert_eq!(r.code, ErrorCode::InvalidPath, "{path}");
        assert_eq!(r.status(), 400);
    }
}

#[test]
fn health_and_metrics_paths_are_not_run_routes() {
    for path in ["/healthz", "/readyz", "/metrics"] {
        assert_eq!(
            RunTarget::parse(path).unwrap_err(),
            ApiError::not_a_run_route()
        );
    }
}

#[test]
fn each_route_takes_one_method_and_answers_405_to_others() {
    let (invoke_path, status_path) = (invoke_path(), session_path(""));
    let invoke = RunTarget::parse(&invoke_path).unwrap();
    assert_eq!(invoke.check_method(&Method::POST), Ok(()));
    let r = invoke.check_method(&Method::GET).unwrap_err();
    assert_eq!(
        (r.status(), r.message.as_ref()),
        (405, "this route takes POST")
    );
    let status = RunTarget::parse(&status_path).unwrap();
    assert_eq!(status.check_method(&Method::GET), Ok(()));
    let r = status.check_method(&Method::DELETE).unwrap_err();
    assert_eq!(r.message, "this route takes GET");
}

#[test]
fn authorization_is_asked_about_the_named_run_and_the_routes_subresource() {
    let path = session_path("/files");
    let t = RunTarget::parse(&path).unwrap();
    assert_eq!(
        t.authz_target("sandbox"),
        Target {
            namespace: "team-a",
            name: "sandbox",
            uid: UID,
            verb: Verb::Session,
        }
    );
}
