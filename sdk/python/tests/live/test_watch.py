"""Watching a directory of a sandbox (``docs/sessions.md``, "Watching files"): a recursive watch
sees what is created, written, renamed and removed beneath its directory, a directory made later
included, and nothing outside it; a missing directory, a file and a path leaving the workspace
are refused with their typed errors; the async twin follows a watch with ``async for``."""

import asyncio
import time
from typing import Callable, List

import pytest

import kruntimes
from kruntimes import AsyncClient, AsyncSandbox, FilesystemEvent, WatchHandle

from .conftest import make_client

#: How long a change may take to be reported.
EVENT_TIMEOUT = 30.0


def _until(h: WatchHandle, done: Callable[[List[FilesystemEvent]], bool],
           seen: List[FilesystemEvent]) -> List[FilesystemEvent]:
    """Polls ``get_new_events()`` into ``seen`` until ``done(seen)``, for at most EVENT_TIMEOUT."""
    deadline = time.monotonic() + EVENT_TIMEOUT
    while not done(seen):
        if time.monotonic() > deadline:
            raise AssertionError(f"not reported within {EVENT_TIMEOUT} s; seen {seen}")
        time.sleep(0.05)
        seen += h.get_new_events()
    return seen


def test_a_recursive_watch_sees_each_change_beneath_its_directory_and_nothing_outside(sandbox):
    sandbox.files.make_dir("src")
    with sandbox.files.watch_dir("src", recursive=True) as h:
        assert (h.path, h.recursive, h.stopped) == ("src", True, False)
        seen: List[FilesystemEvent] = []
        sandbox.commands.run("echo x > outside.txt").check()
        # A directory made after the watch started is watched once the session has seen it
        # (inotify adds its watch then): what is written into it in the same instant could be
        # missed, so the files come once its create was reported.
        sandbox.commands.run("mkdir -p src/d").check()
        _until(h, lambda s: FilesystemEvent("create", "src/d") in s, seen)
        time.sleep(0.2)
        sandbox.commands.run("echo 1 > src/d/a.txt && mv src/d/a.txt src/d/b.txt && rm src/d/b.txt").check()
        _until(h, lambda s: FilesystemEvent("remove", "src/d/b.txt") in s, seen)
        for kind, path in [("create", "src/d/a.txt"), ("write", "src/d/a.txt"), ("rename", "src/d/a.txt"),
                           ("rename", "src/d/b.txt"), ("remove", "src/d/b.txt")]:
            assert FilesystemEvent(kind, path) in seen, (kind, path, seen)
        first = seen.index
        assert (first(FilesystemEvent("create", "src/d/a.txt")) < first(FilesystemEvent("write", "src/d/a.txt"))
                < first(FilesystemEvent("rename", "src/d/a.txt"))), seen
        assert first(FilesystemEvent("rename", "src/d/b.txt")) < first(FilesystemEvent("remove", "src/d/b.txt")), seen
        assert all(e.name == "src" or e.name.startswith("src/") for e in seen), seen
        assert all(e.path == e.name for e in seen)
        assert h.lost == 0
    assert h.stopped and h.get_new_events() == []


def test_a_flat_watch_ignores_subdirectories(sandbox):
    sandbox.files.make_dir("flat/sub")
    with sandbox.files.watch_dir("flat") as h:
        seen: List[FilesystemEvent] = []
        sandbox.commands.run("echo 1 > flat/sub/deep.txt && echo 2 > flat/top.txt").check()
        _until(h, lambda s: FilesystemEvent("create", "flat/top.txt") in s, seen)
        time.sleep(0.3)
        seen += h.get_new_events()
        assert not any(e.name.startswith("flat/sub/") for e in seen), seen


def test_watching_what_is_not_a_directory_of_the_workspace_is_refused(sandbox):
    with pytest.raises(kruntimes.NotFoundError) as e:
        sandbox.files.watch_dir("no/such/dir", recursive=True)
    assert (e.value.status, e.value.code) == (404, "NotFound")
    sandbox.files.write("plain.txt", b"x")
    with pytest.raises(kruntimes.ConflictError) as c:
        sandbox.files.watch_dir("plain.txt")
    assert c.value.status == 409
    with pytest.raises(kruntimes.InvalidPathError) as p:
        sandbox.files.watch_dir("../etc")
    assert (p.value.status, p.value.code) == (400, "InvalidPath")


def test_the_async_twin_follows_a_watch(sandbox):
    async def main():
        async with make_client(AsyncClient) as client:
            sb = await AsyncSandbox.connect(client, sandbox.name)
            await sb.files.make_dir("async-w")
            async with await sb.files.watch_dir("async-w", recursive=True) as h:
                await sb.files.write("async-w/a.txt", b"hi")

                async def first_create():
                    async for event in h:
                        if event == FilesystemEvent("create", "async-w/a.txt"):
                            return event
                    raise AssertionError("the watch ended")

                await asyncio.wait_for(first_create(), EVENT_TIMEOUT)
            assert h.stopped
            with pytest.raises(kruntimes.NotFoundError):
                await sb.files.watch_dir("async-missing")

    asyncio.run(main())
