"""Watching a directory of a sandbox's workspace (``sb.files.watch_dir``).

``GET …/files:watch?path=&recursive=`` streams what changes beneath a directory as NDJSON:
``ready`` first (every change from then on is reported), then one ``file`` line per change,
``lost`` when the session dropped some (its reader fell behind), a ``keepalive`` after 20 s of
silence, and ``failed`` when the watch broke. A handle reads that stream in the background — a
thread for :class:`WatchHandle`, a task for :class:`AsyncWatchHandle` — into a bounded buffer that
``get_new_events()`` empties and iterating the handle follows, until ``stop()``.
"""

from __future__ import annotations

import asyncio
import json
import threading
import weakref
from collections import deque
from dataclasses import dataclass
from typing import (TYPE_CHECKING, Any, AsyncContextManager, AsyncIterator, Callable, ContextManager, Deque, Dict,
                    Iterator, List, Optional, Tuple)

from . import errors
from ._wire import GATEWAY, Call
from .processes import CONNECT_READ_TIMEOUT, NdjsonLines

if TYPE_CHECKING:
    from .sandbox import _SandboxBase

#: The most events a handle buffers; what comes past them is dropped and counted in ``lost``.
MAX_BUFFERED_EVENTS = 10_000
#: The longest a handle waits for the next bytes of the stream, in seconds. The session sends a
#: ``keepalive`` after 20 s of silence, so only a dead connection waits this long.
WATCH_READ_TIMEOUT = CONNECT_READ_TIMEOUT
#: How long ``stop()`` waits for the reading thread to close its connection, in seconds.
_STOP_JOIN_SECONDS = 10.0


@dataclass(frozen=True)
class FilesystemEvent:
    """One change beneath a watched directory (the names of e2b's ``FilesystemEvent``)."""

    #: ``create``, ``write``, ``remove``, ``rename`` (once for the old name and once for the new)
    #: or ``chmod`` (metadata); a newer session may say something else, passed on as it is.
    type: str
    #: The path that changed, workspace-relative (``src/d/a.txt`` for a watch of ``src``) —
    #: not relative to the watched directory.
    name: str

    @property
    def path(self) -> str:
        """``name``: the workspace-relative path."""
        return self.name


def watch_call(sb: "_SandboxBase", path: str, recursive: bool) -> Call:
    """``GET …/files:watch?path=&recursive=``: NDJSON until the client goes away or the session ends."""
    return Call(GATEWAY, "GET", f"{sb.endpoint}/files:watch",
                params={"path": path, "recursive": "true" if recursive else "false"},
                ca_pem=sb._ca_pem, timeout=WATCH_READ_TIMEOUT)


class _State:
    """What a watch's reader has read: the buffered events, the counts of lost ones, whether
    ``ready`` came and how the stream ended. Not locked: :class:`_Reader` holds its lock around
    every use; the asyncio reader needs none."""

    def __init__(self, path: str, limit: int = MAX_BUFFERED_EVENTS) -> None:
        self.path = path
        self.limit = limit
        self.events: Deque[FilesystemEvent] = deque()
        #: Events the session said it dropped (``lost`` lines).
        self.server_lost = 0
        #: Events this client dropped: they came while the buffer was full.
        self.dropped = 0
        self.ready = False
        #: The stream is over: stopped, failed or broken (``error`` says which).
        self.ended = False
        self.error: Optional[BaseException] = None
        self._lines = NdjsonLines()

    @property
    def lost(self) -> int:
        return self.server_lost + self.dropped

    def feed(self, chunk: bytes) -> None:
        """Takes a chunk of the body; a ``failed`` line raises its typed error."""
        for line in self._lines.feed(chunk):
            self.take(line)

    def feed_end(self) -> None:
        for line in self._lines.end():
            self.take(line)

    def take(self, line: bytes) -> None:
        if self.ended:
            return
        try:
            d = json.loads(line)
        except ValueError as e:
            raise errors.NetworkError(f"files:watch {self.path!r}: not a JSON line: {line[:200]!r}") from e
        if not isinstance(d, dict):
            return
        kind = d.get("type")
        if kind == "ready":
            self.ready = True
        elif kind == "file":
            if len(self.events) >= self.limit:
                self.dropped += 1
            else:
                self.events.append(FilesystemEvent(str(d.get("change") or ""), str(d.get("path") or "")))
        elif kind == "lost":
            events = d.get("events")
            self.server_lost += events if isinstance(events, int) and not isinstance(events, bool) else 0
        elif kind == "failed":
            raise errors.from_event(d.get("error"))
        # keepalive, and types this client does not know: skipped

    def end(self, error: Optional[BaseException]) -> None:
        """The stream is over (the first end wins: a stop is not turned into an error later)."""
        if not self.ended:
            self.ended, self.error = True, error

    def ended_early(self) -> errors.NetworkError:
        return errors.NetworkError(f"files:watch {self.path!r}: the stream ended (the session closed the watch)")

    def take_all(self) -> List[FilesystemEvent]:
        """The buffered events; none left and the watch failed: its error."""
        out = list(self.events)
        self.events.clear()
        if not out and self.error is not None:
            raise self.error
        return out

    def next(self) -> Optional[FilesystemEvent]:
        """The oldest buffered event; none left and the watch failed: its error; else None (see
        ``ended`` to know whether more may come)."""
        if self.events:
            return self.events.popleft()
        if self.error is not None:
            raise self.error
        return None


# -- blocking ---------------------------------------------------------------------------------------

#: ``SyncTransport.abortable``: a streamed answer's chunks and what shuts its connection down.
Abortable = Callable[[Call], ContextManager[Tuple[Iterator[bytes], Callable[[], None]]]]


class _Reader:
    """A watch's reading thread and what it read. It holds no reference to its handle, so a
    dropped handle stops it."""

    def __init__(self, abortable: Abortable, call: Call, path: str) -> None:
        self.state = _State(path)
        self.cond = threading.Condition()
        self._abort: Optional[Callable[[], None]] = None
        self._thread = threading.Thread(target=self._run, args=(abortable, call), daemon=True,
                                        name=f"kruntimes-watch {path or '.'}")

    def start(self) -> None:
        """Starts reading; returns once ``ready`` came, or raises why it did not."""
        self._thread.start()
        try:
            with self.cond:
                self.cond.wait_for(lambda: self.state.ready or self.state.ended)
                if self.state.ready:
                    return
        except BaseException:
            self.stop()
            raise
        self._thread.join()
        raise self.state.error or self.state.ended_early()

    def _run(self, abortable: Abortable, call: Call) -> None:
        error: Optional[BaseException] = None
        try:
            with abortable(call) as (chunks, abort):
                with self.cond:
                    self._abort = abort
                    stopped = self.state.ended
                try:
                    error = None if stopped else self._read(chunks)
                finally:
                    # Before the connection is released: a stop() from now on cannot reach it.
                    with self.cond:
                        self._abort = None
        except BaseException as e:  # everything ends the watch, and is raised to its reader
            error = e
        with self.cond:
            self.state.end(error)
            self.cond.notify_all()

    def _read(self, chunks: Iterator[bytes]) -> Optional[BaseException]:
        """Takes the chunks until the watch is stopped (None) or the stream ends (the error that
        is); a ``failed`` line raises its error."""
        for chunk in chunks:
            with self.cond:
                if self.state.ended:
                    return None
                try:
                    self.state.feed(chunk)
                finally:
                    self.cond.notify_all()
        with self.cond:
            self.state.feed_end()
        return self.state.ended_early()

    def stop(self) -> None:
        with self.cond:
            self.state.end(None)
            self.cond.notify_all()
            if self._abort is not None:
                # Shut down under the lock: the connection cannot have gone back to the pool.
                self._abort()
        if self._thread.ident is not None and threading.current_thread() is not self._thread:
            self._thread.join(_STOP_JOIN_SECONDS)


class WatchHandle:
    """A watch of a directory of a :class:`~kruntimes.Sandbox` (``sb.files.watch_dir(path)``),
    made once the session reported it ready: every change after ``watch_dir`` returned is
    reported.

    A thread reads the stream into a buffer of at most :data:`MAX_BUFFERED_EVENTS` events (the
    ones that come while it is full are dropped and counted in :attr:`lost`).
    :meth:`get_new_events` takes what it holds without waiting; iterating the handle yields the
    events as they come, blocking, until :meth:`stop` (from another thread) or a failure. A watch
    that fails — the session's ``failed`` event, a broken or silent connection (60 s), the
    session's end — raises its error from ``get_new_events`` and iteration once the events read
    before it are handed out. :meth:`stop` closes the connection (idempotent), as does the end of
    a ``with`` block and dropping the handle; the events already buffered can still be taken.
    """

    def __init__(self, reader: _Reader, path: str, recursive: bool) -> None:
        self._reader = reader
        #: The watched directory (workspace-relative) and whether its subdirectories are watched.
        self.path = path
        self.recursive = recursive
        self._stop = weakref.finalize(self, reader.stop)
        self._stop.atexit = False

    @classmethod
    def _open(cls, abortable: Abortable, call: Call, path: str, recursive: bool) -> "WatchHandle":
        reader = _Reader(abortable, call, path)
        reader.start()
        return cls(reader, path, recursive)

    def get_new_events(self) -> List[FilesystemEvent]:
        """The events buffered since the last call (oldest first), without waiting: ``[]`` when
        nothing changed. Raises the watch's error once it failed and nothing is left."""
        with self._reader.cond:
            return self._reader.state.take_all()

    def __iter__(self) -> Iterator[FilesystemEvent]:
        r = self._reader
        while True:
            with r.cond:
                r.cond.wait_for(lambda: bool(r.state.events) or r.state.ended)
                event = r.state.next()
            if event is None:
                return
            yield event

    @property
    def lost(self) -> int:
        """Events dropped so far: by the session (its reader fell behind: ``lost`` events) and
        by this handle (its buffer was full)."""
        with self._reader.cond:
            return self._reader.state.lost

    @property
    def stopped(self) -> bool:
        """Whether the watch is over: stopped, or failed."""
        with self._reader.cond:
            return self._reader.state.ended

    def stop(self) -> None:
        """Closes the stream (idempotent); what was buffered can still be taken."""
        self._stop()

    def __enter__(self) -> "WatchHandle":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<WatchHandle path={self.path!r} recursive={self.recursive}{' stopped' if self.stopped else ''}>"


# -- asyncio ----------------------------------------------------------------------------------------

#: ``AsyncTransport.stream``: a streamed answer's status, headers and chunks.
AsyncStream = Callable[[Call], AsyncContextManager[Tuple[int, Dict[str, str], AsyncIterator[bytes]]]]


class _AsyncReader:
    """A watch's reading task and what it read; holds no reference to its handle."""

    def __init__(self, path: str) -> None:
        self.state = _State(path)
        self.changed = asyncio.Event()
        self.task: "Optional[asyncio.Future[None]]" = None

    async def start(self, stream: AsyncStream, call: Call) -> None:
        self.task = task = asyncio.ensure_future(self._run(stream, call))
        try:
            while not (self.state.ready or self.state.ended):
                await self.wait()
        except BaseException:
            task.cancel()
            raise
        if not self.state.ready:
            await asyncio.wait([task])
            raise self.state.error or self.state.ended_early()

    async def wait(self) -> None:
        """Until the reader took something, or ended."""
        self.changed.clear()
        await self.changed.wait()

    async def _run(self, stream: AsyncStream, call: Call) -> None:
        error: Optional[BaseException] = None
        try:
            async with stream(call) as (_, _, chunks):
                async for chunk in chunks:
                    try:
                        self.state.feed(chunk)
                    finally:
                        self.changed.set()
                self.state.feed_end()
            error = self.state.ended_early()
        except asyncio.CancelledError:
            self.state.end(None)
            self.changed.set()
            raise
        except Exception as e:  # everything else ends the watch, and is raised to its reader
            error = e
        self.state.end(error)
        self.changed.set()

    async def stop(self) -> None:
        self.state.end(None)
        self.changed.set()
        task = self.task
        if task is not None and not task.done():
            task.cancel()
            await asyncio.wait([task])


def _cancel(task: "asyncio.Future[None]") -> None:
    """A dropped async handle's task: cancelled on its loop, if that still runs."""
    try:
        if not task.done():
            task.get_loop().call_soon_threadsafe(task.cancel)
    except RuntimeError:  # the loop is closed: so is the task's connection
        pass


class AsyncWatchHandle:
    """:class:`WatchHandle` of an :class:`~kruntimes.AsyncSandbox`: a task reads the stream;
    ``async for`` follows it; ``await h.stop()``; ``async with``. :meth:`get_new_events` does not
    wait, so it is a plain method (no ``await``)."""

    def __init__(self, reader: _AsyncReader, path: str, recursive: bool) -> None:
        self._reader = reader
        self.path = path
        self.recursive = recursive
        assert reader.task is not None
        weakref.finalize(self, _cancel, reader.task).atexit = False

    @classmethod
    async def _open(cls, stream: AsyncStream, call: Call, path: str, recursive: bool) -> "AsyncWatchHandle":
        reader = _AsyncReader(path)
        await reader.start(stream, call)
        return cls(reader, path, recursive)

    def get_new_events(self) -> List[FilesystemEvent]:
        """:meth:`WatchHandle.get_new_events` (not a coroutine: it does not wait)."""
        return self._reader.state.take_all()

    async def _events(self) -> AsyncIterator[FilesystemEvent]:
        r = self._reader
        while True:
            event = r.state.next()
            if event is not None:
                yield event
            elif r.state.ended:
                return
            else:
                await r.wait()

    def __aiter__(self) -> AsyncIterator[FilesystemEvent]:
        return self._events()

    @property
    def lost(self) -> int:
        """:attr:`WatchHandle.lost`."""
        return self._reader.state.lost

    @property
    def stopped(self) -> bool:
        """:attr:`WatchHandle.stopped`."""
        return self._reader.state.ended

    async def stop(self) -> None:
        """:meth:`WatchHandle.stop`: closes the stream once its task is done (idempotent)."""
        await self._reader.stop()

    async def __aenter__(self) -> "AsyncWatchHandle":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.stop()

    def __repr__(self) -> str:
        return (f"<AsyncWatchHandle path={self.path!r} recursive={self.recursive}"
                f"{' stopped' if self.stopped else ''}>")

