"""Commands in a sandbox: run one and get its result, stream its output, or
start it in the background and get a handle (:mod:`kruntimes.processes`).

A command is a shell script (a ``str``, run with ``bash -c``) or an argv list
(run without a shell). Every command goes through the session's FIFO queue
(a background one only to start). A non-zero exit is a result (``exit_code``,
state ``Failed``), not an error; :meth:`CommandResult.check` turns it into one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import (TYPE_CHECKING, Any, AsyncIterator, Dict, Iterator, List, Literal, Mapping, Optional, Sequence,
                    Union, overload)

from . import errors
from ._wire import GATEWAY, Call, Flow

if TYPE_CHECKING:
    from .processes import AsyncCommandHandle, CommandHandle, Input, ProcessInfo, SignalLike
    from .sandbox import AsyncSandbox, Sandbox

#: A shell script, or a program and its arguments.
CommandLine = Union[str, Sequence[str]]


@dataclass(frozen=True)
class CommandResult:
    """How an operation ended (``operations:execute``, the ``completed`` event)."""

    operation_id: str
    #: ``Succeeded``, ``Failed`` (non-zero exit, or a file operation that failed),
    #: ``Cancelled`` (the session closed) or ``TimedOut``.
    state: str
    exit_code: Optional[int]
    stdout: str
    stderr: str
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    duration_ms: int = 0
    #: Why a file operation failed.
    error: Optional[str] = None

    @property
    def ok(self) -> bool:
        return self.state == "Succeeded"

    def check(self) -> "CommandResult":
        """Returns self if the command succeeded, else raises :class:`~kruntimes.CommandExitError`."""
        if not self.ok:
            detail = f"exit code {self.exit_code}" if self.exit_code is not None else (self.error or self.state)
            raise errors.CommandExitError(f"operation {self.operation_id} {self.state}: {detail}", result=self)
        return self

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "CommandResult":
        return cls(
            operation_id=str(d.get("operationId", "")),
            state=str(d.get("state", "")),
            exit_code=d.get("exitCode"),
            stdout=d.get("stdout") or "",
            stderr=d.get("stderr") or "",
            stdout_truncated=bool(d.get("stdoutTruncated")),
            stderr_truncated=bool(d.get("stderrTruncated")),
            duration_ms=int(d.get("durationMs") or 0),
            error=d.get("error"),
        )


@dataclass(frozen=True)
class CommandEvent:
    """One event of :meth:`Commands.stream`, in order (``sequence`` strictly increases)."""

    #: ``accepted``, ``output`` or ``completed``.
    type: str
    sequence: int
    operation_id: Optional[str] = None
    #: ``stdout`` or ``stderr`` (``output`` events).
    stream: Optional[str] = None
    #: The output text (``output`` events).
    data: str = ""
    #: The result (the ``completed`` event).
    result: Optional[CommandResult] = None


def command_body(cmd: CommandLine, *, timeout: Optional[int], cwd: Optional[str],
                 env: Optional[Mapping[str, str]], stdin: Optional[str]) -> Dict[str, Any]:
    """The ``operations:*`` body of a command."""
    if isinstance(cmd, str):
        body: Dict[str, Any] = {"command": {"shell": cmd}}
    else:
        argv = [str(a) for a in cmd]
        if not argv:
            raise ValueError("empty argv")
        body = {"command": {"argv": argv}}
    if timeout is not None:
        body["timeoutSeconds"] = int(timeout)
    if cwd is not None:
        body["cwd"] = cwd
    if env:
        body["env"] = {str(k): str(v) for k, v in env.items()}
    if stdin is not None:
        body["stdin"] = stdin
    return body


def parse_event(line: str) -> CommandEvent:
    """A stream line; a ``failed`` event raises its typed error."""
    d = json.loads(line)
    kind = str(d.get("type", ""))
    if kind == "failed":
        raise errors.from_event(d.get("error"))
    return CommandEvent(
        type=kind,
        sequence=int(d.get("sequence") or 0),
        operation_id=d.get("operationId"),
        stream=d.get("stream"),
        data=d.get("data") or "",
        result=CommandResult.from_json(d) if kind == "completed" else None,
    )


def _foreground_stdin(stdin: "Union[str, bool, None]") -> Optional[str]:
    if isinstance(stdin, bool):
        if stdin:
            raise TypeError("stdin=True keeps a background process's stdin open (background=True); "
                            "a command's input is a str")
        return None
    return stdin


def _background_body(cmd: CommandLine, timeout: Optional[int], cwd: Optional[str], env: Optional[Mapping[str, str]],
                     stdin: "Union[str, bool, None]") -> Dict[str, Any]:
    from .processes import start_body

    if timeout is not None:
        raise ValueError("a background process has no timeout: signal or kill it")
    if stdin is not None and not isinstance(stdin, bool):
        raise TypeError("in the background, stdin=True keeps stdin open for send_stdin(); send the input there")
    return start_body(cmd, cwd=cwd, env=env, stdin=bool(stdin))


class _CommandsBase:
    def __init__(self, sandbox: "Union[Sandbox, AsyncSandbox]") -> None:
        self._sandbox = sandbox

    def _execute(self, body: Dict[str, Any]) -> Flow[CommandResult]:
        reply = yield self._sandbox._operation(body, stream=False)
        assert reply is not None
        return CommandResult.from_json(reply.json())

    def _cancel(self, operation_id: str) -> Flow[None]:
        sb = self._sandbox
        yield Call(GATEWAY, "POST", f"{sb.endpoint}/operations:cancel", json={"operationId": operation_id},
                   ca_pem=sb._ca_pem)


class Commands(_CommandsBase):
    """``sandbox.commands`` of a :class:`~kruntimes.Sandbox`."""

    _sandbox: "Sandbox"

    @overload
    def run(self, cmd: CommandLine, background: Literal[False] = False, *, timeout: Optional[int] = None,
            cwd: Optional[str] = None, env: Optional[Mapping[str, str]] = None,
            stdin: Optional[str] = None) -> CommandResult: ...

    @overload
    def run(self, cmd: CommandLine, background: Literal[True], *, cwd: Optional[str] = None,
            env: Optional[Mapping[str, str]] = None, stdin: bool = False) -> "CommandHandle": ...

    @overload
    def run(self, cmd: CommandLine, background: bool, *, timeout: Optional[int] = None, cwd: Optional[str] = None,
            env: Optional[Mapping[str, str]] = None,
            stdin: Union[str, bool, None] = None) -> "Union[CommandResult, CommandHandle]": ...

    def run(self, cmd: CommandLine, background: bool = False, *, timeout: Optional[int] = None,
            cwd: Optional[str] = None, env: Optional[Mapping[str, str]] = None,
            stdin: Union[str, bool, None] = None) -> "Union[CommandResult, CommandHandle]":
        """Runs ``cmd`` and waits for its result.

        ``timeout`` (seconds) defaults to the Run's ``operationTimeout``; ``cwd`` is
        workspace-relative; ``env`` adds to the session's environment; ``stdin`` is its input.

        With ``background=True`` it returns once the process started: a
        :class:`~kruntimes.CommandHandle` (``pid``, ``wait()``, ``kill()``, its output events).
        The process runs until it exits or is killed, whoever is connected; ``stdin=True`` keeps
        its stdin open for ``send_stdin`` (otherwise it reads end-of-file). No ``timeout``.
        """
        if background:
            from .processes import CommandHandle, start_flow

            body = _background_body(cmd, timeout, cwd, env, stdin)
            return CommandHandle(self._sandbox, self._sandbox._client._drive(start_flow(self._sandbox, body)))
        body = command_body(cmd, timeout=timeout, cwd=cwd, env=env, stdin=_foreground_stdin(stdin))
        return self._sandbox._client._drive(self._execute(body))

    def stream(self, cmd: CommandLine, *, timeout: Optional[int] = None, cwd: Optional[str] = None,
               env: Optional[Mapping[str, str]] = None, stdin: Optional[str] = None) -> Iterator[CommandEvent]:
        """Runs ``cmd``, yielding ``accepted``, then ``output`` events as they happen, then
        ``completed``. Leaving the loop early closes the connection; the command goes on."""
        body = command_body(cmd, timeout=timeout, cwd=cwd, env=env, stdin=stdin)
        for line in self._sandbox._client._transport.lines(self._sandbox._operation(body, stream=True)):
            yield parse_event(line)

    def cancel(self, operation_id: str) -> None:
        """Cancels a queued or running command by the ``operation_id`` of its ``accepted`` event:
        its whole process tree ends and its result says ``Cancelled``. A command that is not queued
        or running (finished, or unknown) raises :class:`~kruntimes.NotFoundError`."""
        self._sandbox._client._drive(self._cancel(operation_id))

    def connect(self, pid: int) -> "CommandHandle":
        """A handle of a background process, running or among the 64 most recently ended: its
        output replays what the session still holds, then follows. :class:`~kruntimes.NotFoundError`
        for a pid the session does not know."""
        from .processes import CommandHandle, get_flow

        self._sandbox._client._drive(get_flow(self._sandbox, pid))
        return CommandHandle(self._sandbox, pid)

    def list(self) -> "List[ProcessInfo]":
        """The session's background processes (terminals too): running and recently ended, by pid."""
        from .processes import list_flow

        return self._sandbox._client._drive(list_flow(self._sandbox))

    def get(self, pid: int) -> "ProcessInfo":
        """One background process; :class:`~kruntimes.NotFoundError` for a pid the session does not know."""
        from .processes import get_flow

        return self._sandbox._client._drive(get_flow(self._sandbox, pid))

    def kill(self, pid: int) -> bool:
        """:meth:`CommandHandle.kill <kruntimes.CommandHandle.kill>`, by pid: SIGKILL; False when the
        process has already ended or the session does not know it."""
        from .processes import kill_flow

        return self._sandbox._client._drive(kill_flow(self._sandbox, pid))

    def signal(self, pid: int, sig: "SignalLike") -> None:
        """:meth:`CommandHandle.signal <kruntimes.CommandHandle.signal>`, by pid."""
        from .processes import signal_flow

        self._sandbox._client._drive(signal_flow(self._sandbox, pid, sig))

    def send_stdin(self, pid: int, data: "Input") -> None:
        """:meth:`CommandHandle.send_stdin <kruntimes.CommandHandle.send_stdin>`, by pid."""
        from .processes import input_flow

        self._sandbox._client._drive(input_flow(self._sandbox, pid, data))

    def close_stdin(self, pid: int) -> None:
        """:meth:`CommandHandle.close_stdin <kruntimes.CommandHandle.close_stdin>`, by pid."""
        from .processes import close_stdin_flow

        self._sandbox._client._drive(close_stdin_flow(self._sandbox, pid))


class AsyncCommands(_CommandsBase):
    """``sandbox.commands`` of an :class:`~kruntimes.AsyncSandbox`."""

    _sandbox: "AsyncSandbox"

    @overload
    async def run(self, cmd: CommandLine, background: Literal[False] = False, *, timeout: Optional[int] = None,
                  cwd: Optional[str] = None, env: Optional[Mapping[str, str]] = None,
                  stdin: Optional[str] = None) -> CommandResult: ...

    @overload
    async def run(self, cmd: CommandLine, background: Literal[True], *, cwd: Optional[str] = None,
                  env: Optional[Mapping[str, str]] = None, stdin: bool = False) -> "AsyncCommandHandle": ...

    @overload
    async def run(self, cmd: CommandLine, background: bool, *, timeout: Optional[int] = None,
                  cwd: Optional[str] = None, env: Optional[Mapping[str, str]] = None,
                  stdin: Union[str, bool, None] = None) -> "Union[CommandResult, AsyncCommandHandle]": ...

    async def run(self, cmd: CommandLine, background: bool = False, *, timeout: Optional[int] = None,
                  cwd: Optional[str] = None, env: Optional[Mapping[str, str]] = None,
                  stdin: Union[str, bool, None] = None) -> "Union[CommandResult, AsyncCommandHandle]":
        """:meth:`Commands.run`; in the background, an :class:`~kruntimes.AsyncCommandHandle`."""
        if background:
            from .processes import AsyncCommandHandle, start_flow

            body = _background_body(cmd, timeout, cwd, env, stdin)
            pid = await self._sandbox._client._drive(start_flow(self._sandbox, body))
            return AsyncCommandHandle(self._sandbox, pid)
        body = command_body(cmd, timeout=timeout, cwd=cwd, env=env, stdin=_foreground_stdin(stdin))
        return await self._sandbox._client._drive(self._execute(body))

    async def stream(self, cmd: CommandLine, *, timeout: Optional[int] = None, cwd: Optional[str] = None,
                     env: Optional[Mapping[str, str]] = None,
                     stdin: Optional[str] = None) -> AsyncIterator[CommandEvent]:
        """:meth:`Commands.stream`."""
        body = command_body(cmd, timeout=timeout, cwd=cwd, env=env, stdin=stdin)
        async for line in self._sandbox._client._transport.lines(self._sandbox._operation(body, stream=True)):
            yield parse_event(line)

    async def cancel(self, operation_id: str) -> None:
        """:meth:`Commands.cancel`."""
        await self._sandbox._client._drive(self._cancel(operation_id))

    async def connect(self, pid: int) -> "AsyncCommandHandle":
        """:meth:`Commands.connect`."""
        from .processes import AsyncCommandHandle, get_flow

        await self._sandbox._client._drive(get_flow(self._sandbox, pid))
        return AsyncCommandHandle(self._sandbox, pid)

    async def list(self) -> "List[ProcessInfo]":
        """:meth:`Commands.list`."""
        from .processes import list_flow

        return await self._sandbox._client._drive(list_flow(self._sandbox))

    async def get(self, pid: int) -> "ProcessInfo":
        """:meth:`Commands.get`."""
        from .processes import get_flow

        return await self._sandbox._client._drive(get_flow(self._sandbox, pid))

    async def kill(self, pid: int) -> bool:
        """:meth:`Commands.kill`."""
        from .processes import kill_flow

        return await self._sandbox._client._drive(kill_flow(self._sandbox, pid))

    async def signal(self, pid: int, sig: "SignalLike") -> None:
        """:meth:`Commands.signal`."""
        from .processes import signal_flow

        await self._sandbox._client._drive(signal_flow(self._sandbox, pid, sig))

    async def send_stdin(self, pid: int, data: "Input") -> None:
        """:meth:`Commands.send_stdin`."""
        from .processes import input_flow

        await self._sandbox._client._drive(input_flow(self._sandbox, pid, data))

    async def close_stdin(self, pid: int) -> None:
        """:meth:`Commands.close_stdin`."""
        from .processes import close_stdin_flow

        await self._sandbox._client._drive(close_stdin_flow(self._sandbox, pid))
