"""Task Runs on the live stack: an exit is a result whatever its code (inline
scripts; on ``krt up`` also Bash and shell commands); a task that cannot
start, one its timeout ends and one whose spec the control plane refuses are
typed errors; a task is read back and deleted, by the client or by
``remove=True`` (killing one still running)."""

import asyncio
import time

import pytest

import kruntimes
from kruntimes import AsyncClient

from .conftest import MODE, make_client

#: The Runtime of the fixture function Run: every target serves Python.
PYTHON = "python"
#: Whether the session Runtime runs shell tasks: the API server harness plays every Pod with the
#: python backend (kubetest passes ``--backend=python`` whatever the Runtime), so there its bash
#: Runtime runs scripts as Python; ``krt up`` picks the backend by runtime name.
SHELL_TASKS = MODE == "embedded"


def gone(client, name, within=30.0):
    """Whether the Run ``name`` is no longer listed within ``within`` seconds."""
    deadline = time.monotonic() + within
    while client.get_run(name) is not None:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def test_a_python_task_runs_once_and_its_output_and_exit_code_are_read_back(client):
    script = "import os, sys\nprint('hello', os.environ['WHO'])\nprint('careful', file=sys.stderr)"
    r = client.tasks.run(PYTHON, inline=script, env={"WHO": "sdk"})
    assert (r.phase, r.reason, r.exit_code, r.ok) == ("Succeeded", "Completed", 0, True)
    assert (r.stdout, r.stderr, r.stdout_truncated, r.stderr_truncated) == ("hello sdk\n", "careful\n", False, False)
    assert r.name.startswith("task-") and r.uid and r.attempt == 1
    assert r.started_at is not None and r.finished_at is not None and r.started_at <= r.finished_at
    # Kept until deleted: read back as it ended.
    again = client.tasks.get(r.name)
    assert (again.uid, again.exit_code, again.stdout, again.phase) == (r.uid, 0, "hello sdk\n", "Succeeded")
    client.tasks.delete(r.name)
    assert gone(client, r.name)
    with pytest.raises(kruntimes.NotFoundError):
        client.tasks.get(r.name)


def test_a_non_zero_exit_is_a_result_with_its_code_not_an_error(client, runtime):
    script = "import sys\nprint('before')\nprint('oops', file=sys.stderr)\nsys.exit(3)"
    r = client.tasks.run(PYTHON, inline=script, remove=True)
    assert (r.phase, r.reason, r.exit_code, r.ok) == ("Failed", "NonZeroExit", 3, False), (r.stdout, r.stderr)
    assert (r.stdout, r.stderr, r.message) == ("before\n", "oops\n", "exited with code 3")
    if SHELL_TASKS:
        r = client.tasks.run(runtime, inline="echo before; echo oops >&2; exit 3", remove=True)
        assert (r.phase, r.reason, r.exit_code, r.stdout, r.stderr) == ("Failed", "NonZeroExit", 3, "before\n",
                                                                         "oops\n"), (r.stdout, r.stderr)
        # Shell commands without an entrypoint: the first failure ends them.
        r = client.tasks.run(runtime, args=["echo one", "false", "echo never"], remove=True)
        assert (r.exit_code, r.stdout, r.phase) == (1, "one\n", "Failed")


def test_a_task_that_cannot_start_is_a_start_failure(client):
    # Python runs a script, not shell commands: its process cannot start; no retry makes it quick.
    with pytest.raises(kruntimes.TaskStartFailedError) as e:
        client.tasks.run(PYTHON, args=["print(1)"], max_retries=0, remove=True)
    assert (e.value.status, e.value.code, e.value.phase, e.value.reason) == (0, "Failed", "Failed", "StartFailed")
    assert "runs a script" in e.value.message, e.value.message
    assert isinstance(e.value, kruntimes.RunFailedError) and isinstance(e.value, kruntimes.RunEndedError)
    assert e.value.result.exit_code is None and e.value.result.reason == "StartFailed"


def test_a_task_past_its_timeout_is_a_run_timeout(client):
    started = time.monotonic()
    with pytest.raises(kruntimes.RunTimeoutError) as e:
        client.tasks.run(PYTHON, inline="import time\nprint('started', flush=True)\ntime.sleep(60)", timeout=1,
                         remove=True)
    assert (e.value.phase, e.value.reason, e.value.code) == ("Timeout", "RunTimeout", "Timeout")
    assert time.monotonic() - started < 30
    assert isinstance(e.value, kruntimes.RunEndedError) and not isinstance(e.value, kruntimes.RunFailedError)


def test_a_spec_the_control_plane_refuses_is_an_invalid_spec(client):
    # Not a DNS-1123 label: left to the control plane to judge (both refuse it as InvalidSpec).
    with pytest.raises(kruntimes.InvalidSpecError) as e:
        client.tasks.run("Not_A_Runtime", args=["true"], remove=True)
    assert (e.value.phase, e.value.reason) == ("Failed", "InvalidSpec")
    assert "spec.runtime" in e.value.message, e.value.message
    assert isinstance(e.value, kruntimes.InvalidRequestError) and isinstance(e.value, kruntimes.RunFailedError)


def test_remove_deletes_the_run_once_read_and_kills_one_the_wait_gave_up_on(client):
    r = client.tasks.run(PYTHON, inline="print('bye')", remove=True)
    assert (r.exit_code, r.stdout) == (0, "bye\n"), (r.stdout, r.stderr)
    assert gone(client, r.name)
    with pytest.raises(kruntimes.WaitTimeoutError) as e:
        client.tasks.run(PYTHON, inline="import time\ntime.sleep(120)", name="sdk-task-given-up", wait_timeout=0.5,
                         remove=True)
    assert "sdk-task-given-up" in str(e.value)
    assert gone(client, "sdk-task-given-up")
    # Without remove, a name that exists is refused (the Run is kept until deleted).
    client.tasks.run(PYTHON, inline="pass", name="sdk-task-kept")
    with pytest.raises(kruntimes.ConflictError):
        client.tasks.run(PYTHON, inline="pass", name="sdk-task-kept")
    client.tasks.delete("sdk-task-kept")


def test_the_async_twin_runs_a_task():
    async def main():
        async with make_client(AsyncClient) as client:
            r = await client.tasks.run(PYTHON, inline="import sys\nprint('async')\nsys.exit(4)", remove=True)
            assert (r.exit_code, r.stdout, r.phase) == (4, "async\n", "Failed"), (r.stdout, r.stderr)
            with pytest.raises(kruntimes.TaskStartFailedError):
                await client.tasks.run(PYTHON, args=["print(1)"], max_retries=0, remove=True)

    asyncio.run(main())


@pytest.mark.kubernetes
def test_a_user_who_may_only_read_runs_cannot_run_a_task(runtime):
    assert MODE == "kubernetes"
    with make_client(who="bob") as bob:
        with pytest.raises(kruntimes.PermissionDeniedError) as e:
            bob.tasks.run(runtime, inline="true")
    assert (e.value.status, e.value.source) == (403, "kubernetes")
