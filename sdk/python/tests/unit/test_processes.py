"""Background processes and terminals against a scripted transport: the requests they send
(paths, bodies, base64), the output stream read however its lines are split (keepalives and
unknown types skipped, ``lost`` counted, a reconnect that repeats nothing), streams closed with
their handle, typed errors, the async twin — and, over real HTTP, a local server that answers
like the process routes."""

import asyncio
import base64
import gc
import json
import signal

import pytest

import kruntimes
from kruntimes import (AsyncCommandHandle, AsyncPtyHandle, CommandHandle, ProcessEvent, ProcessInfo, ProcessResult,
                       PtyHandle, Sandbox)
from kruntimes.processes import CONNECT_READ_TIMEOUT, MAX_INPUT_BYTES, NdjsonLines, parse_process_event

from .fakes import SESSION, async_sandbox, error, ok, sandbox, session_run
from .servers import ProcessServer

PROCESSES = f"{SESSION}/processes"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def line(doc) -> bytes:
    return json.dumps(doc).encode() + b"\n"


def out(data: bytes, offset: int, stream: str = "stdout") -> bytes:
    return line({"type": "output", "stream": stream, "dataBase64": b64(data), "offset": offset})


def exited(code=0) -> bytes:
    return line({"type": "exited", "exitCode": code})


KEEPALIVE = line({"type": "keepalive"})

INFO = {"pid": 7, "command": {"shell": "python3 -m http.server 8000"}, "cwd": "work", "pty": False,
        "running": True, "exitCode": None, "startedAt": "2026-12-08T00:20:00Z", "endedAt": None}


def routes(*connects, other=None):
    """POST …/processes starts pid 7; GET …/processes/7 is its info; each ``:connect`` answers the
    next of ``connects`` (a list of chunks, or an Answer); other calls ``other(call)``, else 204."""
    pending = list(connects)

    def answer(call):
        if call.method == "POST" and call.url == PROCESSES:
            return ok({"pid": 7}, status=201)
        if call.url.endswith(":connect"):
            body = pending.pop(0)
            return body if isinstance(body, tuple) else (200, {"content-type": "application/x-ndjson"}, body)
        if other is not None:
            return other(call)
        if call.method == "GET" and call.url == f"{PROCESSES}/7":
            return ok(INFO)
        if call.method == "GET" and call.url == PROCESSES:
            return ok({"processes": [INFO]})
        return (204, {}, b"")

    return answer


def connects(fake):
    return [c for c in fake.calls if c.url.endswith(":connect")]


# -- requests -------------------------------------------------------------------------------------


def test_a_background_run_is_started_with_its_body_and_connects_only_when_read():
    sb, fake = sandbox(routes([out(b"hi\n", 3), exited()]))
    h = sb.commands.run("python3 -m http.server 8000", background=True, cwd="work", env={"X": 1}, stdin=True)
    assert isinstance(h, CommandHandle) and h.pid == 7 and not h.exited and h.exit_code is None
    (start,) = fake.calls
    assert (start.method, start.url, start.timeout) == ("POST", PROCESSES, None)
    assert start.json == {"command": {"shell": "python3 -m http.server 8000"}, "cwd": "work", "env": {"X": "1"},
                          "stdin": True}
    assert h.wait().stdout == "hi\n"
    (connect,) = connects(fake)
    assert (connect.method, connect.url, connect.timeout) == ("GET", f"{PROCESSES}/7:connect", CONNECT_READ_TIMEOUT)

    sb.commands.run(["sleep", "5"], True)
    assert fake.calls[-1].json == {"command": {"argv": ["sleep", "5"]}}


def test_the_foreground_run_is_unchanged_and_background_only_arguments_are_refused_before_sending():
    sb, fake = sandbox(lambda call: ok({"operationId": "op-1", "state": "Succeeded", "exitCode": 0, "stdout": "x"}))
    r = sb.commands.run("cat", stdin="x")
    assert isinstance(r, kruntimes.CommandResult) and r.stdout == "x"
    assert fake.calls[0].url == f"{SESSION}/operations:execute" and fake.calls[0].json["stdin"] == "x"
    sb.commands.run("true", stdin=False)
    assert fake.calls[1].json == {"command": {"shell": "true"}}
    with pytest.raises(TypeError):
        sb.commands.run("cat", stdin=True)
    with pytest.raises(ValueError):
        sb.commands.run("sleep 9", background=True, timeout=5)
    with pytest.raises(TypeError):
        sb.commands.run("cat", background=True, stdin="text")
    with pytest.raises(ValueError):
        sb.commands.run([], background=True)
    assert len(fake.calls) == 2


def test_by_pid_calls_send_their_routes_and_bodies():
    sb, fake = sandbox(routes())
    sb.commands.send_stdin(7, "héllo")
    sb.commands.send_stdin(7, b"\x00\xff")
    sb.commands.close_stdin(7)
    sb.commands.signal(7, "int")
    sb.commands.signal(7, signal.SIGTERM)
    sb.commands.signal(7, " sigusr1 ")
    assert sb.commands.kill(7) is True
    sb.pty.resize(7, 40, 120)
    sb.pty.send_input(7, "ls\n")
    assert [(c.method, c.url, c.json) for c in fake.calls] == [
        ("POST", f"{PROCESSES}/7:input", {"dataBase64": b64("héllo".encode())}),
        ("POST", f"{PROCESSES}/7:input", {"dataBase64": "AP8="}),
        ("POST", f"{PROCESSES}/7:closeStdin", None),
        ("POST", f"{PROCESSES}/7:signal", {"signal": "SIGINT"}),
        ("POST", f"{PROCESSES}/7:signal", {"signal": "SIGTERM"}),
        ("POST", f"{PROCESSES}/7:signal", {"signal": "SIGUSR1"}),
        ("POST", f"{PROCESSES}/7:signal", {"signal": "SIGKILL"}),
        ("POST", f"{PROCESSES}/7:resize", {"rows": 40, "cols": 120}),
        ("POST", f"{PROCESSES}/7:input", {"dataBase64": b64(b"ls\n")}),
    ]


def test_input_over_a_mebibyte_is_sent_in_pieces_and_empty_input_once():
    sb, fake = sandbox(routes())
    data = bytes(range(256)) * (MAX_INPUT_BYTES // 256) + b"tail"
    sb.commands.send_stdin(7, data)
    pieces = [base64.b64decode(c.json["dataBase64"]) for c in fake.calls]
    assert [len(p) for p in pieces] == [MAX_INPUT_BYTES, 4] and b"".join(pieces) == data
    sb.commands.send_stdin(7, b"")
    assert fake.calls[-1].json == {"dataBase64": ""}


@pytest.mark.parametrize("call", [
    lambda sb: sb.commands.kill(0),
    lambda sb: sb.commands.send_stdin(-1, "x"),
    lambda sb: sb.commands.connect(True),
    lambda sb: sb.commands.get("7"),
    lambda sb: sb.commands.signal(7, ""),
    lambda sb: sb.pty.resize(7, 0, 80),
    lambda sb: sb.pty.resize(7, 24, 1001),
    lambda sb: sb.pty.create(rows=True),
])
def test_arguments_the_session_would_refuse_are_refused_before_sending(call):
    sb, fake = sandbox(routes())
    with pytest.raises(ValueError):
        call(sb)
    assert fake.calls == []
    with pytest.raises(TypeError):
        sb.commands.signal(7, 9)


def test_list_and_get_parse_processes():
    # `pty` as the start body has it (the terminal's size) means true too.
    ended = {"pid": 8, "command": {"argv": ["sleep", "1"]}, "cwd": "", "pty": {"rows": 24, "cols": 80},
             "running": False,
             "exitCode": 137, "startedAt": "2026-12-08T00:20:00.5Z", "endedAt": "2026-12-08T00:21:00Z",
             "somethingNew": 1}
    sb, fake = sandbox(routes(other=lambda call: ok({"processes": [INFO, ended]}) if call.url == PROCESSES
                              else ok(INFO)))
    procs = sb.commands.list()
    assert (fake.calls[0].method, fake.calls[0].url) == ("GET", PROCESSES)
    assert [p.pid for p in procs] == [7, 8]
    running, done = procs
    assert (running.command, running.cwd, running.pty, running.running, running.exit_code, running.ended_at) == (
        "python3 -m http.server 8000", "work", False, True, None, None)
    assert running.started_at.isoformat() == "2026-12-08T00:20:00+00:00"
    assert (done.command, done.pty, done.running, done.exit_code) == (["sleep", "1"], True, False, 137)
    assert done.started_at.microsecond == 500000 and done.ended_at is not None
    assert sb.commands.get(7) == ProcessInfo.from_json(INFO)
    assert fake.calls[-1].url == f"{PROCESSES}/7"
    sb, _ = sandbox(lambda call: ok({}))
    assert sb.commands.list() == []


# -- the output stream ----------------------------------------------------------------------------


def test_parse_process_event_reads_each_type_and_skips_the_rest():
    assert parse_process_event(out(b"hi\n", 3)) == ProcessEvent("output", stream="stdout", data=b"hi\n", offset=3)
    assert parse_process_event('{"type":"output","stream":"pty","dataBase64":"aGkK","offset":3}').text == "hi\n"
    assert parse_process_event(b'{"type":"lost","bytes":1048576}') == ProcessEvent("lost", lost_bytes=1048576)
    # A process killed by signal N exits 128 + N; the event does not name the signal.
    assert parse_process_event(exited(137)) == ProcessEvent("exited", exit_code=137)
    assert parse_process_event(b'{"type":"exited","exitCode":0,"somethingNew":1}') == ProcessEvent("exited",
                                                                                                   exit_code=0)
    assert parse_process_event(b'{"type":"exited","exitCode":null}') == ProcessEvent("exited")
    assert parse_process_event(KEEPALIVE) is None
    assert parse_process_event(b'{"type":"progress","percent":50}') is None
    assert parse_process_event(b'{"no":"type"}') is None
    assert parse_process_event(b"[1, 2]") is None
    with pytest.raises(kruntimes.ConflictError) as e:
        parse_process_event(line({"type": "failed", "error": {"code": "Conflict", "message": "ended"}}))
    assert (e.value.status, e.value.code) == (409, "Conflict")
    with pytest.raises(ValueError):
        parse_process_event(b"{not json")


def test_ndjson_lines_come_whole_however_the_bytes_are_split():
    body = out(b"one", 3) + b"\r\n" + KEEPALIVE + b"\n\n" + exited()[:-1]
    for size in (1, 2, 7, len(body)):
        lines = NdjsonLines()
        got = []
        for i in range(0, len(body), size):
            got += lines.feed(body[i:i + size])
        got += lines.end()
        assert got == [out(b"one", 3).strip(), KEEPALIVE.strip(), exited().strip()]
        assert lines.end() == []


def test_events_skip_keepalives_and_unknown_types_and_count_lost_bytes():
    body = (KEEPALIVE + line({"type": "lost", "bytes": 5}) + out(b"h\xc3", 7) + line({"type": "resized"})
            + out(b"\xa9llo\n", 12) + out(b"bad \xff\n", 18, "stderr") + exited(3))
    one_byte_chunks = [body[i:i + 1] for i in range(len(body))]
    sb, fake = sandbox(routes(one_byte_chunks))
    h = sb.commands.run("x", background=True)
    events = list(h)
    assert [e.type for e in events] == ["lost", "output", "output", "output", "exited"]
    assert events[0].lost_bytes == 5 and events[3].stream == "stderr" and events[-1].exit_code == 3
    assert (h.exit_code, h.exited, h.lost_bytes, h.offset) == (3, True, 5, 18)
    r = h.wait()
    assert r == ProcessResult(pid=7, exit_code=3, stdout="héllo\n", stderr="bad \ufffd\n", lost_bytes=5)
    assert not r.ok
    with pytest.raises(kruntimes.CommandExitError) as e:
        r.check()
    assert e.value.result is r and "exited with code 3" in e.value.message
    assert list(h) == []
    assert len(connects(fake)) == 1 and (fake.open_streams, fake.closed_streams) == (0, 1)


def test_wait_hands_text_to_callbacks_as_it_comes_decoded_across_chunks():
    sb, _ = sandbox(routes([out(b"h\xc3", 2), out(b"\xa9!\n", 5), out(b"e\xe2\x82", 8, "stderr"), exited(0)]))
    h = sb.commands.run("x", background=True)
    got = {"stdout": [], "stderr": []}
    r = h.wait(on_stdout=got["stdout"].append, on_stderr=got["stderr"].append)
    assert got == {"stdout": ["h", "é!\n"], "stderr": ["e", "\ufffd"]}
    assert (r.stdout, r.stderr, r.ok, r.check()) == ("hé!\n", "e\ufffd", True, r)


def test_a_result_keeps_the_last_mebibyte_of_each_stream():
    mib = 1024 * 1024
    sb, _ = sandbox(routes([out(b"a" * mib, mib), out(b"b" * 10, mib + 10), exited(0)]))
    r = sb.commands.run("x", background=True).wait()
    assert r.stdout == "a" * (mib - 10) + "b" * 10 and r.stdout_truncated and not r.stderr_truncated


def test_a_stream_that_ends_before_exited_raises_and_the_next_wait_repeats_nothing():
    first = [out(b"one\n", 4), out(b"two\n", 8)]
    # The replay: the ring holds from offset 5 on; its lost event counts from the process's start.
    replay = [line({"type": "lost", "bytes": 5}), out(b"wo\nthr", 11), out(b"ee\n", 14), exited(0)]
    sb, fake = sandbox(routes(first, replay))
    h = sb.commands.run("x", background=True)
    with pytest.raises(kruntimes.NetworkError) as e:
        h.wait()
    assert "ended before the process exited" in e.value.message and fake.open_streams == 0
    assert (h.offset, h.exited) == (8, False)
    r = h.wait()
    assert (r.stdout, r.lost_bytes, r.exit_code) == ("one\ntwo\nthree\n", 0, 0)
    assert len(connects(fake)) == 2


def test_a_reconnect_past_what_the_ring_still_holds_is_lost_bytes():
    broken = [out(b"one\n", 4), kruntimes.NetworkError("reset")]
    replay = [line({"type": "lost", "bytes": 10}), out(b"ree\n", 14), exited(0)]
    sb, _ = sandbox(routes(broken, replay))
    h = sb.commands.run("x", background=True)
    events = []
    with pytest.raises(kruntimes.NetworkError):
        for event in h:
            events.append(event)
    events += list(h)
    assert [(e.type, e.data, e.lost_bytes) for e in events] == [
        ("output", b"one\n", 0), ("lost", b"", 6), ("output", b"ree\n", 0), ("exited", b"", 0)]
    # Read up to 4, the ring now starts at 10: 6 bytes this handle never sees.
    assert h.wait() == ProcessResult(pid=7, exit_code=0, stdout="one\nree\n", stderr="", lost_bytes=6)


def test_streams_close_with_their_handle():
    chunks = [out(b"a", 1), out(b"b", 2), exited(0)]
    sb, fake = sandbox(routes(*[chunks] * 5))
    with sb.commands.run("x", background=True) as h:
        assert next(iter(h)).data == b"a" and fake.open_streams == 1
    assert fake.open_streams == 0
    # Iterating again connects again and goes on where it was.
    assert [e.data for e in h] == [b"b", b""] and fake.open_streams == 0
    assert len(connects(fake)) == 2

    h = sb.commands.run("x", background=True)
    next(iter(h))
    h.disconnect()
    h.disconnect()
    assert fake.open_streams == 0

    # Dropped, without the cycle collector: freed at once, and its connection with it.
    gc.disable()
    try:
        h = sb.commands.run("x", background=True)
        next(iter(h))
        assert fake.open_streams == 1
        del h
        assert fake.open_streams == 0
    finally:
        gc.enable()

    # Read to `exited`, even by a reader that stops there: closed.
    h = sb.commands.run("x", background=True)
    for event in h:
        if event.type == "exited":
            break
    assert fake.open_streams == 0 and fake.closed_streams == 5


def test_connect_checks_the_pid_then_replays_and_follows():
    sb, fake = sandbox(routes([out(b"old\n", 4), out(b"new\n", 8), exited(0)]))
    h = sb.commands.connect(7)
    assert isinstance(h, CommandHandle) and (fake.calls[0].method, fake.calls[0].url) == ("GET", f"{PROCESSES}/7")
    assert h.wait().stdout == "old\nnew\n"
    assert h.info() == ProcessInfo.from_json(INFO)


# -- errors ---------------------------------------------------------------------------------------


def test_errors_are_typed_and_nothing_is_sent_twice():
    sb, fake = sandbox(lambda call: error(429, "Busy", retry_after=1))
    with pytest.raises(kruntimes.BusyError) as e:
        sb.commands.run("sleep 60", background=True)
    assert (e.value.status, e.value.code, e.value.retry_after, len(fake.calls)) == (429, "Busy", 1.0, 1)
    with pytest.raises(kruntimes.BusyError):
        sb.pty.create()
    assert len(fake.calls) == 2

    sb, fake = sandbox(lambda call: error(404, "NotFound"))
    with pytest.raises(kruntimes.NotFoundError) as e:
        sb.commands.connect(8)
    assert e.value.status == 404 and len(fake.calls) == 1
    with pytest.raises(kruntimes.NotFoundError):
        sb.pty.connect(8)
    with pytest.raises(kruntimes.NotFoundError):
        sb.commands.send_stdin(8, "x")
    assert sb.commands.kill(8) is False and sb.pty.kill(8) is False

    sb, fake = sandbox(lambda call: error(409, "Conflict"))
    for call in (lambda: sb.commands.send_stdin(7, "late"), lambda: sb.pty.resize(7, 40, 120),
                 lambda: CommandHandle(sb, 7).send_stdin(b"x"), lambda: PtyHandle(sb, 7).resize(30, 100)):
        with pytest.raises(kruntimes.ConflictError) as e:
            call()
        assert (e.value.status, e.value.code, e.value.source) == (409, "Conflict", "gateway")
    assert sb.commands.kill(7) is False and CommandHandle(sb, 7).kill() is False

    sb, _ = sandbox(lambda call: error(503, "NotReady"))
    with pytest.raises(kruntimes.NotReadyError):
        sb.commands.kill(7)


def test_a_connect_refused_raises_its_error_from_the_first_read():
    sb, fake = sandbox(routes(error(404, "NotFound")))
    h = sb.commands.run("x", background=True)
    with pytest.raises(kruntimes.NotFoundError):
        h.wait()
    assert fake.open_streams == 0


# -- terminals ------------------------------------------------------------------------------------


def test_a_terminal_is_started_with_its_size_and_yields_bytes():
    sb, fake = sandbox(routes([out(b"$ ", 2, "pty"), KEEPALIVE, line({"type": "lost", "bytes": 4}),
                               out(b"\x1b[1mhi\r\n", 12, "pty"), exited(0)]))
    p = sb.pty.create()
    assert isinstance(p, PtyHandle) and p.pid == 7
    assert fake.calls[0].json == {"command": {"argv": ["bash", "-i", "-l"]}, "stdin": True,
                                  "pty": {"rows": 24, "cols": 80}}
    p.send_input("exit\n")
    p.resize(40, 120)
    p.signal("SIGWINCH")
    assert [(c.url, c.json) for c in fake.calls[1:]] == [
        (f"{PROCESSES}/7:input", {"dataBase64": b64(b"exit\n")}),
        (f"{PROCESSES}/7:resize", {"rows": 40, "cols": 120}),
        (f"{PROCESSES}/7:signal", {"signal": "SIGWINCH"}),
    ]
    assert list(p) == [b"$ ", b"\x1b[1mhi\r\n"] and p.lost_bytes == 4 and p.exit_code == 0
    assert p.wait() == ProcessResult(pid=7, exit_code=0, stdout="$ \x1b[1mhi\r\n", stderr="", lost_bytes=4)

    sb.pty.create(40, 120, cmd="top", cwd="work", env={"TERM": "dumb"})
    assert fake.calls[-1].json == {"command": {"shell": "top"}, "cwd": "work", "env": {"TERM": "dumb"},
                                   "stdin": True, "pty": {"rows": 40, "cols": 120}}


def test_a_terminal_handle_waits_with_its_chunks_and_connects_by_pid():
    sb, fake = sandbox(routes([out(b"a", 1, "pty"), out(b"b", 2, "pty"), exited(130)]))
    p = sb.pty.connect(7)
    chunks = []
    r = p.wait(on_data=chunks.append)
    assert chunks == [b"a", b"b"] and (r.stdout, r.exit_code, r.ok) == ("ab", 130, False)
    assert p.kill() is True and fake.calls[-1].json == {"signal": "SIGKILL"}
    assert repr(p) == "<PtyHandle pid=7 exit_code=130>"


# -- asyncio --------------------------------------------------------------------------------------


def test_the_async_twin_starts_follows_and_closes_the_same_way():
    async def main():
        sb, fake = async_sandbox(routes(
            [out(b"h\xc3", 2), KEEPALIVE, out(b"\xa9\n", 4), line({"type": "lost", "bytes": 2}),
             out(b"err\n", 10, "stderr"), exited(1)],
            [out(b"x", 1), exited(0)],
            [out(b"$ ", 2, "pty"), line({"type": "??"}), exited(0)],
            [out(b"one\n", 4)],
        ))
        h = await sb.commands.run(["sh", "-c", "x"], background=True, stdin=True)
        assert isinstance(h, AsyncCommandHandle) and fake.calls[0].json == {"command": {"argv": ["sh", "-c", "x"]},
                                                                            "stdin": True}
        await h.send_stdin("in")
        await h.close_stdin()
        await h.signal("hup")
        seen = []

        async def on_stderr(text):
            seen.append(text)

        r = await h.wait(on_stdout=seen.append, on_stderr=on_stderr)
        assert seen == ["h", "é\n", "err\n"]
        assert (r.stdout, r.stderr, r.exit_code, r.lost_bytes) == ("hé\n", "err\n", 1, 2)
        assert [(c.url.rsplit("/", 1)[1], c.json) for c in fake.calls[1:4]] == [
            ("7:input", {"dataBase64": b64(b"in")}), ("7:closeStdin", None), ("7:signal", {"signal": "SIGHUP"})]
        assert fake.open_streams == 0

        async with await sb.commands.run("x", background=True) as h2:
            assert [e.type async for e in h2] == ["output", "exited"]
        assert await h2.kill() is True

        p = await sb.pty.create(30, 100)
        assert isinstance(p, AsyncPtyHandle) and fake.calls[-1].json["pty"] == {"rows": 30, "cols": 100}
        await p.resize(31, 101)
        await p.send_input(b"\x03")
        assert [c async for c in p] == [b"$ "] and p.exit_code == 0

        h3 = await sb.commands.connect(7)
        with pytest.raises(kruntimes.NetworkError):
            await h3.wait()
        assert fake.open_streams == 0

        assert [p.pid for p in await sb.commands.list()] == [7]
        assert (await sb.commands.get(7)).cwd == "work"
        await sb.commands.send_stdin(7, "x")
        await sb.commands.close_stdin(7)
        await sb.commands.signal(7, "TERM")
        assert await sb.commands.kill(7) is True
        await sb.pty.send_input(7, "x")
        await sb.pty.resize(7, 1, 1)
        assert await sb.pty.kill(7) is True
        assert isinstance(await sb.pty.connect(7), AsyncPtyHandle)

        sb, fake = async_sandbox(lambda call: error(409, "Conflict") if call.url.endswith(":resize")
                                 else error(404, "NotFound"))
        with pytest.raises(kruntimes.ConflictError):
            await sb.pty.resize(7, 40, 120)
        with pytest.raises(kruntimes.NotFoundError):
            await sb.commands.connect(7)
        assert await sb.commands.kill(7) is False
        sb, _ = async_sandbox(lambda call: error(429, "Busy"))
        with pytest.raises(kruntimes.BusyError):
            await sb.commands.run("x", background=True)

    asyncio.run(main())


def test_an_async_handle_left_mid_stream_is_closed_by_disconnect():
    async def main():
        sb, fake = async_sandbox(routes([out(b"a", 1), out(b"b", 2), exited(0)]))
        h = await sb.commands.run("x", background=True)
        async for event in h:
            assert event.data == b"a"
            break
        assert fake.open_streams == 1
        await h.disconnect()
        assert fake.open_streams == 0

    asyncio.run(main())


# -- over HTTP ------------------------------------------------------------------------------------

SCRIPT = (out(b"line one\n", 9) + KEEPALIVE + line({"type": "lost", "bytes": 3}) + out(b"two\n", 16, "stderr")
          + exited(0))
# Split mid-line, mid-JSON and between lines: each piece is one HTTP chunk.
PIECES = [SCRIPT[:5], SCRIPT[5:40], SCRIPT[40:41], SCRIPT[41:130], SCRIPT[130:]]


def test_over_http_a_handle_reads_chunked_ndjson_and_closes_its_connection_when_dropped():
    with ProcessServer(PIECES) as server, kruntimes.Client(gateway=server.url, token="t") as c:
        sb = Sandbox(c, session_run(server.endpoint))
        r = sb.commands.run("x", background=True, stdin=True).wait()
        assert (r.stdout, r.stderr, r.lost_bytes, r.exit_code) == ("line one\n", "two\n", 3, 0)
        assert server.seen[0] == ("POST", "/v1/namespaces/default/runtimes/bash/sessions/u-1/processes",
                                  {"command": {"shell": "x"}, "stdin": True})
        with pytest.raises(kruntimes.NotFoundError):
            sb.commands.connect(8)

    with ProcessServer([out(b"first\n", 6)], hang=True) as server, kruntimes.Client(gateway=server.url,
                                                                                   token="t") as c:
        sb = Sandbox(c, session_run(server.endpoint))
        h = sb.commands.connect(7)
        assert next(iter(h)).data == b"first\n"
        del h
        assert server.gone.wait(5), "the connection outlived its handle"


def test_over_http_the_async_twin_reads_and_disconnects():
    async def main():
        with ProcessServer(PIECES) as server:
            async with kruntimes.AsyncClient(gateway=server.url, token="t") as c:
                sb = kruntimes.AsyncSandbox(c, session_run(server.endpoint))
                r = await (await sb.commands.run("x", background=True)).wait()
                assert (r.stdout, r.stderr, r.lost_bytes) == ("line one\n", "two\n", 3)
        with ProcessServer([out(b"$ ", 2, "pty")], hang=True) as server:
            async with kruntimes.AsyncClient(gateway=server.url, token="t") as c:
                sb = kruntimes.AsyncSandbox(c, session_run(server.endpoint))
                async with await sb.pty.connect(7) as p:
                    async for chunk in p:
                        assert chunk == b"$ "
                        break
                assert await asyncio.to_thread(server.gone.wait, 5), "the connection outlived its handle"

    asyncio.run(main())
