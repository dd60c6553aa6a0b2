"""Background processes and terminals in a sandbox (``docs/sessions.md``, "Background processes
and terminals"): a process outlives the handle that started it and replays its output to the
next one, takes stdin until it is closed, is killed (137) or terminated (143), is listed, is
counted in the sandbox's metrics (its memory too); a terminal has a tty of the size asked for,
resized on the fly; the errors are typed (404, 409)."""

import asyncio

import pytest

import kruntimes
from kruntimes import AsyncClient, AsyncSandbox

from .conftest import make_client

#: Above Linux's largest pid_max: no process of any session has it.
UNKNOWN_PID = 4_194_305

TICKS = "".join(f"tick{i}\n" for i in range(1, 31))


def test_a_background_process_outlives_its_handle_and_replays_its_output_on_connect(sandbox):
    h = sandbox.commands.run("for i in $(seq 1 30); do echo tick$i; sleep 0.1; done", background=True)
    pid = h.pid
    with h:
        first = next(e for e in h if e.type == "output")
        assert first.stream == "stdout" and first.data.startswith(b"tick1\n"), first
    del h  # its connection is closed: the process goes on
    assert sandbox.commands.get(pid).running

    again = sandbox.commands.connect(pid)
    r = again.wait()
    assert (r.exit_code, r.stdout, r.stderr, r.lost_bytes, r.ok) == (0, TICKS, "", 0, True)
    assert again.offset == len(TICKS)

    # Ended, it is still kept: a new handle replays the ring, then `exited` at once.
    late = sandbox.commands.connect(pid)
    events = list(late)
    assert events[-1].type == "exited" and events[-1].exit_code == 0
    assert b"".join(e.data for e in events if e.type == "output").decode() == TICKS
    info = sandbox.commands.get(pid)
    assert (info.running, info.exit_code, info.pty) == (False, 0, False)
    assert info.started_at is not None and info.ended_at is not None and info.ended_at >= info.started_at


def test_stdin_is_open_until_closed_and_then_conflict(sandbox):
    h = sandbox.commands.run(["cat"], background=True, stdin=True)
    h.send_stdin("hello ")
    sandbox.commands.send_stdin(h.pid, b"w\xc3\xb6rld\n")
    h.close_stdin()
    h.close_stdin()  # idempotent
    r = h.wait()
    assert (r.stdout, r.exit_code) == ("hello wörld\n", 0)
    with pytest.raises(kruntimes.ConflictError) as e:
        h.send_stdin("late")
    assert (e.value.status, e.value.code) == (409, "Conflict")

    # Without stdin=True it reads end-of-file at once.
    r = sandbox.commands.run(["cat"], background=True).wait()
    assert (r.stdout, r.exit_code) == ("", 0)


def _wait_for(h, text: bytes) -> None:
    """Reads ``h``'s output until it holds ``text``; the handle stays connected."""
    seen = b""
    for event in h:
        seen += event.data
        if text in seen:
            return
    raise AssertionError(f"{text!r} never came: {seen!r}")


def test_kill_ends_a_process_with_137_and_sigterm_with_143(sandbox):
    # Killed by signal N, a process exits 128 + N: the session names no signal.
    h = sandbox.commands.run("sleep 60", background=True)
    assert h.kill() is True
    r = h.wait()
    assert (r.exit_code, r.ok) == (137, False)
    with pytest.raises(kruntimes.CommandExitError):
        r.check()

    h = sandbox.commands.run(["sleep", "60"], background=True)
    h.signal("TERM")
    assert (h.wait().exit_code, h.exit_code) == (143, 143)

    # SIGTERM goes to the whole tree: the shell and its child both end.
    h = sandbox.commands.run("echo up; sleep 60; echo never", background=True)
    _wait_for(h, b"up\n")
    h.signal("SIGTERM")
    r = h.wait()
    assert r.exit_code == 143 and r.stdout.startswith("up\n") and "never" not in r.stdout, r

    # A process that handles SIGTERM exits with its own code. (Its shell may report its killed
    # child, "Terminated": the output is not compared.)
    h = sandbox.commands.run("trap 'echo cleanup; exit 7' TERM; echo up; sleep 60 & wait", background=True)
    _wait_for(h, b"up\n")
    h.signal("SIGTERM")
    r = h.wait()
    assert r.exit_code == 7 and "cleanup\n" in r.stdout, r


def test_the_list_shows_running_and_ended_processes(sandbox):
    sandbox.files.make_dir("procs")
    h = sandbox.commands.run(["sleep", "30"], background=True, cwd="procs", env={"X": "1"})
    try:
        by_pid = {p.pid: p for p in sandbox.commands.list()}
        p = by_pid[h.pid]
        assert (p.command, p.cwd, p.pty, p.running, p.exit_code, p.ended_at) == (
            ["sleep", "30"], "procs", False, True, None, None)
        assert p.started_at is not None
    finally:
        assert sandbox.commands.kill(h.pid) is True
    h.wait()
    ended = {p.pid: p for p in sandbox.commands.list()}[h.pid]
    assert (ended.running, ended.exit_code) == (False, 137) and ended.ended_at is not None


#: A process that holds 32 MiB resident and says so.
HOLDER = "import time\nb = bytearray(32 << 20)\nprint('held', flush=True)\ntime.sleep(300)"


def test_metrics_count_a_background_process_and_its_memory(sandbox):
    h = sandbox.commands.run(["python3", "-c", HOLDER], background=True)
    try:
        _wait_for(h, b"held\n")
        m = sandbox.get_metrics()
        assert m.processes >= 1 and m.memory_bytes >= 32 << 20 and m.cpu_count >= 1, m
        assert m.cpu_seconds >= 0 and m.disk_bytes >= 0 and m.disk_total_bytes >= m.disk_free_bytes, m
        assert m.memory_limit_bytes is None or m.memory_limit_bytes > 0, m

        async def main():
            async with make_client(AsyncClient) as client:
                sb = await AsyncSandbox.connect(client, sandbox.name)
                return await sb.get_metrics()

        am = asyncio.run(main())
        assert am.processes >= 1 and am.memory_bytes >= 32 << 20, am
    finally:
        assert h.kill() is True
    assert h.wait().exit_code == 137


def test_unknown_pids_are_not_found(sandbox):
    with pytest.raises(kruntimes.NotFoundError) as e:
        sandbox.commands.connect(UNKNOWN_PID)
    assert (e.value.status, e.value.code) == (404, "NotFound")
    with pytest.raises(kruntimes.NotFoundError):
        sandbox.commands.send_stdin(UNKNOWN_PID, "x")
    with pytest.raises(kruntimes.NotFoundError):
        sandbox.pty.resize(UNKNOWN_PID, 40, 120)
    assert sandbox.commands.kill(UNKNOWN_PID) is False


def test_a_terminal_has_a_tty_of_its_size_and_is_resized(sandbox):
    p = sandbox.pty.create(rows=24, cols=80, cmd="tty; stty size; read line; stty size")
    seen = b""
    for chunk in p:
        seen += chunk
        if b"24 80" in seen:
            break
    assert b"/dev/pts/" in seen, seen
    p.resize(40, 120)
    p.send_input("\n")
    r = p.wait()
    assert r.exit_code == 0 and r.stderr == ""
    before, after = r.stdout.split("24 80", 1)
    assert "/dev/pts/" in before and "40 120" in after, r.stdout
    assert sandbox.commands.get(p.pid).pty


def test_the_default_terminal_is_an_interactive_login_shell(sandbox):
    p = sandbox.pty.create()
    try:
        p.send_input("echo term=$TERM; exit 3\n")
        r = p.wait()
    finally:
        sandbox.pty.kill(p.pid)
    assert r.exit_code == 3 and "term=xterm-256color" in r.stdout, r.stdout


def test_resizing_a_process_without_a_terminal_is_a_conflict(sandbox):
    h = sandbox.commands.run("sleep 30", background=True)
    try:
        with pytest.raises(kruntimes.ConflictError) as e:
            sandbox.pty.resize(h.pid, 40, 120)
        assert (e.value.status, e.value.code) == (409, "Conflict")
    finally:
        h.kill()
    assert h.wait().exit_code == 137


def test_the_async_twin_starts_follows_and_types_into_a_terminal(sandbox):
    async def main():
        async with make_client(AsyncClient) as client:
            sb = await AsyncSandbox.connect(client, sandbox.name)
            async with await sb.commands.run(["bash", "-c", "echo out; echo err >&2; exit 4"], background=True) as h:
                r = await h.wait()
            assert (r.stdout, r.stderr, r.exit_code) == ("out\n", "err\n", 4)
            assert h.pid in [p.pid for p in await sb.commands.list()]

            p = await sb.pty.create(rows=30, cols=100, cmd=["bash", "--norc", "-i"])
            await p.send_input("stty size; exit\n")
            out = b""
            async for chunk in p:
                out += chunk
            assert b"30 100" in out and p.exit_code == 0

    asyncio.run(main())
