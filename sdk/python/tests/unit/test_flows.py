"""The flows behind the SDK's methods, against a scripted transport: paging,
exists, no implicit retry, endpoint caching and clean-up of a failed create."""

import pytest

import kruntimes
from kruntimes import Sandbox
from kruntimes._runs import KubernetesRuns, StateDirRuns
from kruntimes._wire import drive

from .fakes import SESSION, client, error, ok, sandbox


def names(n):
    return [f"f{i:04d}" for i in range(n)]


def paged(all_names, limit_seen):
    """A files route serving `all_names` in pages of the requested limit."""

    def answer(call):
        assert call.url == f"{SESSION}/files"
        limit = int(call.params["limit"])
        limit_seen.append(limit)
        after = call.params.get("pageToken")
        rest = [n for n in all_names if after is None or n > after]
        page = rest[:limit]
        doc = {"entries": [{"name": n, "type": "file", "size": 1} for n in page]}
        if len(rest) > limit:
            doc["nextPageToken"] = page[-1]
        return ok(doc)

    return answer


def test_list_pages_through_the_whole_directory():
    seen = []
    sb, fake = sandbox(paged(names(2500), seen))
    entries = sb.files.list("big")
    assert [e.name for e in entries] == names(2500)
    assert entries[0].path == "big/f0000" and not entries[0].is_dir
    assert seen == [1000, 1000, 1000]
    assert [c.params.get("pageToken") for c in fake.calls] == [None, "f0999", "f1999"]


def test_list_page_hands_out_one_page_and_its_token():
    sb, _ = sandbox(paged(names(5), []))
    page = sb.files.list_page("", limit=2)
    assert [e.name for e in page.entries] == ["f0000", "f0001"] and page.next_page_token == "f0001"
    last = sb.files.list_page("", limit=10, page_token="f0003")
    assert [e.name for e in last.entries] == ["f0004"] and last.next_page_token is None


def test_exists_looks_in_the_parent_and_stops_past_the_name():
    seen = []
    sb, fake = sandbox(paged(names(2500), seen))
    assert sb.files.exists("big/f0005")
    assert len(fake.calls) == 1
    assert sb.files.exists("big/f2400")
    assert len(fake.calls) == 1 + 3
    assert not sb.files.exists("big/f0005x")
    assert fake.calls[-1].params["path"] == "big"
    assert sb.files.exists("") and sb.files.exists(".")


def test_exists_is_false_for_a_missing_or_non_directory_parent():
    sb, _ = sandbox(lambda call: error(404, "NotFound"))
    assert not sb.files.exists("nope/x")
    sb, _ = sandbox(lambda call: error(400, "BadRequest"))
    assert not sb.files.exists("file.txt/x")
    sb, _ = sandbox(lambda call: error(400, "InvalidPath"))
    with pytest.raises(kruntimes.InvalidPathError):
        sb.files.exists("../x")


@pytest.mark.parametrize("status,code,cls", [(429, "Busy", kruntimes.BusyError),
                                             (503, "NotReady", kruntimes.NotReadyError),
                                             (500, "FunctionError", kruntimes.FunctionError),
                                             (504, "DeadlineExceeded", kruntimes.DeadlineExceededError)])
def test_an_invoke_is_sent_once_whatever_the_answer(status, code, cls):
    c, fake = client(lambda call: error(status, code, retry_after=1))
    with pytest.raises(cls) as e:
        c.function(endpoint="https://gw/v1/namespaces/a/runtimes/python/runs/u:invoke").invoke({"x": 1})
    assert len(fake.calls) == 1
    assert e.value.retry_after == 1.0


def test_session_operations_are_sent_once_whatever_the_answer():
    sb, fake = sandbox(lambda call: error(429, "Busy", retry_after=1))
    with pytest.raises(kruntimes.BusyError):
        sb.commands.run("make")
    with pytest.raises(kruntimes.BusyError):
        sb.files.write("a", b"x")
    assert len(fake.calls) == 2


def test_a_file_over_the_limit_is_refused_before_it_is_sent():
    sb, fake = sandbox(lambda call: error(500, "Internal"))
    with pytest.raises(kruntimes.PayloadTooLargeError) as e:
        sb.files.write("big.bin", bytes(32 * 1024 * 1024 + 1))
    assert (e.value.status, e.value.source) == (413, "client") and "at most 32 MiB" in e.value.message
    assert fake.calls == []


def test_a_file_operation_that_failed_raises_with_its_result():
    sb, _ = sandbox(lambda call: ok({"operationId": "op-1", "state": "Failed", "error": "a not found"}))
    with pytest.raises(kruntimes.OperationFailedError) as e:
        sb.files.rename("a", "b")
    assert e.value.result.error == "a not found" and "rename" in e.value.message


def test_command_bodies_carry_shell_or_argv_and_options():
    sb, fake = sandbox(lambda call: ok({"operationId": "op-1", "state": "Failed", "exitCode": 2}))
    r = sb.commands.run(["ls", "-l"], timeout=5, cwd="w", env={"A": 1}, stdin="in")
    assert fake.calls[0].json == {"command": {"argv": ["ls", "-l"]}, "timeoutSeconds": 5, "cwd": "w",
                                  "env": {"A": "1"}, "stdin": "in"}
    assert (r.state, r.exit_code, r.ok) == ("Failed", 2, False)
    with pytest.raises(kruntimes.CommandExitError):
        r.check()
    sb.commands.run("echo $X")
    assert fake.calls[1].json == {"command": {"shell": "echo $X"}}
    with pytest.raises(ValueError):
        sb.commands.run([])


def kube_run(phase, endpoint=None, mode="function", bundle=None):
    status = {"phase": phase}
    if endpoint:
        status["endpoint"] = {"url": endpoint, **({"caBundle": bundle} if bundle else {})}
    return {"metadata": {"name": "hello", "namespace": "a", "uid": "u-1"},
            "spec": {"runtime": "python", "mode": {mode: {}}}, "status": status}


def test_a_function_is_looked_up_once_and_again_after_a_404():
    url = "https://gw/v1/namespaces/a/runtimes/python/runs/u-1:invoke"
    answers = {"invoke": ok({"message": "hi"})}

    def answer(call):
        if call.target == "kubernetes":
            assert call.url == "/apis/kruntimes.io/v1alpha1/namespaces/a/runs/hello"
            # "LS0t" is base64 of "---".
            return ok(kube_run("Ready", url, bundle="LS0t"))
        return answers["invoke"]

    c, fake = client(answer)
    c._runs = KubernetesRuns()
    fn = c.function("hello", namespace="a")
    assert fn.invoke({"name": "x"}) == {"message": "hi"}
    assert fn.invoke() == {"message": "hi"}
    assert [call.target for call in fake.calls] == ["kubernetes", "gateway", "gateway"]
    assert fake.calls[1].ca_pem == "---" and fake.calls[2].content == b"{}"
    answers["invoke"] = error(404, "NotFound")
    with pytest.raises(kruntimes.NotFoundError):
        fn.invoke()
    answers["invoke"] = ok(1)
    assert fn.invoke() == 1
    assert [call.target for call in fake.calls][3:] == ["gateway", "kubernetes", "gateway"]


def test_a_function_without_an_endpoint_is_not_ready_and_a_session_is_not_a_function():
    c, _ = client(lambda call: ok(kube_run("Pending")))
    c._runs = KubernetesRuns()
    with pytest.raises(kruntimes.NotReadyError):
        c.function("hello").invoke()
    c, _ = client(lambda call: ok(kube_run("Ready", SESSION, mode="session")))
    c._runs = KubernetesRuns()
    with pytest.raises(kruntimes.NotFoundError) as e:
        c.function("hello").invoke()
    assert "session" in str(e.value)


def session_run(phase, reason="", message=""):
    doc = kube_run(phase, mode="session")
    doc["status"].update(reason=reason, message=message)
    return doc


def create_sandbox_on(run, other, expect, **kwargs):
    """Sandbox.create("hello" in namespace a) against an API server that echoes the create, answers
    every GET with ``run`` and every other request with ``other(call)``; expects ``expect`` raised
    and returns it with the fake's calls."""

    def answer(call):
        if call.method == "POST":
            return ok(call.json, 201)
        if call.method == "GET":
            return ok(run)
        return other(call)

    c, fake = client(answer)
    c._runs = KubernetesRuns()
    with pytest.raises(expect) as e:
        Sandbox.create(c, name="hello", namespace="a", **kwargs)
    return e.value, fake.calls


def test_a_sandbox_that_ends_before_ready_is_deleted():
    def delete(call):
        assert call.method == "DELETE"
        assert call.url.endswith("/namespaces/a/runs/hello")
        return ok({})

    e, calls = create_sandbox_on(session_run("Failed", "RegistrationFailed", "no bash"), delete,
                                 kruntimes.RunEndedError, env={"B": "2", "A": "1"}, queue_size=0, timeout=60)
    assert (e.phase, e.reason) == ("Failed", "RegistrationFailed")
    assert calls[0].json["spec"] == {"runtime": "bash",
                                     "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                                     "mode": {"session": {"queueSize": 0}}, "timeout": 60}
    assert [call.method for call in calls] == ["POST", "GET", "DELETE"]


def test_a_sandbox_that_waits_too_long_says_why_and_is_deleted_even_if_already_gone():
    def gone(call):
        assert call.method == "DELETE"
        return error(404, "NotFound")

    waiting = session_run("Pending", "NoIdlePod", "0/2 bash Pods can take this session: 2 busy (a session needs an idle Pod)")
    e, calls = create_sandbox_on(waiting, gone, kruntimes.WaitTimeoutError, ready_timeout=0)
    assert (e.phase, e.reason) == ("Pending", "NoIdlePod")
    assert str(e).endswith("Ready not reached within 0s (phase Pending, NoIdlePod: 0/2 bash Pods can "
                           "take this session: 2 busy (a session needs an idle Pod))"), str(e)
    assert [call.method for call in calls] == ["POST", "GET", "DELETE"]


def test_a_caller_who_may_not_delete_runs_still_ends_the_sandbox_that_never_came_up():
    def forbidden(call):
        if call.method == "DELETE":
            return error(403, "Forbidden")
        assert call.method == "PATCH"
        assert call.content == b'{"spec": {"termination": {"mode": "Immediate"}}}'
        return ok({})

    _, calls = create_sandbox_on(session_run("Pending"), forbidden, kruntimes.WaitTimeoutError, ready_timeout=0)
    assert [call.method for call in calls] == ["POST", "GET", "DELETE", "PATCH"]


def test_connecting_by_endpoint_probes_the_status_route_only():
    c, fake = client(lambda call: ok({"uid": "u-1", "attempt": 1, "pendingOperations": 0, "idleMs": 5,
                                      "closing": False}))
    sb = Sandbox.connect(c, endpoint=SESSION + "/")
    assert (sb.namespace, sb.uid, sb.endpoint) == ("default", "u-1", SESSION)
    assert sb.status().idle_ms == 5
    assert [(call.method, call.url) for call in fake.calls] == [("GET", SESSION)] * 2
    with pytest.raises(kruntimes.UnsupportedError):
        sb.close()
    with pytest.raises(kruntimes.ConfigError):
        Sandbox.connect(c, endpoint="https://gw/v1/namespaces/a/runtimes/python/runs/u:invoke")


def test_a_client_without_a_control_plane_cannot_create_sandboxes():
    c, _ = client(lambda call: ok({}))
    with pytest.raises(kruntimes.UnsupportedError):
        Sandbox.create(c)
    with pytest.raises(ValueError):
        c.function()


def test_the_state_dir_store_writes_and_terminates_manifests(tmp_path):
    (tmp_path / "runs.json").write_text('{"runs": [{"name": "s", "namespace": "default", "uid": "u", '
                                        '"runtime": "bash", "mode": "session", "phase": "Ready", "endpoint": "e"}]}')
    runs_dir = tmp_path / "runs"
    runs_dir.mkdir()
    store = StateDirRuns(tmp_path, str(runs_dir))
    run = drive(store.get("default", "s"), lambda call: pytest.fail("no I/O"))
    assert (run.uid, run.phase, run.endpoint, run.mode, run.task) == ("u", "Ready", "e", "session", None)
    assert drive(store.get("default", "other"), lambda call: pytest.fail("no I/O")) is None
    session = {"metadata": {"name": "n", "namespace": "default"}, "spec": {"mode": {"session": {}}}}
    drive(store.create(session), lambda c: None)
    with pytest.raises(kruntimes.ConflictError):
        drive(store.create(session), lambda c: None)
    # A Run krt up serves from a file of its own (krt up --runs) is not created twice.
    with pytest.raises(kruntimes.ConflictError) as e:
        drive(store.create({"metadata": {"name": "s", "namespace": "default"}, "spec": {"mode": {"session": {}}}}),
              lambda c: None)
    assert "phase Ready" in e.value.message
    drive(store.terminate("default", "n", "Drain"), lambda c: None)
    import json

    doc = json.loads((runs_dir / "session-default-n.yaml").read_text())
    assert doc["spec"]["termination"] == {"mode": "Drain"}
    assert sorted(p.name for p in runs_dir.iterdir()) == ["session-default-n.yaml"]
    with pytest.raises(kruntimes.UnsupportedError):
        drive(store.terminate("default", "not-mine", "Drain"), lambda c: None)
    drive(store.delete("default", "n"), lambda c: None)
    assert list(runs_dir.iterdir()) == []
    drive(store.delete("default", "n"), lambda c: None)  # already gone: no error


def test_a_long_wait_is_logged_at_each_change_and_a_quick_one_not(monkeypatch, caplog):
    from kruntimes import _runs
    from kruntimes._runs import RunInfo, RunStore, wait_for
    from kruntimes._wire import done

    class Phases(RunStore):
        def __init__(self, phases):
            self.phases = list(phases)

        def get(self, namespace, name):
            phase, reason = self.phases.pop(0) if len(self.phases) > 1 else self.phases[0]
            return done(RunInfo(name=name, namespace=namespace, uid="u", runtime="bash", mode="session",
                                phase=phase, reason=reason))

    def no_send(call):
        raise AssertionError(call)

    ready = lambda r: r.phase == "Ready"  # noqa: E731
    monkeypatch.setattr(_runs, "QUIET_WAIT", 0.0)
    monkeypatch.setattr(_runs.time, "sleep", lambda s: None, raising=False)
    caplog.set_level("INFO", logger="kruntimes")
    store = Phases([("Pending", "NoIdlePod"), ("Pending", "NoIdlePod"), ("Running", "Registering"), ("Ready", "")])
    drive(wait_for(store, "a", "box", ready, "Ready", 30), no_send)
    assert [r.getMessage() for r in caplog.records] == [
        "waiting for run a/box (Ready): phase Pending, NoIdlePod",
        "waiting for run a/box (Ready): phase Running, Registering",
    ]
    caplog.clear()
    monkeypatch.setattr(_runs, "QUIET_WAIT", 3600.0)
    drive(wait_for(Phases([("Pending", ""), ("Ready", "")]), "a", "box", ready, "Ready", 30), no_send)
    assert caplog.records == []
