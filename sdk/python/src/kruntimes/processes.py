"""Background processes and terminals in a sandbox.

A process started in the background (``sb.commands.run(cmd, background=True)``) or on a
terminal (``sb.pty.create()``) runs until it exits, is signalled or the session ends, whoever is
connected to it. The session keeps the last 1 MiB of its output (stdout and stderr, or the
terminal's bytes) in a ring: a handle connects on its first iteration or ``wait()``, gets the
ring replayed, then follows live until the process exits. Starting a process waits its turn in
the session's FIFO queue; listing, connecting, input, signals and resizing bypass it.

The requests are flows (:mod:`kruntimes._wire`) shared by the blocking and asyncio handles; the
output (``GET …/processes/{pid}:connect``, NDJSON) is split into lines by :class:`NdjsonLines`
and read by :func:`parse_process_event` however its bytes arrive.
"""

from __future__ import annotations

import base64
import codecs
import dataclasses
import inspect
import json
import signal as _signal
from dataclasses import dataclass
from datetime import datetime
from typing import (TYPE_CHECKING, Any, AsyncGenerator, AsyncIterator, Awaitable, Callable, Dict, Generator,
                    Iterator, List, Mapping, Optional, Tuple, Union)

from . import errors
from ._runs import parse_time
from ._wire import GATEWAY, Call, Flow
from .commands import CommandLine, command_body

if TYPE_CHECKING:
    from ._transport import AsyncTransport, SyncTransport
    from .sandbox import AsyncSandbox, Sandbox, _SandboxBase

#: What ``send_stdin`` / ``send_input`` take: bytes, or text (sent as UTF-8).
Input = Union[str, bytes]
#: A signal: its name (``"SIGINT"``, ``"INT"``, case-insensitive) or a :class:`signal.Signals`
#: (sent by name, so the numbering of the client's platform does not matter).
SignalLike = Union[str, _signal.Signals]

#: The most input one ``:input`` call carries; longer input is sent in pieces of this size.
MAX_INPUT_BYTES = 1024 * 1024
#: What a handle keeps of each stream for its result: the last 1 MiB (as the session's ring).
RESULT_TAIL_BYTES = 1024 * 1024
#: The longest a handle waits for the next bytes of its output stream, in seconds. The session
#: sends a ``keepalive`` after 20 s of silence, so only a dead connection waits this long.
CONNECT_READ_TIMEOUT = 60.0
#: What ``sb.pty.create()`` runs by default: an interactive login shell.
PTY_COMMAND = ("bash", "-i", "-l")
#: A terminal's rows and columns are 1–1000.
MAX_PTY_SIZE = 1000


@dataclass(frozen=True)
class ProcessInfo:
    """A background process as the session lists it (running, or among the 64 most recently ended)."""

    pid: int
    #: A shell script (``str``) or a program and its arguments (``list``), as it was started.
    command: CommandLine
    #: Workspace-relative working directory ("" for the workspace itself).
    cwd: str
    #: Whether it runs on a terminal.
    pty: bool
    running: bool
    #: Its exit code once it ended: the process's own, or ``128 + N`` when signal N killed it
    #: (137 for SIGKILL, 143 for SIGTERM; the session cannot tell the two apart).
    exit_code: Optional[int]
    started_at: Optional[datetime]
    ended_at: Optional[datetime]

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "ProcessInfo":
        command = d.get("command")
        cmd: CommandLine
        if isinstance(command, dict) and isinstance(command.get("argv"), list):
            cmd = [str(a) for a in command["argv"]]
        elif isinstance(command, dict):
            cmd = str(command.get("shell") or "")
        else:
            cmd = "" if command is None else str(command)
        return cls(
            pid=int(d.get("pid") or 0),
            command=cmd,
            cwd=str(d.get("cwd") or ""),
            pty=bool(d.get("pty")),
            running=bool(d.get("running")),
            exit_code=_int_or_none(d.get("exitCode")),
            started_at=parse_time(d.get("startedAt")),
            ended_at=parse_time(d.get("endedAt")),
        )


@dataclass(frozen=True)
class ProcessEvent:
    """One event of a process's output stream, in order. ``keepalive`` events and types this
    client does not know are skipped, never handed out."""

    #: ``output``, ``lost`` or ``exited`` (always the last).
    type: str
    #: ``stdout``, ``stderr`` or ``pty`` (``output``).
    stream: Optional[str] = None
    #: The bytes written (``output``).
    data: bytes = b""
    #: The process's output bytes so far, up to the end of this chunk (``output``).
    offset: Optional[int] = None
    #: How many bytes the ring dropped before what follows (``lost``): this reader never sees them.
    lost_bytes: int = 0
    #: The process's exit code, or ``128 + N`` when signal N killed it (``exited``).
    exit_code: Optional[int] = None

    @property
    def text(self) -> str:
        """``data`` as UTF-8 (invalid bytes replaced; a character split between two chunks is
        replaced too — ``wait()`` and its callbacks decode across chunks)."""
        return self.data.decode("utf-8", "replace")


@dataclass(frozen=True)
class ProcessResult:
    """How a background process or terminal ended, and the output its handle read."""

    pid: int
    #: The process's exit code, or ``128 + N`` when signal N killed it (137 after ``kill()``,
    #: 143 after SIGTERM): the shell's convention, so a process that exits 137 itself reads the same.
    exit_code: Optional[int]
    #: UTF-8, invalid bytes replaced; a terminal's output is its stdout.
    stdout: str
    stderr: str
    #: The handle kept only the last 1 MiB of that stream.
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    #: Output the session's ring dropped before the handle read it (``lost`` events), any stream.
    lost_bytes: int = 0

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    def check(self) -> "ProcessResult":
        """Returns self if the process exited 0, else raises :class:`~kruntimes.CommandExitError`."""
        if not self.ok:
            raise errors.CommandExitError(f"process {self.pid} exited with code {self.exit_code}", result=self)
        return self


def _int_or_none(value: Any) -> Optional[int]:
    return None if value is None or isinstance(value, bool) else int(value)


# -- requests -----------------------------------------------------------------------------------


def check_pid(pid: int) -> int:
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
        raise ValueError(f"not a pid: {pid!r}")
    return pid


def pty_size(rows: int, cols: int) -> Dict[str, int]:
    """``{"rows", "cols"}``; :class:`ValueError` outside 1–1000, before anything is sent."""
    for what, n in (("rows", rows), ("cols", cols)):
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_PTY_SIZE:
            raise ValueError(f"a terminal's {what} are 1–{MAX_PTY_SIZE}, not {n!r}")
    return {"rows": rows, "cols": cols}


def signal_name(sig: SignalLike) -> str:
    """``SIGINT`` for ``"SIGINT"``, ``"int"`` or ``signal.SIGINT``."""
    if isinstance(sig, _signal.Signals):
        return sig.name
    if not isinstance(sig, str):
        raise TypeError(f"a signal is a name such as 'SIGTERM' or a signal.Signals, not {sig!r}")
    name = sig.strip().upper()
    if not name or name == "SIG":
        raise ValueError(f"not a signal: {sig!r}")
    return name if name.startswith("SIG") else f"SIG{name}"


def start_body(cmd: CommandLine, *, cwd: Optional[str], env: Optional[Mapping[str, str]], stdin: bool,
               pty: Optional[Tuple[int, int]] = None) -> Dict[str, Any]:
    """The ``POST …/processes`` body."""
    body = command_body(cmd, timeout=None, cwd=cwd, env=env, stdin=None)
    if stdin:
        body["stdin"] = True
    if pty is not None:
        body["pty"] = pty_size(*pty)
    return body


def _call(sb: "_SandboxBase", method: str, pid: Optional[int] = None, action: str = "", *, json: Any = None,
          timeout: Optional[float] = 30.0) -> Call:
    url = f"{sb.endpoint}/processes" if pid is None else f"{sb.endpoint}/processes/{check_pid(pid)}{action}"
    return Call(GATEWAY, method, url, json=json, ca_pem=sb._ca_pem, timeout=timeout)


def connect_call(sb: "_SandboxBase", pid: int) -> Call:
    """``GET …/processes/{pid}:connect``: NDJSON until the process exits."""
    return _call(sb, "GET", pid, ":connect", timeout=CONNECT_READ_TIMEOUT)


def start_flow(sb: "_SandboxBase", body: Dict[str, Any]) -> Flow[int]:
    # It waits its turn in the queue: no client-side limit (the server bounds the queue).
    reply = yield _call(sb, "POST", json=body, timeout=None)
    assert reply is not None
    return int(reply.json()["pid"])


def list_flow(sb: "_SandboxBase") -> Flow[List[ProcessInfo]]:
    reply = yield _call(sb, "GET")
    assert reply is not None
    return [ProcessInfo.from_json(p) for p in reply.json().get("processes") or []]


def get_flow(sb: "_SandboxBase", pid: int) -> Flow[ProcessInfo]:
    reply = yield _call(sb, "GET", pid)
    assert reply is not None
    return ProcessInfo.from_json(reply.json())


def input_flow(sb: "_SandboxBase", pid: int, data: Input) -> Flow[None]:
    raw = data.encode() if isinstance(data, str) else bytes(data)
    check_pid(pid)
    for start in range(0, max(len(raw), 1), MAX_INPUT_BYTES):
        piece = raw[start:start + MAX_INPUT_BYTES]
        yield _call(sb, "POST", pid, ":input", json={"dataBase64": base64.b64encode(piece).decode()})


def close_stdin_flow(sb: "_SandboxBase", pid: int) -> Flow[None]:
    yield _call(sb, "POST", pid, ":closeStdin")


def signal_flow(sb: "_SandboxBase", pid: int, sig: SignalLike) -> Flow[None]:
    yield _call(sb, "POST", pid, ":signal", json={"signal": signal_name(sig)})


def kill_flow(sb: "_SandboxBase", pid: int) -> Flow[bool]:
    """SIGKILL: True once sent, False for a process the session does not know or that has ended."""
    try:
        yield from signal_flow(sb, pid, "SIGKILL")
    except (errors.NotFoundError, errors.ConflictError):
        return False
    return True


def resize_flow(sb: "_SandboxBase", pid: int, rows: int, cols: int) -> Flow[None]:
    yield _call(sb, "POST", pid, ":resize", json=pty_size(rows, cols))


# -- the output stream ----------------------------------------------------------------------------


class NdjsonLines:
    """The lines of an NDJSON body, however its bytes are split: :meth:`feed` each chunk as it
    arrives, :meth:`end` once the body ended. Blank lines are dropped, ``\\r\\n`` is a newline."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._scanned = 0

    def feed(self, chunk: bytes) -> List[bytes]:
        self._buf += chunk
        lines: List[bytes] = []
        start = 0
        while True:
            i = self._buf.find(b"\n", max(start, self._scanned))
            if i < 0:
                break
            line = bytes(self._buf[start:i]).strip()
            if line:
                lines.append(line)
            start = i + 1
        del self._buf[:start]
        self._scanned = len(self._buf)
        return lines

    def end(self) -> List[bytes]:
        """A last line without a newline."""
        line = bytes(self._buf).strip()
        self._buf.clear()
        self._scanned = 0
        return [line] if line else []


def parse_process_event(line: Union[str, bytes]) -> Optional[ProcessEvent]:
    """One line of ``…:connect``: an event, or None for ``keepalive`` and for types (or lines)
    this client does not know. A ``failed`` event (an error after the stream started, as on
    ``operations:stream``) raises its typed error."""
    d = json.loads(line)
    if not isinstance(d, dict):
        return None
    kind = d.get("type")
    if kind == "output":
        return ProcessEvent("output", stream=str(d.get("stream") or "stdout"),
                            data=base64.b64decode(d.get("dataBase64") or "", validate=True),
                            offset=_int_or_none(d.get("offset")))
    if kind == "lost":
        return ProcessEvent("lost", lost_bytes=int(d.get("bytes") or 0))
    if kind == "exited":
        return ProcessEvent("exited", exit_code=_int_or_none(d.get("exitCode")))
    if kind == "failed":
        raise errors.from_event(d.get("error"))
    return None


def _result_stream(event: ProcessEvent) -> str:
    """Where an output event goes in a result: ``stderr``, or ``stdout`` (a terminal's too)."""
    return "stderr" if event.stream == "stderr" else "stdout"


class _Seen:
    """What a handle has read of its process: the tail of each stream, the bytes lost, the offset
    reached and the exit. Holds no reference to the handle, so a dropped handle's stream closes
    at once (its generator is freed with it, not by the cycle collector)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.exited = False
        self.exit_code: Optional[int] = None
        self.lost_bytes = 0
        self.offset = 0
        self.connections = 0
        self._tails = {"stdout": bytearray(), "stderr": bytearray()}
        self._truncated = {"stdout": False, "stderr": False}

    def connected(self) -> None:
        self.connections += 1

    def take(self, line: bytes) -> List[ProcessEvent]:
        """The events a line of the stream stands for, recorded.

        On the first connection, every event as it comes. On a later one (after the previous
        connection broke), the ring is replayed from its start: output already read is dropped
        by its ``offset`` (a chunk that straddles it is cut), and a gap between what was read and
        what the ring still holds is one ``lost`` event (the session's own ``lost`` counts from
        the process's start, not from what this handle read)."""
        event = parse_process_event(line)
        if event is None:
            return []
        if self.connections > 1 and event.type == "lost":
            return []
        out: List[ProcessEvent] = []
        if self.connections > 1 and event.type == "output" and event.offset is not None:
            start = event.offset - len(event.data)
            if event.offset <= self.offset:
                return []
            if start < self.offset:
                event = dataclasses.replace(event, data=event.data[self.offset - start:])
            elif start > self.offset:
                out.append(self._record(ProcessEvent("lost", lost_bytes=start - self.offset)))
        out.append(self._record(event))
        return out

    def _record(self, event: ProcessEvent) -> ProcessEvent:
        if event.type == "lost":
            self.lost_bytes += event.lost_bytes
        elif event.type == "output":
            self.offset = event.offset if event.offset is not None else self.offset + len(event.data)
            stream = _result_stream(event)
            tail = self._tails[stream]
            tail += event.data
            if len(tail) > RESULT_TAIL_BYTES:
                del tail[:len(tail) - RESULT_TAIL_BYTES]
                self._truncated[stream] = True
        elif event.type == "exited":
            self.exited, self.exit_code = True, event.exit_code
        return event

    def result(self) -> ProcessResult:
        return ProcessResult(
            pid=self.pid, exit_code=self.exit_code,
            stdout=self._tails["stdout"].decode("utf-8", "replace"),
            stderr=self._tails["stderr"].decode("utf-8", "replace"),
            stdout_truncated=self._truncated["stdout"], stderr_truncated=self._truncated["stderr"],
            lost_bytes=self.lost_bytes)

    def ended_early(self) -> errors.NetworkError:
        return errors.NetworkError(f"process {self.pid}: the output stream ended before the process exited "
                                   "(iterate or wait() again to connect again)")


def _follow(transport: "SyncTransport", call: Call, seen: _Seen) -> Generator[ProcessEvent, None, None]:
    """One connection: its events until ``exited``; the connection closes when this generator
    returns or is closed (or freed)."""
    lines = NdjsonLines()
    seen.connected()
    with transport.stream(call) as (_, _, chunks):
        for chunk in chunks:
            for line in lines.feed(chunk):
                yield from seen.take(line)
                if seen.exited:
                    return
        for line in lines.end():
            yield from seen.take(line)
            if seen.exited:
                return
    raise seen.ended_early()


async def _follow_async(transport: "AsyncTransport", call: Call, seen: _Seen) -> AsyncGenerator[ProcessEvent, None]:
    """:func:`_follow`, asynchronously."""
    lines = NdjsonLines()
    seen.connected()
    async with transport.stream(call) as (_, _, chunks):
        async for chunk in chunks:
            for line in lines.feed(chunk):
                for event in seen.take(line):
                    yield event
                if seen.exited:
                    return
        for line in lines.end():
            for event in seen.take(line):
                yield event
            if seen.exited:
                return
    raise seen.ended_early()


class _Decoders:
    """Output callbacks of ``wait()``: text decoded across chunks (UTF-8, invalid bytes replaced)."""

    def __init__(self) -> None:
        self._decoders: Dict[str, "codecs.IncrementalDecoder"] = {}

    def text(self, stream: str, data: bytes, final: bool = False) -> str:
        d = self._decoders.get(stream)
        if d is None:
            d = self._decoders[stream] = codecs.getincrementaldecoder("utf-8")("replace")
        return d.decode(data, final)

    def rest(self) -> List[Tuple[str, str]]:
        return [(s, t) for s, d in self._decoders.items() if (t := d.decode(b"", True))]


TextCallback = Callable[[str], Any]
BytesCallback = Callable[[bytes], Any]


# -- handles --------------------------------------------------------------------------------------


class _HandleBase:
    def __init__(self, sandbox: "_SandboxBase", pid: int) -> None:
        self._sb = sandbox
        #: The process's id (what ``connect``, ``kill`` and the list know it by).
        self.pid = check_pid(pid)
        self._seen = _Seen(pid)

    @property
    def exit_code(self) -> Optional[int]:
        """The exit code, once this handle read the ``exited`` event (None before)."""
        return self._seen.exit_code

    @property
    def exited(self) -> bool:
        """Whether this handle has read the ``exited`` event."""
        return self._seen.exited

    @property
    def lost_bytes(self) -> int:
        """Output the session's ring dropped before this handle read it (``lost`` events)."""
        return self._seen.lost_bytes

    @property
    def offset(self) -> int:
        """The process's output bytes this handle has read up to."""
        return self._seen.offset

    def __repr__(self) -> str:
        state = f"exit_code={self.exit_code}" if self.exited else "running"
        return f"<{type(self).__name__} pid={self.pid} {state}>"


class _SyncHandle(_HandleBase):
    _sb: "Sandbox"

    def __init__(self, sandbox: "Sandbox", pid: int) -> None:
        super().__init__(sandbox, pid)
        self._stream: Optional[Generator[ProcessEvent, None, None]] = None

    def _events(self) -> Iterator[ProcessEvent]:
        while not self._seen.exited:
            if self._stream is None:
                self._stream = _follow(self._sb._client._transport, connect_call(self._sb, self.pid), self._seen)
            try:
                event = next(self._stream)
            except StopIteration:
                self._stream = None
                continue
            except BaseException:
                self._stream = None
                raise
            if event.type == "exited":
                self.disconnect()
            yield event

    def disconnect(self) -> None:
        """Closes the output stream, if open; the process goes on. Iterating or ``wait()`` again
        connects again (output already read is not repeated)."""
        stream, self._stream = self._stream, None
        if stream is not None:
            stream.close()

    def info(self) -> ProcessInfo:
        """The process as the session lists it now."""
        return self._sb._client._drive(get_flow(self._sb, self.pid))

    def kill(self) -> bool:
        """Sends SIGKILL (the process ends at once, exit code 137): True once sent, False when the
        process has already ended or the session does not know it."""
        return self._sb._client._drive(kill_flow(self._sb, self.pid))

    def signal(self, sig: SignalLike) -> None:
        """Sends a signal: ``SIGTERM`` ends the whole tree (2 s grace, then SIGKILL), ``SIGKILL``
        at once; ``SIGINT``, ``SIGHUP``, ``SIGQUIT``, ``SIGUSR1``, ``SIGUSR2``, ``SIGWINCH``,
        ``SIGCONT`` and ``SIGTSTP`` go to the process itself."""
        self._sb._client._drive(signal_flow(self._sb, self.pid, sig))


class _AsyncHandle(_HandleBase):
    _sb: "AsyncSandbox"

    def __init__(self, sandbox: "AsyncSandbox", pid: int) -> None:
        super().__init__(sandbox, pid)
        self._stream: Optional[AsyncGenerator[ProcessEvent, None]] = None

    async def _events(self) -> AsyncIterator[ProcessEvent]:
        while not self._seen.exited:
            if self._stream is None:
                self._stream = _follow_async(self._sb._client._transport, connect_call(self._sb, self.pid), self._seen)
            try:
                event = await self._stream.__anext__()
            except StopAsyncIteration:
                self._stream = None
                continue
            except BaseException:
                self._stream = None
                raise
            if event.type == "exited":
                await self.disconnect()
            yield event

    async def disconnect(self) -> None:
        """:meth:`CommandHandle.disconnect`."""
        stream, self._stream = self._stream, None
        if stream is not None:
            await stream.aclose()

    async def info(self) -> ProcessInfo:
        """:meth:`CommandHandle.info`."""
        return await self._sb._client._drive(get_flow(self._sb, self.pid))

    async def kill(self) -> bool:
        """:meth:`CommandHandle.kill`."""
        return await self._sb._client._drive(kill_flow(self._sb, self.pid))

    async def signal(self, sig: SignalLike) -> None:
        """:meth:`CommandHandle.signal`."""
        await self._sb._client._drive(signal_flow(self._sb, self.pid, sig))


async def _call_back(callback: Optional[Callable[[Any], Any]], value: Any) -> None:
    if callback is not None:
        out = callback(value)
        if inspect.isawaitable(out):
            await out


class CommandHandle(_SyncHandle):
    """A background process of a :class:`~kruntimes.Sandbox` (``sb.commands.run(cmd,
    background=True)``, ``sb.commands.connect(pid)``).

    Iterating it yields its :class:`ProcessEvent` s — the output the session still holds, then
    live, ``lost`` where the ring dropped some, ``exited`` last — over one connection that opens
    on the first iteration (or ``wait()``) and closes at ``exited``, at :meth:`disconnect`, when
    a ``with`` block ends, or when the handle is dropped. The process goes on either way.
    """

    def __iter__(self) -> Iterator[ProcessEvent]:
        return self._events()

    def wait(self, *, on_stdout: Optional[TextCallback] = None,
             on_stderr: Optional[TextCallback] = None) -> ProcessResult:
        """Follows the output until the process exits; returns its :class:`ProcessResult` (a
        non-zero exit is a result: ``check()`` raises for it). ``on_stdout`` / ``on_stderr`` get
        the text as it comes (a terminal's goes to ``on_stdout``). Raises
        :class:`~kruntimes.NetworkError` if the connection breaks first (call again to connect
        again: output already read is not repeated)."""
        text = _Decoders()
        callbacks = {"stdout": on_stdout, "stderr": on_stderr}
        for event in self._events():
            if event.type == "output":
                stream = _result_stream(event)
                cb = callbacks[stream]
                if cb is not None and (chunk := text.text(stream, event.data)):
                    cb(chunk)
        for stream, rest in text.rest():
            cb = callbacks[stream]
            if cb is not None:
                cb(rest)
        return self._seen.result()

    def send_stdin(self, data: Input) -> None:
        """Writes to the process's stdin (started with ``stdin=True``); :class:`~kruntimes.ConflictError`
        once its stdin is closed or it has ended."""
        self._sb._client._drive(input_flow(self._sb, self.pid, data))

    def close_stdin(self) -> None:
        """Closes its stdin: it reads end-of-file (idempotent)."""
        self._sb._client._drive(close_stdin_flow(self._sb, self.pid))

    def __enter__(self) -> "CommandHandle":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.disconnect()


class AsyncCommandHandle(_AsyncHandle):
    """:class:`CommandHandle` of an :class:`~kruntimes.AsyncSandbox`: ``async for``, coroutines,
    ``async with``."""

    def __aiter__(self) -> AsyncIterator[ProcessEvent]:
        return self._events()

    async def wait(self, *, on_stdout: Optional[Callable[[str], Union[None, Awaitable[None]]]] = None,
                   on_stderr: Optional[Callable[[str], Union[None, Awaitable[None]]]] = None) -> ProcessResult:
        """:meth:`CommandHandle.wait` (callbacks may be coroutine functions)."""
        text = _Decoders()
        callbacks = {"stdout": on_stdout, "stderr": on_stderr}
        async for event in self._events():
            if event.type == "output":
                stream = _result_stream(event)
                if callbacks[stream] is not None and (chunk := text.text(stream, event.data)):
                    await _call_back(callbacks[stream], chunk)
        for stream, rest in text.rest():
            await _call_back(callbacks[stream], rest)
        return self._seen.result()

    async def send_stdin(self, data: Input) -> None:
        """:meth:`CommandHandle.send_stdin`."""
        await self._sb._client._drive(input_flow(self._sb, self.pid, data))

    async def close_stdin(self) -> None:
        """:meth:`CommandHandle.close_stdin`."""
        await self._sb._client._drive(close_stdin_flow(self._sb, self.pid))

    async def __aenter__(self) -> "AsyncCommandHandle":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.disconnect()


class PtyHandle(_SyncHandle):
    """A process on a terminal of a :class:`~kruntimes.Sandbox` (``sb.pty.create()``,
    ``sb.pty.connect(pid)``). Iterating it yields the terminal's output as ``bytes`` chunks
    (``lost_bytes`` counts what the ring dropped) until the process exits; the connection is
    that of :class:`CommandHandle`."""

    def __iter__(self) -> Iterator[bytes]:
        for event in self._events():
            if event.type == "output":
                yield event.data

    def wait(self, *, on_data: Optional[BytesCallback] = None) -> ProcessResult:
        """Follows the terminal until the process exits; its output is the result's ``stdout``.
        ``on_data`` gets each chunk of bytes as it comes."""
        for event in self._events():
            if event.type == "output" and on_data is not None:
                on_data(event.data)
        return self._seen.result()

    def send_input(self, data: Input) -> None:
        """Types into the terminal (``"ls\\n"``, ``b"\\x03"`` for Ctrl-C)."""
        self._sb._client._drive(input_flow(self._sb, self.pid, data))

    def resize(self, rows: int, cols: int) -> None:
        """Sets the terminal's size (1–1000 each); the process gets SIGWINCH."""
        self._sb._client._drive(resize_flow(self._sb, self.pid, rows, cols))

    def __enter__(self) -> "PtyHandle":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.disconnect()


class AsyncPtyHandle(_AsyncHandle):
    """:class:`PtyHandle` of an :class:`~kruntimes.AsyncSandbox`."""

    async def _chunks(self) -> AsyncIterator[bytes]:
        async for event in self._events():
            if event.type == "output":
                yield event.data

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._chunks()

    async def wait(self, *, on_data: Optional[Callable[[bytes], Union[None, Awaitable[None]]]] = None) -> ProcessResult:
        """:meth:`PtyHandle.wait` (``on_data`` may be a coroutine function)."""
        async for event in self._events():
            if event.type == "output":
                await _call_back(on_data, event.data)
        return self._seen.result()

    async def send_input(self, data: Input) -> None:
        """:meth:`PtyHandle.send_input`."""
        await self._sb._client._drive(input_flow(self._sb, self.pid, data))

    async def resize(self, rows: int, cols: int) -> None:
        """:meth:`PtyHandle.resize`."""
        await self._sb._client._drive(resize_flow(self._sb, self.pid, rows, cols))

    async def __aenter__(self) -> "AsyncPtyHandle":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.disconnect()


# -- sb.pty ---------------------------------------------------------------------------------------


def pty_body(rows: int, cols: int, cmd: Optional[CommandLine], cwd: Optional[str],
             env: Optional[Mapping[str, str]]) -> Dict[str, Any]:
    # A terminal's input is always open (stdin: true), until the process ends.
    return start_body(list(PTY_COMMAND) if cmd is None else cmd, cwd=cwd, env=env, stdin=True, pty=(rows, cols))


class _PtyBase:
    def __init__(self, sandbox: "_SandboxBase") -> None:
        self._sandbox = sandbox


class Pty(_PtyBase):
    """``sandbox.pty`` of a :class:`~kruntimes.Sandbox`: processes on a terminal."""

    _sandbox: "Sandbox"

    def create(self, rows: int = 24, cols: int = 80, *, cmd: Optional[CommandLine] = None,
               cwd: Optional[str] = None, env: Optional[Mapping[str, str]] = None) -> PtyHandle:
        """Starts ``cmd`` (default ``bash -i -l``; a ``str`` runs with ``bash -c``) on a terminal of
        ``rows`` × ``cols`` (1–1000), ``TERM=xterm-256color`` unless ``env`` says otherwise. It
        waits its turn in the session's queue to start, then runs until it exits or is killed."""
        body = pty_body(rows, cols, cmd, cwd, env)
        return PtyHandle(self._sandbox, self._sandbox._client._drive(start_flow(self._sandbox, body)))

    def connect(self, pid: int) -> PtyHandle:
        """A handle of a running (or recently ended) terminal process; :class:`~kruntimes.NotFoundError`
        for a pid the session does not know."""
        self._sandbox._client._drive(get_flow(self._sandbox, pid))
        return PtyHandle(self._sandbox, pid)

    def send_input(self, pid: int, data: Input) -> None:
        """:meth:`PtyHandle.send_input`, by pid."""
        self._sandbox._client._drive(input_flow(self._sandbox, pid, data))

    def resize(self, pid: int, rows: int, cols: int) -> None:
        """:meth:`PtyHandle.resize`, by pid; :class:`~kruntimes.ConflictError` for a process without a terminal."""
        self._sandbox._client._drive(resize_flow(self._sandbox, pid, rows, cols))

    def kill(self, pid: int) -> bool:
        """:meth:`PtyHandle.kill`, by pid."""
        return self._sandbox._client._drive(kill_flow(self._sandbox, pid))


class AsyncPty(_PtyBase):
    """``sandbox.pty`` of an :class:`~kruntimes.AsyncSandbox`; the methods of :class:`Pty`."""

    _sandbox: "AsyncSandbox"

    async def create(self, rows: int = 24, cols: int = 80, *, cmd: Optional[CommandLine] = None,
                     cwd: Optional[str] = None, env: Optional[Mapping[str, str]] = None) -> AsyncPtyHandle:
        body = pty_body(rows, cols, cmd, cwd, env)
        return AsyncPtyHandle(self._sandbox, await self._sandbox._client._drive(start_flow(self._sandbox, body)))

    async def connect(self, pid: int) -> AsyncPtyHandle:
        await self._sandbox._client._drive(get_flow(self._sandbox, pid))
        return AsyncPtyHandle(self._sandbox, pid)

    async def send_input(self, pid: int, data: Input) -> None:
        await self._sandbox._client._drive(input_flow(self._sandbox, pid, data))

    async def resize(self, pid: int, rows: int, cols: int) -> None:
        await self._sandbox._client._drive(resize_flow(self._sandbox, pid, rows, cols))

    async def kill(self, pid: int) -> bool:
        return await self._sandbox._client._drive(kill_flow(self._sandbox, pid))
