"""Sandboxes (session Runs): created, connected to, closed by the context
manager or killed; commands run and streamed; files written, read, listed
(paging through 2,500 entries), tested, moved and removed."""

import threading
import time

import pytest

import kruntimes
from kruntimes import Sandbox

from .conftest import MODE, env, explicit_client, make_client


def test_a_sandbox_closed_by_its_context_manager_ends_succeeded(client, runtime):
    with Sandbox.create(client, runtime=runtime, env={"GREETING": "hello"}) as sb:
        assert sb.name.startswith("sandbox-") and sb.uid and sb.endpoint.endswith(f"/sessions/{sb.uid}")
        r = sb.commands.run("echo $GREETING; echo oops >&2; exit 3", timeout=30)
        assert (r.state, r.exit_code, r.stdout, r.stderr, r.ok) == ("Failed", 3, "hello\n", "oops\n", False)
        assert sb.status().uid == sb.uid
    assert sb.run_info.phase == "Succeeded"
    assert client.get_run(sb.name).phase == "Succeeded"
    # An ended session stays known until it is deleted: 410 RunEnded, never
    # retry. The gateway's table follows the API a moment later: the phase
    # it names may still be `Draining` on the first call after the close.
    deadline = time.monotonic() + 10
    while True:
        with pytest.raises(kruntimes.RunEndedError) as e:
            sb.commands.run("true")
        assert (e.value.status, e.value.code) == (410, "RunEnded")
        assert e.value.retry_after is None
        if e.value.phase == "Succeeded" or time.monotonic() > deadline:
            break
        assert e.value.phase == "Draining", e.value.phase
        time.sleep(0.1)
    assert e.value.phase == "Succeeded"


def test_kill_cancels_running_work_and_an_exception_in_the_block_kills(client, runtime):
    sb = Sandbox.create(client, runtime=runtime)
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("r", sb.commands.run("sleep 30")))
    t.start()
    deadline = time.monotonic() + 10
    while sb.status().pending_operations == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sb.kill().phase == "Cancelled"
    t.join(timeout=20)
    assert out["r"].state == "Cancelled"

    with pytest.raises(RuntimeError):
        with Sandbox.create(client, runtime=runtime) as sb:
            raise RuntimeError("the agent failed")
    assert sb.run_info.phase == "Cancelled"


def test_a_running_command_is_cancelled_by_its_operation_id(sandbox):
    events = sandbox.commands.stream("sleep 60")
    accepted = next(events)
    assert accepted.type == "accepted" and accepted.operation_id
    sandbox.commands.cancel(accepted.operation_id)
    last = [e for e in events][-1]
    assert last.type == "completed" and last.result.state == "Cancelled"
    # No longer queued or running: 404, and the session goes on.
    with pytest.raises(kruntimes.NotFoundError):
        sandbox.commands.cancel(accepted.operation_id)
    assert sandbox.commands.run("true").ok


def test_commands_take_argv_stdin_cwd_env_and_a_timeout(sandbox):
    r = sandbox.commands.run(["cat"], stdin="piped input")
    assert (r.state, r.exit_code, r.stdout) == ("Succeeded", 0, "piped input")
    sandbox.files.make_dir("work/sub")
    r = sandbox.commands.run("pwd | xargs basename; echo $GREETING $EXTRA", cwd="work/sub", env={"EXTRA": "more"})
    assert r.stdout == "sub\nhi more\n"
    r = sandbox.commands.run(["sleep", "10"], timeout=1)
    assert r.state == "TimedOut" and r.exit_code is None
    with pytest.raises(kruntimes.CommandExitError):
        sandbox.commands.run("exit 4").check()
    assert sandbox.commands.run("true").check().ok


def test_stream_yields_output_as_it_happens(sandbox):
    events = list(sandbox.commands.stream(["bash", "-c", "for i in 1 2 3; do echo line$i; sleep 0.1; done; echo e >&2"]))
    assert events[0].type == "accepted" and events[0].operation_id
    assert events[-1].type == "completed" and events[-1].result is not None
    assert events[-1].result.state == "Succeeded" and events[-1].result.operation_id == events[0].operation_id
    sequences = [e.sequence for e in events]
    assert sequences == sorted(set(sequences))
    out = [e for e in events if e.type == "output"]
    assert "".join(e.data for e in out if e.stream == "stdout") == "line1\nline2\nline3\n"
    assert "".join(e.data for e in out if e.stream == "stderr") == "e\n"
    # Leaving early closes the stream; the session goes on.
    for event in sandbox.commands.stream("echo early; sleep 1"):
        if event.type == "output":
            break
    assert sandbox.commands.run("echo next").stdout == "next\n"


def test_files_are_written_read_listed_tested_moved_and_removed(sandbox):
    sandbox.files.make_dir("data")
    payload = bytes(range(256)) * 4096  # 1 MiB, every byte value
    sandbox.files.write("data/blob.bin", payload)
    sandbox.files.write("data/text.txt", "héllo")
    with open(__file__, "rb") as f:
        sandbox.files.write("data/source.py", f)
    assert sandbox.files.read("data/blob.bin") == payload
    assert sandbox.files.read_text("data/text.txt") == "héllo"
    listing = sandbox.files.list("data")
    assert [(e.name, e.type, e.path) for e in listing] == [
        ("blob.bin", "file", "data/blob.bin"), ("source.py", "file", "data/source.py"), ("text.txt", "file", "data/text.txt")]
    assert listing[0].size == len(payload)
    assert sandbox.files.exists("data/text.txt") and sandbox.files.exists("data") and sandbox.files.exists("data/")
    assert not sandbox.files.exists("data/missing") and not sandbox.files.exists("missing/x")
    assert not sandbox.files.exists("data/text.txt/below")
    sandbox.files.make_dir("data/sub/deeper")
    assert [e.name for e in sandbox.files.list("data") if e.is_dir] == ["sub"]
    sandbox.files.rename("data/text.txt", "data/sub/moved.txt")
    assert not sandbox.files.exists("data/text.txt")
    assert sandbox.files.read("data/sub/moved.txt") == "héllo".encode()
    sandbox.files.remove("data/sub")
    sandbox.files.remove("data/blob.bin")
    assert [e.name for e in sandbox.files.list("data")] == ["source.py"]


def test_file_errors_are_typed(sandbox):
    with pytest.raises(kruntimes.NotFoundError) as e:
        sandbox.files.read("missing.txt")
    assert e.value.status == 404
    with pytest.raises(kruntimes.InvalidPathError):
        sandbox.files.write("../escape", b"x")
    with pytest.raises(kruntimes.InvalidPathError):
        sandbox.files.list("/etc")
    with pytest.raises(kruntimes.OperationFailedError) as e:
        sandbox.files.rename("missing.txt", "other.txt")
    assert e.value.result is not None and e.value.result.state == "Failed"
    with pytest.raises(kruntimes.OperationFailedError):
        sandbox.files.remove("missing.txt")


def test_write_creates_missing_parents(sandbox):
    sandbox.files.write("fresh/a/b/c.txt", b"deep")
    assert sandbox.files.read("fresh/a/b/c.txt") == b"deep"
    assert [e.name for e in sandbox.files.list("fresh/a")] == ["b"]


def test_listing_pages_through_a_directory_of_2500_files(sandbox):
    r = sandbox.commands.run("mkdir -p big && cd big && for i in $(seq -w 0 2499); do : > f$i; done")
    assert r.ok, r.stderr
    entries = sandbox.files.list("big")
    names = [f"f{i:04d}" for i in range(2500)]
    assert [e.name for e in entries] == names
    assert sandbox.files.list("big", page_size=1000) == entries
    pages, token = [], None
    while True:
        page = sandbox.files.list_page("big", limit=700, page_token=token)
        pages.append(len(page.entries))
        token = page.next_page_token
        if token is None:
            break
    assert pages == [700, 700, 700, 400]
    assert sandbox.files.exists("big/f2499") and not sandbox.files.exists("big/f2500")


def test_connect_attaches_to_an_existing_sandbox(sandbox):
    with make_client() as c:
        again = Sandbox.connect(c, sandbox.name)
        assert again.uid == sandbox.uid
        assert again.commands.run("echo $GREETING").stdout == "hi\n"
    with explicit_client() as c:
        direct = Sandbox.connect(c, endpoint=sandbox.endpoint)
        assert direct.commands.run(["echo", "direct"]).stdout == "direct\n"
    with make_client() as c:
        with pytest.raises(kruntimes.NotFoundError):
            Sandbox.connect(c, "no-such-sandbox")
        with pytest.raises(kruntimes.NotFoundError):
            Sandbox.connect(c, env("KRT_TEST_FUNCTION"))


def test_sessions_refuse_bad_tokens_and_callers_without_the_permission(sandbox):
    with make_client(token="not-a-valid-token") as c:
        with pytest.raises(kruntimes.UnauthenticatedError):
            Sandbox.connect(c, sandbox.name, ready_timeout=5)
    with make_client(who="bob") as bob:
        with pytest.raises(kruntimes.PermissionDeniedError) as e:
            Sandbox.connect(bob, sandbox.name, ready_timeout=5)
        assert e.value.source == "gateway"
        if MODE == "kubernetes":
            # bob may read Runs but not create them.
            with pytest.raises(kruntimes.PermissionDeniedError) as e:
                Sandbox.create(bob, runtime=env("KRT_TEST_SESSION_RUNTIME"))
            assert (e.value.status, e.value.source) == (403, "kubernetes")


def test_a_full_session_queue_is_busy(client, runtime):
    # queueSize 1: one running, one waiting, the next refused. (0 would mean the default, 16.)
    with Sandbox.create(client, runtime=runtime, queue_size=1) as sb:
        threads = [threading.Thread(target=lambda: sb.commands.run("sleep 1.5")) for _ in range(2)]
        deadline = time.monotonic() + 10
        for n, t in enumerate(threads, start=1):
            t.start()
            while sb.status().pending_operations < n and time.monotonic() < deadline:
                time.sleep(0.02)
        with pytest.raises(kruntimes.BusyError) as e:
            sb.files.write("queued.txt", b"x")
        assert (e.value.status, e.value.code) == (429, "Busy") and e.value.retry_after is not None
        for t in threads:
            t.join()
        assert not sb.files.exists("queued.txt"), "a refused operation never ran"


def test_a_sandbox_that_gives_up_waiting_leaves_no_run_behind(client, runtime):
    name = "sandbox-gives-up"
    # A ready_timeout no sandbox can meet: the wait runs out on its first look.
    with pytest.raises(kruntimes.WaitTimeoutError) as e:
        Sandbox.create(client, name=name, runtime=runtime, ready_timeout=0)
    message = str(e.value)
    assert f"run {client.namespace}/{name}: Ready not reached within 0s (" in message, message
    assert e.value.phase in ("", "Pending", "Scheduled"), message
    # The Run it created is deleted: it neither holds a Pod nor waits for one.
    deadline = time.monotonic() + 30
    while client.get_run(name) is not None:
        assert time.monotonic() < deadline, f"{name} still there: {client.get_run(name)}"
        time.sleep(0.1)
