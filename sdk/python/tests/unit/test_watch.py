"""Watching a directory against a scripted transport: the request (path, recursive), a handle that
exists only once ``ready`` came, the stream read however its lines are split (``lost`` counted,
keepalives and unknown types skipped), a bounded buffer, ``failed`` and a broken stream raised
after the events read before them, typed errors, ``stop()`` — and, over real HTTP, a local server
that answers like ``files:watch``: the connection closes with ``stop()``, a ``with`` block or a
dropped handle, and the async twin's too."""

import asyncio
import gc
import json
import threading
import time

import pytest

import kruntimes
from kruntimes import AsyncSandbox, AsyncWatchHandle, FilesystemEvent, Sandbox, WatchHandle
from kruntimes.watch import MAX_BUFFERED_EVENTS, WATCH_READ_TIMEOUT

from .fakes import HOLD, SESSION, async_sandbox, error, sandbox, session_run
from .servers import WatchServer

WATCH = f"{SESSION}/files:watch"


def line(doc) -> bytes:
    return json.dumps(doc).encode() + b"\n"


READY = line({"type": "ready"})
KEEPALIVE = line({"type": "keepalive"})


def change(kind: str, path: str) -> bytes:
    return line({"type": "file", "change": kind, "path": path})


def lost(n: int) -> bytes:
    return line({"type": "lost", "events": n})


def failed(code: str, message: str = "broke") -> bytes:
    return line({"type": "failed", "error": {"code": code, "message": message}})


def streams(*bodies):
    """Each ``files:watch`` call answers the next of ``bodies`` (a list of chunks, or an Answer)."""
    pending = list(bodies)

    def answer(call):
        body = pending.pop(0)
        return body if isinstance(body, tuple) else (200, {"content-type": "application/x-ndjson"}, body)

    return answer


def poll(h, n: int, timeout: float = 5.0):
    """``get_new_events()`` until ``n`` events came (or the time is up)."""
    out = []
    deadline = time.monotonic() + timeout
    while len(out) < n and time.monotonic() < deadline:
        out += h.get_new_events()
        time.sleep(0.005)
    return out


def wait_until(cond, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


# -- requests -------------------------------------------------------------------------------------


def test_the_request_names_the_directory_and_whether_it_is_recursive():
    sb, fake = sandbox(streams([READY, HOLD], [READY, HOLD]))
    with sb.files.watch_dir("src", recursive=True) as h:
        assert isinstance(h, WatchHandle) and (h.path, h.recursive) == ("src", True)
    with sb.files.watch_dir("") as flat:
        assert not flat.recursive
    assert [(c.method, c.url, dict(c.params), c.timeout) for c in fake.calls] == [
        ("GET", WATCH, {"path": "src", "recursive": "true"}, WATCH_READ_TIMEOUT),
        ("GET", WATCH, {"path": "", "recursive": "false"}, WATCH_READ_TIMEOUT),
    ]
    assert (fake.open_streams, fake.closed_streams, fake.aborts) == (0, 2, 2)


def test_events_are_read_however_the_lines_are_split_and_unknown_ones_skipped():
    body = (READY + KEEPALIVE + change("create", "src/a.txt") + line({"type": "progress", "percent": 5})
            + b"\r\n\n" + lost(3) + change("write", "src/a.txt") + line([1, 2])
            + change("rename", "src/a.txt") + change("rename", "src/b.txt") + lost(2)
            + line({"type": "file", "change": "other", "path": "src/x", "somethingNew": 1})
            + change("chmod", "src/run.sh") + change("remove", "src/b.txt"))
    one_byte_chunks = [body[i:i + 1] for i in range(len(body))]
    sb, fake = sandbox(streams(one_byte_chunks + [HOLD]))
    h = sb.files.watch_dir("src", recursive=True)
    events = poll(h, 7)
    assert events == [FilesystemEvent("create", "src/a.txt"), FilesystemEvent("write", "src/a.txt"),
                      FilesystemEvent("rename", "src/a.txt"), FilesystemEvent("rename", "src/b.txt"),
                      FilesystemEvent("other", "src/x"), FilesystemEvent("chmod", "src/run.sh"),
                      FilesystemEvent("remove", "src/b.txt")]
    assert events[0].path == events[0].name == "src/a.txt" and events[0].type == "create"
    assert h.lost == 5 and h.get_new_events() == [] and not h.stopped
    h.stop()
    assert h.stopped and fake.open_streams == 0 and h.get_new_events() == [] and list(h) == []
    h.stop()  # idempotent
    assert fake.aborts == 1


def test_watch_dir_returns_only_once_the_session_said_ready():
    gate = threading.Event()
    with WatchServer([KEEPALIVE, gate, READY + change("create", "src/a.txt")]) as server, \
            kruntimes.Client(gateway=server.url, token="t") as c:
        sb = Sandbox(c, session_run(server.endpoint))
        got = []
        t = threading.Thread(target=lambda: got.append(sb.files.watch_dir("src")))
        t.start()
        time.sleep(0.3)
        assert got == [] and server.seen, "watch_dir returned before ready"
        gate.set()
        t.join(5)
        (h,) = got
        with h:
            assert poll(h, 1) == [FilesystemEvent("create", "src/a.txt")]


def test_a_stream_that_fails_or_ends_before_ready_raises_from_watch_dir():
    sb, fake = sandbox(streams([KEEPALIVE, failed("Busy", "too many watches")], [KEEPALIVE], [b'{"type":']))
    with pytest.raises(kruntimes.BusyError) as e:
        sb.files.watch_dir("src")
    assert (e.value.status, e.value.code, e.value.message) == (429, "Busy", "too many watches")
    with pytest.raises(kruntimes.NetworkError) as ne:
        sb.files.watch_dir("src")
    assert "the stream ended" in ne.value.message
    with pytest.raises(kruntimes.NetworkError) as ne:
        sb.files.watch_dir("src")
    assert "not a JSON line" in ne.value.message
    assert (fake.open_streams, fake.closed_streams) == (0, 3)


# -- errors ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("status,code,cls", [
    (404, "NotFound", kruntimes.NotFoundError),
    (409, "Conflict", kruntimes.ConflictError),
    (400, "InvalidPath", kruntimes.InvalidPathError),
    (429, "Busy", kruntimes.BusyError),
])
def test_refused_watches_raise_their_typed_errors(status, code, cls):
    sb, fake = sandbox(lambda call: error(status, code, retry_after=1 if status == 429 else None))
    with pytest.raises(cls) as e:
        sb.files.watch_dir("x", recursive=True)
    assert (e.value.status, e.value.code, e.value.source) == (status, code, "gateway")
    assert len(fake.calls) == 1 and fake.open_streams == 0  # nothing is retried
    if status == 429:
        assert e.value.retry_after == 1.0


def test_a_failure_is_raised_once_the_events_before_it_are_taken():
    sb, _ = sandbox(streams(
        [READY, change("create", "a"), change("remove", "a") + failed("OwnerUnavailable", "gone") + change("x", "b")],
        [READY, change("create", "c")],
        [READY, change("create", "d"), failed("Internal", "the watch ended")],
    ))
    h = sb.files.watch_dir("")
    assert wait_until(lambda: h.stopped)
    assert h.get_new_events() == [FilesystemEvent("create", "a"), FilesystemEvent("remove", "a")]
    for _ in range(2):  # it stays raised
        with pytest.raises(kruntimes.OwnerUnavailableError) as e:
            h.get_new_events()
        assert (e.value.status, e.value.code, e.value.message) == (503, "OwnerUnavailable", "gone")
    with pytest.raises(kruntimes.OwnerUnavailableError):
        list(h)
    h.stop()

    # The stream just ending is a NetworkError, after the events.
    h = sb.files.watch_dir("")
    seen = []
    with pytest.raises(kruntimes.NetworkError) as ne:
        for event in h:
            seen.append(event)
    assert seen == [FilesystemEvent("create", "c")] and "the stream ended" in ne.value.message

    h = sb.files.watch_dir("")
    it = iter(h)
    assert next(it) == FilesystemEvent("create", "d")
    with pytest.raises(kruntimes.InternalError):
        next(it)


def test_the_buffer_keeps_ten_thousand_events_and_counts_the_rest_lost():
    body = [READY] + [b"".join(change("create", f"f{i}") for i in range(j, j + 1000))
                      for j in range(0, MAX_BUFFERED_EVENTS + 1000, 1000)] + [lost(7), HOLD]
    sb, _ = sandbox(streams(body))
    with sb.files.watch_dir("") as h:
        assert wait_until(lambda: h.lost == 1000 + 7)
        events = h.get_new_events()
        assert len(events) == MAX_BUFFERED_EVENTS == 10_000
        assert (events[0].name, events[-1].name) == ("f0", "f9999")
        assert h.get_new_events() == [] and h.lost == 1007


def test_iteration_blocks_until_events_come_and_ends_at_a_stop_from_another_thread():
    gate = threading.Event()
    with WatchServer([READY, gate, change("create", "a") + change("write", "a")]) as server, \
            kruntimes.Client(gateway=server.url, token="t") as c:
        sb = Sandbox(c, session_run(server.endpoint))
        h = sb.files.watch_dir("")
        threading.Timer(0.2, gate.set).start()
        seen = []
        for event in h:
            seen.append(event)
            if len(seen) == 2:
                threading.Timer(0.2, h.stop).start()
        assert seen == [FilesystemEvent("create", "a"), FilesystemEvent("write", "a")]
        assert h.stopped and server.gone.wait(5)


# -- over HTTP ------------------------------------------------------------------------------------


def test_over_http_stop_closes_the_connection_and_so_do_a_with_block_and_dropping_the_handle():
    script = [READY[:4], READY[4:] + change("create", "src/a")[:10], change("create", "src/a")[10:] + lost(2)]
    with WatchServer(script) as server, kruntimes.Client(gateway=server.url, token="t") as c:
        sb = Sandbox(c, session_run(server.endpoint))
        h = sb.files.watch_dir("src", recursive=True)
        assert server.seen == [("/v1/namespaces/default/runtimes/bash/sessions/u-1/files:watch",
                                {"path": ["src"], "recursive": ["true"]})]
        assert poll(h, 1) == [FilesystemEvent("create", "src/a")]
        assert wait_until(lambda: h.lost == 2)
        h.stop()
        assert server.gone.wait(5), "the connection outlived stop()"
        h.stop()
        assert h.get_new_events() == []

    with WatchServer([READY]) as server, kruntimes.Client(gateway=server.url, token="t") as c:
        sb = Sandbox(c, session_run(server.endpoint))
        with sb.files.watch_dir("") as h:
            pass
        assert server.gone.wait(5), "the connection outlived the with block"

    with WatchServer([READY]) as server, kruntimes.Client(gateway=server.url, token="t") as c:
        sb = Sandbox(c, session_run(server.endpoint))
        gc.disable()
        try:
            h = sb.files.watch_dir("")
            del h
        finally:
            gc.enable()
        assert server.gone.wait(5), "the connection outlived its handle"


def test_over_http_refused_watches_are_typed():
    with WatchServer([READY]) as server, kruntimes.Client(gateway=server.url, token="t") as c:
        sb = Sandbox(c, session_run(server.endpoint))
        for path, cls in [("missing", kruntimes.NotFoundError), ("a.txt", kruntimes.ConflictError),
                          ("../etc", kruntimes.InvalidPathError), ("busy", kruntimes.BusyError)]:
            with pytest.raises(cls):
                sb.files.watch_dir(path)
        assert len(server.seen) == 4


# -- asyncio --------------------------------------------------------------------------------------


def test_the_async_twin_waits_for_ready_reads_follows_and_stops():
    async def main():
        sb, fake = async_sandbox(streams(
            [KEEPALIVE, READY[:3], READY[3:] + change("create", "src/a"), lost(4), change("remove", "src/a"), HOLD],
            [READY, change("create", "b"), HOLD],
            [READY, change("create", "c"), failed("Internal", "the watch ended")],
            error(404, "NotFound"), error(409, "Conflict"), error(400, "InvalidPath"), error(429, "Busy"),
            [KEEPALIVE, failed("Busy")],
        ))
        h = await sb.files.watch_dir("src", recursive=True)
        assert isinstance(h, AsyncWatchHandle) and (h.path, h.recursive) == ("src", True)
        assert (fake.calls[0].url, dict(fake.calls[0].params)) == (WATCH, {"path": "src", "recursive": "true"})
        seen = []
        for _ in range(200):
            seen += h.get_new_events()
            if len(seen) == 2:
                break
            await asyncio.sleep(0.005)
        assert seen == [FilesystemEvent("create", "src/a"), FilesystemEvent("remove", "src/a")] and h.lost == 4
        assert fake.open_streams == 1
        await h.stop()
        await h.stop()
        assert h.stopped and fake.open_streams == 0 and [e async for e in h] == []

        async with await sb.files.watch_dir("") as h2:
            async for event in h2:
                assert event == FilesystemEvent("create", "b")
                break
            assert fake.open_streams == 1
        assert fake.open_streams == 0

        h3 = await sb.files.watch_dir("")
        got = []
        with pytest.raises(kruntimes.InternalError):
            async for event in h3:
                got.append(event)
        assert got == [FilesystemEvent("create", "c")]
        with pytest.raises(kruntimes.InternalError):
            h3.get_new_events()

        for cls in (kruntimes.NotFoundError, kruntimes.ConflictError, kruntimes.InvalidPathError,
                    kruntimes.BusyError, kruntimes.BusyError):
            with pytest.raises(cls):
                await sb.files.watch_dir("x")
        assert fake.open_streams == 0

    asyncio.run(main())


def test_the_async_twin_stops_when_its_iteration_is_stopped_by_another_task():
    async def main():
        sb, _ = async_sandbox(streams([READY, change("create", "a"), HOLD]))
        h = await sb.files.watch_dir("")

        async def stop_soon():
            await asyncio.sleep(0.1)
            await h.stop()

        stopper = asyncio.ensure_future(stop_soon())
        assert [e async for e in h] == [FilesystemEvent("create", "a")]
        await stopper

    asyncio.run(main())


def test_over_http_the_async_twin_closes_its_connection():
    async def main():
        with WatchServer([READY, change("write", "w/a")]) as server:
            async with kruntimes.AsyncClient(gateway=server.url, token="t") as c:
                sb = AsyncSandbox(c, session_run(server.endpoint))
                async with await sb.files.watch_dir("w") as h:
                    async for event in h:
                        assert event == FilesystemEvent("write", "w/a")
                        break
                assert await asyncio.to_thread(server.gone.wait, 5), "the connection outlived stop()"
                with pytest.raises(kruntimes.NotFoundError):
                    await sb.files.watch_dir("missing")

    asyncio.run(main())
