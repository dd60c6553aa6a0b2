"""Task Runs against a scripted API server and a state directory: the manifest
a call writes, the result of an exit whatever its code, the typed error of
each other end, removal, client-side refusals, and the async twin."""

import asyncio
import json
from datetime import datetime, timedelta, timezone

import pytest

import kruntimes
from kruntimes import AsyncClient, TaskResult
from kruntimes._runs import KubernetesRuns, StateDirRuns, parse_time

from .fakes import AsyncFake, client, error, ok

RUNS = "/apis/kruntimes.io/v1alpha1/namespaces"


def task_run(phase, reason="", message="", task=None, name="t", namespace="default"):
    status = {"phase": phase, "reason": reason, "message": message, "attempt": 1}
    if task is not None:
        status["task"] = task
    return {"metadata": {"name": name, "namespace": namespace, "uid": "u-1"},
            "spec": {"runtime": "python", "mode": {"task": {}}}, "status": status}


EXITED_0 = {"attempt": 1, "exitCode": 0, "stdoutTail": "hi\n", "stderrTail": "careful\n",
            "startedAt": "2026-12-07T12:03:00Z", "finishedAt": "2026-12-07T12:03:00.250Z"}


def api(run, other=lambda call: pytest.fail(f"unexpected {call.method} {call.url}")):
    """An API server that echoes a create, answers every GET with ``run`` and the rest with ``other``."""

    def answer(call):
        assert call.target == "kubernetes"
        if call.method == "POST":
            return ok(call.json, 201)
        if call.method == "GET":
            return ok(run)
        return other(call)

    c, fake = client(answer)
    c._runs = KubernetesRuns()
    return c, fake


def test_an_inline_task_is_created_as_krt_run_would_and_its_result_read_from_its_status():
    c, fake = api(task_run("Succeeded", "Completed", task=EXITED_0))
    r = c.tasks.run("python", inline="print('hi')", env={"B": 2, "A": "1"}, timeout=120, max_retries=0,
                    retry_on_exit_codes=[3, 4])
    post = fake.calls[0]
    assert (post.method, post.url) == ("POST", f"{RUNS}/default/runs")
    name = post.json["metadata"]["name"]
    assert name.startswith("task-") and len(name) == len("task-") + 8
    assert post.json["spec"] == {
        "runtime": "python", "source": {"inline": "print('hi')"}, "mode": {"task": {}},
        "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}], "timeout": 120,
        "retryPolicy": {"maxRetries": 0, "onExitCodes": [3, 4]}}
    assert fake.calls[1].url == f"{RUNS}/default/runs/{name}"
    assert (r.phase, r.reason, r.exit_code, r.ok, r.ended) == ("Succeeded", "Completed", 0, True, True)
    assert (r.stdout, r.stderr, r.stdout_truncated, r.stderr_truncated, r.attempt) == ("hi\n", "careful\n",
                                                                                       False, False, 1)
    assert r.finished_at - r.started_at == timedelta(milliseconds=250)
    assert [call.method for call in fake.calls] == ["POST", "GET"]


def test_entrypoints_and_shell_commands_are_sent_as_the_mode_and_the_name_and_namespace_as_given():
    c, fake = api(task_run("Succeeded", "Completed", task=EXITED_0))
    c.tasks.run("python", entrypoint="bin/run.py", args=["--verbose", "x y"], name="nightly", namespace="ci")
    assert fake.calls[0].url == f"{RUNS}/ci/runs"
    assert fake.calls[0].json["metadata"] == {"name": "nightly", "namespace": "ci"}
    assert fake.calls[0].json["spec"]["mode"] == {"task": {"entrypoint": "bin/run.py", "args": ["--verbose", "x y"]}}
    assert "source" not in fake.calls[0].json["spec"] and "retryPolicy" not in fake.calls[0].json["spec"]
    c.tasks.run("bash", args=["echo one", "false"])
    assert fake.calls[2].json["spec"]["mode"] == {"task": {"args": ["echo one", "false"]}}


def test_a_non_zero_exit_is_a_result_not_an_error():
    failed = task_run("Failed", "NonZeroExit", "exited with code 3",
                      task={"attempt": 2, "exitCode": 3, "stderrTail": "x" * 4096, "stderrTruncated": True})
    c, _ = api(failed)
    r = c.tasks.run("bash", inline="exit 3")
    assert (r.phase, r.reason, r.message, r.exit_code, r.ok) == ("Failed", "NonZeroExit", "exited with code 3", 3,
                                                                 False)
    assert (r.stdout, len(r.stderr), r.stderr_truncated, r.attempt, r.started_at) == ("", 4096, True, 2, None)


@pytest.mark.parametrize("phase,reason,cls", [
    ("Failed", "StartFailed", kruntimes.TaskStartFailedError),
    ("Failed", "OwnerLost", kruntimes.RunLostError),
    ("Failed", "InvalidSpec", kruntimes.InvalidSpecError),
    ("Failed", "RegistrationTimeout", kruntimes.RunFailedError),
    ("Timeout", "RunTimeout", kruntimes.RunTimeoutError),
    ("Cancelled", "Terminated", kruntimes.RunCancelledError),
    ("Cancelled", "OwnerLost", kruntimes.RunCancelledError),
])
def test_a_task_that_ended_without_an_exit_of_its_own_raises_how_it_ended(phase, reason, cls):
    c, fake = api(task_run(phase, reason, "why it ended"))
    with pytest.raises(kruntimes.RunEndedError) as e:
        c.tasks.run("python", args=["print(1)"], name="t")
    assert type(e.value) is cls
    assert (e.value.status, e.value.code, e.value.phase, e.value.reason, e.value.source) == (0, phase, phase, reason,
                                                                                          "client")
    assert str(e.value).endswith(f"task run default/t ended {phase} ({reason}: why it ended)")
    assert isinstance(e.value.result, TaskResult) and e.value.result.exit_code is None
    assert e.value.result.message == "why it ended"
    # Not removed unless asked: its status stays readable.
    assert [call.method for call in fake.calls] == ["POST", "GET"]
    assert isinstance(e.value, kruntimes.RunFailedError) == (phase == "Failed")
    # A spec refused is a refused request, whichever control plane refused it.
    assert isinstance(e.value, kruntimes.InvalidRequestError) == (reason == "InvalidSpec")


def test_remove_deletes_the_run_after_its_result_is_read_and_after_it_failed():
    deletes = []

    def delete(call):
        assert call.method == "DELETE"
        deletes.append(call.url)
        return ok({})

    c, fake = api(task_run("Succeeded", "Completed", task=EXITED_0), delete)
    assert c.tasks.run("python", inline="print(1)", name="t", remove=True).stdout == "hi\n"
    assert [call.method for call in fake.calls] == ["POST", "GET", "DELETE"]
    c, fake = api(task_run("Failed", "StartFailed"), delete)
    with pytest.raises(kruntimes.TaskStartFailedError):
        c.tasks.run("python", args=["print(1)"], name="t", remove=True)
    assert [call.method for call in fake.calls] == ["POST", "GET", "DELETE"]
    assert deletes == [f"{RUNS}/default/runs/t"] * 2


def test_a_removal_refused_after_the_result_is_raised_and_one_refused_after_a_failure_is_not():
    c, _ = api(task_run("Succeeded", "Completed", task=EXITED_0), lambda call: error(403, "Forbidden"))
    with pytest.raises(kruntimes.PermissionDeniedError):
        c.tasks.run("python", inline="print(1)", remove=True)
    c, _ = api(task_run("Timeout", "RunTimeout"), lambda call: error(403, "Forbidden"))
    with pytest.raises(kruntimes.RunTimeoutError):
        c.tasks.run("python", inline="print(1)", remove=True)


def test_a_wait_that_runs_out_says_why_and_leaves_the_run_unless_asked_to_remove_it():
    waiting = task_run("Pending", "NoIdlePod", "0/1 python Pods can take this task: 1 busy")
    c, fake = api(waiting, lambda call: ok({}))
    with pytest.raises(kruntimes.WaitTimeoutError) as e:
        c.tasks.run("python", inline="print(1)", name="t", wait_timeout=0)
    assert (e.value.phase, e.value.reason) == ("Pending", "NoIdlePod")
    assert str(e.value).endswith("its end not reached within 0s (phase Pending, NoIdlePod: 0/1 python Pods can "
                                 "take this task: 1 busy)")
    assert [call.method for call in fake.calls] == ["POST", "GET"]
    with pytest.raises(kruntimes.WaitTimeoutError):
        c.tasks.run("python", inline="print(1)", name="t", wait_timeout=0, remove=True)
    assert [call.method for call in fake.calls][2:] == ["POST", "GET", "DELETE"]


def test_a_spec_the_api_server_refuses_is_its_error_and_nothing_is_awaited():
    def refuse(call):
        body = {"kind": "Status", "reason": "Invalid", "code": 422,
                "message": "Run.kruntimes.io \"t\" is invalid: spec.runtime: Too long"}
        return (422, {}, json.dumps(body).encode())

    c, fake = client(refuse)
    c._runs = KubernetesRuns()
    with pytest.raises(kruntimes.InvalidRequestError) as e:
        c.tasks.run("x" * 64, inline="true")
    assert (e.value.status, e.value.code, e.value.source) == (422, "Invalid", "kubernetes")
    assert len(fake.calls) == 1


@pytest.mark.parametrize("kwargs,why", [
    (dict(inline="print(1)", entrypoint="main.py"), "entrypoint would have no effect"),
    (dict(inline="print(1)", args=["-v"]), "args would have no effect"),
    (dict(), "a task needs something to run"),
    (dict(args="echo hi"), "args is a list of strings"),
    (dict(entrypoint="../x.py"), "without '..'"),
    (dict(entrypoint="/etc/x"), "relative"),
    (dict(entrypoint=""), "1 to 255 bytes"),
    (dict(args=["a"] * 257), "at most 256"),
    (dict(args=["ok", "a\0b"]), "args[1]"),
    (dict(args=["true"], timeout=0), "timeout"),
    (dict(args=["true"], max_retries=101), "max_retries"),
    (dict(args=["true"], retry_on_exit_codes=[0]), "holds 0"),
    (dict(args=["true"], retry_on_exit_codes=[256]), "holds 256"),
    (dict(args=["true"], env={"": "x"}), "env names"),
    (dict(args=["true"], name="Not_A_Name"), "is not a Run name"),
    (dict(args=["true"], name="a.b"), "is not a Run name"),
])
def test_arguments_the_control_plane_would_refuse_are_refused_before_anything_is_sent(kwargs, why):
    c, fake = client(lambda call: pytest.fail("nothing is sent"))
    c._runs = KubernetesRuns()
    with pytest.raises(ValueError) as e:
        c.tasks.run("bash", **kwargs)
    assert why in str(e.value), str(e.value)
    with pytest.raises(ValueError):
        c.tasks.run("", inline="true")
    assert fake.calls == []


def test_get_reads_a_task_as_it_stands_and_refuses_other_modes():
    c, _ = api(task_run("Running", "Started"))
    r = c.tasks.get("t")
    assert (r.phase, r.reason, r.exit_code, r.ended, r.attempt) == ("Running", "Started", None, False, 1)
    c, _ = api(task_run("Failed", "StartFailed", "python runs a script"))
    assert (c.tasks.get("t").reason, c.tasks.get("t").message) == ("StartFailed", "python runs a script")
    session = task_run("Ready")
    session["spec"]["mode"] = {"session": {}}
    c, _ = api(session)
    with pytest.raises(kruntimes.NotFoundError) as e:
        c.tasks.get("t")
    assert "not a task Run" in e.value.message
    c, fake = api(None, lambda call: ok({}))
    c.tasks.delete("t", namespace="ci")
    assert [(call.method, call.url) for call in fake.calls] == [("DELETE", f"{RUNS}/ci/runs/t")]


def test_without_a_control_plane_tasks_cannot_be_run():
    c, _ = client(lambda call: pytest.fail("nothing is sent"))
    with pytest.raises(kruntimes.UnsupportedError):
        c.tasks.run("bash", args=["true"])


def test_on_a_state_dir_a_task_is_the_file_krt_run_writes_and_its_row_its_result(tmp_path):
    runs_dir = tmp_path / "runs"
    runs_dir.mkdir()
    row = {"name": "done", "namespace": "default", "uid": "u", "runtime": "bash", "mode": "task",
           "phase": "Failed", "reason": "NonZeroExit", "message": "exited with code 3", "attempt": 1,
           "task": {"attempt": 1, "exitCode": 3, "stdoutTail": "out\n", "stdoutTruncated": True}}
    (tmp_path / "runs.json").write_text(json.dumps({"runs": [row]}))
    c, _ = client(lambda call: pytest.fail("no I/O"))
    c._runs = StateDirRuns(tmp_path, str(runs_dir))
    r = c.tasks.get("done")
    assert (r.exit_code, r.stdout, r.stdout_truncated, r.stderr, r.phase) == (3, "out\n", True, "", "Failed")
    # Listed already: refused, not written beside it.
    with pytest.raises(kruntimes.ConflictError):
        c.tasks.run("bash", args=["true"], name="done")
    assert list(runs_dir.iterdir()) == []
    # A new one is written as `krt run` writes it (`krt delete run` finds it), and waited for.
    with pytest.raises(kruntimes.WaitTimeoutError) as e:
        c.tasks.run("bash", args=["echo hi"], name="new", wait_timeout=0)
    assert str(e.value).endswith("(not listed)")
    doc = json.loads((runs_dir / "apply-default-new.yaml").read_text())
    assert (doc["kind"], doc["spec"]["mode"]) == ("Run", {"task": {"args": ["echo hi"]}})
    c.tasks.delete("new")
    assert list(runs_dir.iterdir()) == []


def test_status_times_are_parsed_with_any_fraction():
    utc = timezone.utc
    assert parse_time("2026-12-07T12:03:00Z") == datetime(2026, 12, 7, 12, 3, tzinfo=utc)
    assert parse_time("2026-12-07T12:03:00.25Z") == datetime(2026, 12, 7, 12, 3, 0, 250000, tzinfo=utc)
    assert parse_time("2026-12-07T12:03:00.123456789+01:00") == datetime(2026, 12, 7, 11, 3, 0, 123456, tzinfo=utc)
    assert parse_time("yesterday") is None and parse_time(None) is None


def test_the_async_twin_runs_gets_and_deletes_the_same_way():
    runs = {"now": task_run("Failed", "NonZeroExit", task={"attempt": 1, "exitCode": 3})}

    def answer(call):
        if call.method == "POST":
            return ok(call.json, 201)
        if call.method == "DELETE":
            return ok({})
        return ok(runs["now"])

    async def main():
        c = AsyncClient(gateway="https://gw", token="t")
        fake = AsyncFake(answer)
        c._transport = fake
        c._runs = KubernetesRuns()
        r = await c.tasks.run("bash", inline="exit 3", name="t", remove=True)
        assert (r.exit_code, r.phase) == (3, "Failed")
        assert [call.method for call in fake.calls] == ["POST", "GET", "DELETE"]
        runs["now"] = task_run("Timeout", "RunTimeout")
        with pytest.raises(kruntimes.RunTimeoutError):
            await c.tasks.run("bash", inline="sleep 60", timeout=1)
        assert (await c.tasks.get("t")).phase == "Timeout"
        await c.tasks.delete("t")
        with pytest.raises(ValueError):
            await c.tasks.run("bash")

    asyncio.run(main())
