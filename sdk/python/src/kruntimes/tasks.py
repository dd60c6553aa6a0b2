"""Tasks: task-mode Runs, run once on a warm Pod, their result read from the Run's status.

``client.tasks.run(...)`` creates a task Run (``spec.mode.task``: through the
Kubernetes API, or as a manifest in ``krt up``'s runs directory, the file
``krt run`` writes), waits until it ends and returns its :class:`TaskResult`:
the exit code and the last 4 KiB of each stream. A non-zero exit is a result,
not an error; a Run that ends without an exit of its own (its process could
not start, its owner was lost, its ``timeout`` passed, it was cancelled) raises
the :class:`~kruntimes.RunEndedError` of how it ended.

What runs (the Run's input semantics, ``docs/tasks.md``): ``inline`` source is
a standalone script; ``entrypoint`` names a script file of the source, run with
``args``; without either, a shell Runtime (``bash``) runs ``args`` as shell
commands, the first failure ending them.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Mapping, Optional, Sequence, Tuple, Union

from ._runs import ArtifactRef, RunInfo, task_manifest, wait_for
from ._wire import Flow
from .errors import KruntimesError, ended_error

if TYPE_CHECKING:
    from .client import AsyncClient, Client

#: How long ``run`` waits for a task without a ``timeout`` (seconds).
DEFAULT_TASK_WAIT = 600.0
#: How much longer than a task's own ``timeout`` ``run`` waits: the control plane ends it then.
TIMEOUT_GRACE = 60.0

# The bounds the control plane checks (api/src/run/task.rs), checked before anything is created.
_MAX_ARGS = 256
_MAX_ARG_BYTES = 4096
_MAX_ENTRYPOINT_BYTES = 255
_MAX_RETRIES = 100
_MAX_RETRY_EXIT_CODES = 32
# metadata.name: a DNS-1123 label.
_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


@dataclass(frozen=True)
class TaskResult:
    """A task Run as it stands: how its process ended, once it has (``ended``)."""

    name: str
    namespace: str
    uid: str
    #: ``Succeeded`` (exit 0), ``Failed`` (reason ``NonZeroExit``: ``exit_code`` says which), or a
    #: phase before the end (:meth:`Tasks.get` of a Run still running).
    phase: str
    #: ``Completed``, ``NonZeroExit``, … (``status.reason``).
    reason: str
    #: ``status.message`` (e.g. ``exited with code 3``).
    message: str
    #: The attempt that ran (``status.task.attempt``; the Run's attempt before its process ended).
    attempt: int
    #: The process's exit code (``128 + N`` when signal N ended it); None until it exited.
    exit_code: Optional[int]
    #: The last 4 KiB of its stdout (UTF-8).
    stdout: str
    #: The last 4 KiB of its stderr.
    stderr: str
    #: More was written than ``stdout`` holds (the Run's log has it all: ``krt logs``).
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    started_at: Optional[datetime] = None
    finished_at: Optional[datetime] = None
    #: What the task left in ``$KRUNTIME_ARTIFACTS_DIR`` (``status.artifacts``: at most 100 listed;
    #: ``client.artifacts.list`` has them all), once its Run has ended; () for a Runtime without
    #: an artifact store. Read them with ``client.artifacts.read(result, ref)``.
    artifacts: Tuple[ArtifactRef, ...] = ()

    @property
    def ok(self) -> bool:
        """Whether the task exited 0 (phase ``Succeeded``)."""
        return self.phase == "Succeeded"

    @property
    def ended(self) -> bool:
        """Whether the Run has ended (a terminal phase)."""
        return self.phase in ("Succeeded", "Failed", "Timeout", "Cancelled")

    @classmethod
    def from_run(cls, run: RunInfo) -> "TaskResult":
        t = run.task
        return cls(
            name=run.name, namespace=run.namespace, uid=run.uid, phase=run.phase, reason=run.reason,
            message=run.message, attempt=t.attempt if t else run.attempt,
            exit_code=t.exit_code if t else None, stdout=t.stdout_tail if t else "",
            stderr=t.stderr_tail if t else "", stdout_truncated=bool(t and t.stdout_truncated),
            stderr_truncated=bool(t and t.stderr_truncated), started_at=t.started_at if t else None,
            finished_at=t.finished_at if t else None, artifacts=run.artifacts,
        )


@dataclass(frozen=True)
class _Task:
    runtime: str
    inline: Optional[str]
    entrypoint: Optional[str]
    args: Tuple[str, ...]
    name: Optional[str]
    namespace: Optional[str]
    env: Mapping[str, str]
    timeout: Optional[int]
    max_retries: Optional[int]
    retry_on_exit_codes: Tuple[int, ...]
    wait_timeout: Optional[float]
    remove: bool

    def check(self) -> None:
        """Refuses what the control plane would refuse, or would silently ignore, in its words."""
        if not self.runtime:
            raise ValueError("runtime names the Runtime that runs the task (python, bash, or a custom one)")
        if self.name is not None and not _NAME.fullmatch(self.name):
            raise ValueError(f"name {self.name!r} is not a Run name (a DNS-1123 label: lowercase letters, "
                             "digits and '-', at most 63)")
        if self.inline is not None and (self.entrypoint is not None or self.args):
            ignored = " and ".join(n for n, v in (("entrypoint", self.entrypoint is not None),
                                                   ("args", bool(self.args))) if v)
            raise ValueError(f"inline source is a standalone script and runs as it is: {ignored} would have no "
                             "effect")
        if self.inline is None and self.entrypoint is None and not self.args:
            raise ValueError("a task needs something to run: inline, entrypoint, or args (shell commands)")
        if self.entrypoint is not None:
            e = self.entrypoint
            if not 0 < len(e.encode()) <= _MAX_ENTRYPOINT_BYTES:
                raise ValueError(f"entrypoint must be 1 to {_MAX_ENTRYPOINT_BYTES} bytes")
            if e.startswith("/") or ".." in e.split("/") or "\0" in e:
                raise ValueError(f"entrypoint {e!r} must be a file of the source: relative, without '..' or NUL")
        if len(self.args) > _MAX_ARGS:
            raise ValueError(f"args has {len(self.args)} items; at most {_MAX_ARGS}")
        for i, a in enumerate(self.args):
            if not isinstance(a, str) or len(a.encode()) > _MAX_ARG_BYTES or "\0" in a:
                raise ValueError(f"args[{i}] must be a str of at most {_MAX_ARG_BYTES} bytes without NUL")
        if any(not k for k in self.env):
            raise ValueError("env names must not be empty")
        if self.timeout is not None and self.timeout < 1:
            raise ValueError("timeout is in seconds, at least 1")
        if self.max_retries is not None and not 0 <= self.max_retries <= _MAX_RETRIES:
            raise ValueError(f"max_retries must be 0 to {_MAX_RETRIES}")
        if len(self.retry_on_exit_codes) > _MAX_RETRY_EXIT_CODES:
            raise ValueError(f"retry_on_exit_codes has {len(self.retry_on_exit_codes)} codes; "
                             f"at most {_MAX_RETRY_EXIT_CODES}")
        for c in self.retry_on_exit_codes:
            if not 1 <= c <= 255:
                raise ValueError(f"retry_on_exit_codes holds {c}; exit codes that fail are 1 to 255")

    @property
    def wait(self) -> float:
        if self.wait_timeout is not None:
            return self.wait_timeout
        return self.timeout + TIMEOUT_GRACE if self.timeout is not None else DEFAULT_TASK_WAIT


def _task(runtime: str, inline: Optional[str], entrypoint: Optional[str], args: Optional[Sequence[str]],
          name: Optional[str], namespace: Optional[str], env: Optional[Mapping[str, str]], timeout: Optional[int],
          max_retries: Optional[int], retry_on_exit_codes: Optional[Sequence[int]], wait_timeout: Optional[float],
          remove: bool) -> _Task:
    if isinstance(args, str):
        raise ValueError("args is a list of strings (one argument, or one shell command, each)")
    t = _Task(runtime, inline, entrypoint, tuple(args or ()), name, namespace, dict(env or {}), timeout,
              max_retries, tuple(retry_on_exit_codes or ()), wait_timeout, remove)
    t.check()
    return t


class _TasksBase:
    _client: "Union[Client, AsyncClient]"

    def __init__(self, client: "Union[Client, AsyncClient]") -> None:
        self._client = client

    def _run(self, t: _Task) -> Flow[TaskResult]:
        store = self._client._store()
        ns, name = t.namespace or self._client.namespace, t.name or f"task-{secrets.token_hex(4)}"
        yield from store.create(task_manifest(
            name, ns, t.runtime, t.env, inline=t.inline, entrypoint=t.entrypoint, args=t.args, timeout=t.timeout,
            max_retries=t.max_retries, retry_on_exit_codes=t.retry_on_exit_codes))
        try:
            run = yield from wait_for(store, ns, name, lambda r: r.ended, "its end", t.wait)
            result = TaskResult.from_run(run)
            # The process ran and exited: its code is the answer, whatever it is.
            if run.phase != "Succeeded" and run.reason != "NonZeroExit":
                raise ended_error(run.phase, run.reason, f"task run {ns}/{name} ended {run.phase} "
                                  f"({run.reason}: {run.message})", result=result)
        except KruntimesError:
            if t.remove:
                # Deleting a Run still running (the wait gave up) kills its process tree.
                try:
                    yield from store.delete(ns, name)
                except KruntimesError:
                    pass
            raise
        if t.remove:
            yield from store.delete(ns, name)
        return result

    def _get(self, name: str, namespace: Optional[str]) -> Flow[TaskResult]:
        run = yield from self._client._lookup(name, namespace, "task")
        return TaskResult.from_run(run)

    def _delete(self, name: str, namespace: Optional[str]) -> Flow[None]:
        return self._client._store().delete(namespace or self._client.namespace, name)


class Tasks(_TasksBase):
    """Task Runs of a :class:`~kruntimes.Client` (``client.tasks``)."""

    _client: "Client"

    def run(self, runtime: str, *, inline: Optional[str] = None, entrypoint: Optional[str] = None,
            args: Optional[Sequence[str]] = None, name: Optional[str] = None, namespace: Optional[str] = None,
            env: Optional[Mapping[str, str]] = None, timeout: Optional[int] = None,
            max_retries: Optional[int] = None, retry_on_exit_codes: Optional[Sequence[int]] = None,
            wait_timeout: Optional[float] = None, remove: bool = False) -> TaskResult:
        """Runs a task once on Runtime ``runtime`` and returns its result once its Run has ended.

        What runs: ``inline`` (a standalone script), or ``entrypoint`` (a script file of the
        source) with ``args``, or — neither given — ``args`` as shell commands for a shell Runtime.
        ``env`` is its environment; ``timeout`` (seconds) its ``spec.timeout``; ``max_retries`` and
        ``retry_on_exit_codes`` its ``spec.retryPolicy`` (moves to another Pod after a lost owner
        or a failed start, default 3; the non-zero exit codes run again). ``name`` defaults to
        ``task-<random>``.

        Returns the :class:`TaskResult` when the process exited, 0 (``Succeeded``) or not
        (``Failed``, reason ``NonZeroExit``). Raises :class:`~kruntimes.TaskStartFailedError`,
        :class:`~kruntimes.RunLostError`, :class:`~kruntimes.RunTimeoutError`,
        :class:`~kruntimes.RunCancelledError`, :class:`~kruntimes.InvalidSpecError` (or
        :class:`~kruntimes.RunFailedError` for another reason) when the Run ended without an exit
        of its own, with the result as ``e.result``; the Kubernetes API's
        :class:`~kruntimes.InvalidRequestError` (422) for a spec its schema refuses;
        :class:`~kruntimes.WaitTimeoutError` when it has not ended after ``wait_timeout`` seconds
        (default: ``timeout`` plus 60, else 600), the Run left running; ``ValueError`` for
        arguments the control plane would refuse, before anything is created. ``remove=True``
        deletes the Run once ``run`` is done with it, whatever the outcome (a Run still
        running is killed).
        """
        t = _task(runtime, inline, entrypoint, args, name, namespace, env, timeout, max_retries,
                  retry_on_exit_codes, wait_timeout, remove)
        return self._client._drive(self._run(t))

    def get(self, name: str, *, namespace: Optional[str] = None) -> TaskResult:
        """The task Run ``name`` as it stands (``ended`` once it has; nothing raised for how it
        ended); :class:`~kruntimes.NotFoundError` when there is no such task Run."""
        return self._client._drive(self._get(name, namespace))

    def delete(self, name: str, *, namespace: Optional[str] = None) -> None:
        """Deletes the task Run (killing its process if it still runs); a Run already gone is no error."""
        self._client._drive(self._delete(name, namespace))


class AsyncTasks(_TasksBase):
    """:class:`Tasks` of an :class:`~kruntimes.AsyncClient`."""

    _client: "AsyncClient"

    async def run(self, runtime: str, *, inline: Optional[str] = None, entrypoint: Optional[str] = None,
                  args: Optional[Sequence[str]] = None, name: Optional[str] = None,
                  namespace: Optional[str] = None, env: Optional[Mapping[str, str]] = None,
                  timeout: Optional[int] = None, max_retries: Optional[int] = None,
                  retry_on_exit_codes: Optional[Sequence[int]] = None, wait_timeout: Optional[float] = None,
                  remove: bool = False) -> TaskResult:
        """:meth:`Tasks.run`."""
        t = _task(runtime, inline, entrypoint, args, name, namespace, env, timeout, max_retries,
                  retry_on_exit_codes, wait_timeout, remove)
        return await self._client._drive(self._run(t))

    async def get(self, name: str, *, namespace: Optional[str] = None) -> TaskResult:
        """:meth:`Tasks.get`."""
        return await self._client._drive(self._get(name, namespace))

    async def delete(self, name: str, *, namespace: Optional[str] = None) -> None:
        """:meth:`Tasks.delete`."""
        await self._client._drive(self._delete(name, namespace))
