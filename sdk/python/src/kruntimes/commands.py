"""Commands in a sandbox: run one and get its result, or stream its output.

A command is a shell script (a ``str``, run with ``bash -c``) or an argv list
(run without a shell). Every command goes through the session's FIFO queue.
A non-zero exit is a result (``exit_code``, state ``Failed``), not an error;
:meth:`CommandResult.check` turns it into one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, AsyncIterator, Dict, Iterator, Mapping, Optional, Sequence, Union

from . import errors
from ._wire import GATEWAY, Call, Flow

if TYPE_CHECKING:
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

    def run(self, cmd: CommandLine, *, timeout: Optional[int] = None, cwd: Optional[str] = None,
            env: Optional[Mapping[str, str]] = None, stdin: Optional[str] = None) -> CommandResult:
        """Runs ``cmd`` and waits for its result.

        ``timeout`` (seconds) defaults to the Run's ``operationTimeout``; ``cwd`` is
        workspace-relative; ``env`` adds to the session's environment.
        """
        body = command_body(cmd, timeout=timeout, cwd=cwd, env=env, stdin=stdin)
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


class AsyncCommands(_CommandsBase):
    """``sandbox.commands`` of an :class:`~kruntimes.AsyncSandbox`."""

    _sandbox: "AsyncSandbox"

    async def run(self, cmd: CommandLine, *, timeout: Optional[int] = None, cwd: Optional[str] = None,
                  env: Optional[Mapping[str, str]] = None, stdin: Optional[str] = None) -> CommandResult:
        """:meth:`Commands.run`."""
        body = command_body(cmd, timeout=timeout, cwd=cwd, env=env, stdin=stdin)
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
