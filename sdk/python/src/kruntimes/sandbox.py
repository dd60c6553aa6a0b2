"""Sandboxes: session-mode Runs, created or connected to, closed when done.

``Sandbox.create`` creates a session Run (through the Kubernetes API, or as a
manifest in ``krt up``'s runs directory), waits until it is Ready and until
the gateway routes it. ``close()`` sets ``spec.termination: Drain`` (accepted
work finishes, the Run ends ``Succeeded``); ``kill()`` sets ``Immediate``
(queued and running work is cancelled, the Run ends ``Cancelled``). Leaving a
``with`` block closes the sandbox, or kills it when the block raised.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Coroutine, Dict, Generator, Generic, Mapping, Optional, TypeVar, Union
from urllib.parse import urlsplit

from ._runs import RunInfo, session_manifest, wait_for
from ._wire import GATEWAY, Call, Flow, Sleep
from .commands import AsyncCommands, Commands
from .errors import ConfigError, KruntimesError, NotReadyError, OwnerUnavailableError, UnsupportedError
from .files import AsyncFiles, Files
from .processes import AsyncPty, Pty

if TYPE_CHECKING:
    from .client import AsyncClient, Client

S = TypeVar("S", bound="AsyncSandbox")


@dataclass(frozen=True)
class SessionStatus:
    """The session's own view (``GET …/sessions/{uid}``; bypasses the queue)."""

    uid: str
    attempt: int
    pending_operations: int
    idle_ms: int
    closing: bool


@dataclass(frozen=True)
class SandboxMetrics:
    """What the session uses now (``GET …/metrics``; bypasses the queue).

    ``cpu_seconds`` is the CPU its commands' and background processes' trees used (two readings
    apart give a rate); ``memory_bytes`` their resident memory now and ``memory_limit_bytes`` the
    Pod's (cgroup's) limit, None without one; ``cpu_count`` the CPUs the Runtime Server may use;
    ``processes`` those running now. ``disk_bytes`` is the size of the workspace's regular files, a
    floor when ``disk_partial`` (the walk stopped past 100,000 entries); ``disk_total_bytes`` and
    ``disk_free_bytes`` are the workspace's file system.
    """

    cpu_seconds: float
    cpu_count: int
    memory_bytes: int
    memory_limit_bytes: Optional[int]
    processes: int
    disk_bytes: int
    disk_partial: bool
    disk_total_bytes: int
    disk_free_bytes: int

    @classmethod
    def _from_wire(cls, d: Mapping[str, Any]) -> "SandboxMetrics":
        limit = d.get("memoryLimitBytes")
        return cls(cpu_seconds=float(d.get("cpuSeconds") or 0.0), cpu_count=int(d.get("cpuCount") or 0),
                   memory_bytes=int(d.get("memoryBytes") or 0),
                   memory_limit_bytes=None if limit is None else int(limit),
                   processes=int(d.get("processes") or 0), disk_bytes=int(d.get("diskBytes") or 0),
                   disk_partial=bool(d.get("diskPartial")), disk_total_bytes=int(d.get("diskTotalBytes") or 0),
                   disk_free_bytes=int(d.get("diskFreeBytes") or 0))


@dataclass(frozen=True)
class _Create:
    runtime: str
    name: Optional[str]
    namespace: Optional[str]
    env: Optional[Mapping[str, str]]
    idle_timeout: Optional[int]
    queue_size: Optional[int]
    operation_timeout: Optional[int]
    timeout: Optional[int]
    ready_timeout: float


def _from_endpoint(endpoint: str) -> RunInfo:
    """A Run known only by its session URL (``…/v1/namespaces/NS/runtimes/RT/sessions/UID``)."""
    parts = urlsplit(endpoint).path.strip("/").split("/")
    if len(parts) != 7 or parts[0] != "v1" or parts[1] != "namespaces" or parts[5] != "sessions":
        raise ConfigError(f"{endpoint} is not a session endpoint (…/v1/namespaces/NS/runtimes/RT/sessions/UID)")
    return RunInfo(name="", namespace=parts[2], uid=parts[6], runtime=parts[4], mode="session",
                   phase="Ready", endpoint=endpoint.rstrip("/"))


def _routed(run: RunInfo, timeout: float) -> Flow[None]:
    """Waits until the gateway routes the session: its status route is read-only and
    bypasses the queue, so probing it cannot run anything."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            yield Call(GATEWAY, "GET", str(run.endpoint), ca_pem=run.ca_pem)
            return
        except (NotReadyError, OwnerUnavailableError):
            if time.monotonic() > deadline:
                raise
        yield Sleep(0.05)


class _SandboxBase:
    _client: "Union[Client, AsyncClient]"

    def __init__(self, client: "Union[Client, AsyncClient]", run: RunInfo) -> None:
        self._client = client
        self._run = run

    @property
    def name(self) -> str:
        """The session Run's name ("" when connected by endpoint)."""
        return self._run.name

    @property
    def namespace(self) -> str:
        return self._run.namespace

    @property
    def uid(self) -> str:
        return self._run.uid

    @property
    def endpoint(self) -> str:
        """The session's base URL at the gateway."""
        return str(self._run.endpoint)

    @property
    def run_info(self) -> RunInfo:
        """The Run as last seen (after close/kill: its terminal status)."""
        return self._run

    @property
    def _ca_pem(self) -> Optional[str]:
        return self._run.ca_pem

    def _operation(self, body: Dict[str, Any], *, stream: bool) -> Call:
        route = "operations:stream" if stream else "operations:execute"
        return Call(GATEWAY, "POST", f"{self.endpoint}/{route}", json=body, ca_pem=self._ca_pem, timeout=None)

    @staticmethod
    def _create(client: "Union[Client, AsyncClient]", o: _Create) -> Flow[RunInfo]:
        store = client._store()
        ns, name = o.namespace or client.namespace, o.name or f"sandbox-{secrets.token_hex(4)}"
        yield from store.create(session_manifest(
            name, ns, o.runtime, o.env or {}, idle_timeout=o.idle_timeout, queue_size=o.queue_size,
            operation_timeout=o.operation_timeout, timeout=o.timeout))
        try:
            return (yield from _SandboxBase._ready(client, ns, name, o.ready_timeout))
        except KruntimesError:
            # Never leave a half-made sandbox behind: deleted, it holds no Pod and waits for none.
            # A caller who may not delete Runs still ends it, so it holds no Pod.
            try:
                yield from store.delete(ns, name)
            except KruntimesError:
                try:
                    yield from store.terminate(ns, name, "Immediate")
                except KruntimesError:
                    pass
            raise

    @staticmethod
    def _ready(client: "Union[Client, AsyncClient]", namespace: str, name: str,
               timeout: float) -> Generator[Any, Any, RunInfo]:
        start = time.monotonic()
        run = yield from wait_for(client._store(), namespace, name, lambda r: r.phase == "Ready" and bool(r.endpoint),
                                  "Ready", timeout)
        yield from _routed(run, max(1.0, timeout - (time.monotonic() - start)))
        return run

    @staticmethod
    def _connect(client: "Union[Client, AsyncClient]", name: Optional[str], namespace: Optional[str],
                 endpoint: Optional[str], ready_timeout: float) -> Flow[RunInfo]:
        if (name is None) == (endpoint is None):
            raise ValueError("name a session Run, or pass its endpoint")
        if endpoint is not None:
            run = _from_endpoint(endpoint)
            yield from _routed(run, ready_timeout)
            return run
        assert name is not None
        run = yield from client._lookup(name, namespace, "session")
        return (yield from _SandboxBase._ready(client, run.namespace, name, ready_timeout))

    def _end(self, mode: str, timeout: float) -> Flow[RunInfo]:
        if not self.name:
            raise UnsupportedError("a sandbox connected by endpoint cannot be ended by this client")
        store = self._client._store()
        yield from store.terminate(self.namespace, self.name, mode)
        self._run = yield from wait_for(store, self.namespace, self.name, lambda r: r.ended, "its end", timeout)
        return self._run

    def _status(self) -> Flow[SessionStatus]:
        reply = yield Call(GATEWAY, "GET", self.endpoint, ca_pem=self._ca_pem)
        assert reply is not None
        d = reply.json()
        return SessionStatus(uid=str(d.get("uid", "")), attempt=int(d.get("attempt") or 0),
                             pending_operations=int(d.get("pendingOperations") or 0),
                             idle_ms=int(d.get("idleMs") or 0), closing=bool(d.get("closing")))

    def _metrics(self) -> Flow[SandboxMetrics]:
        reply = yield Call(GATEWAY, "GET", f"{self.endpoint}/metrics", ca_pem=self._ca_pem)
        assert reply is not None
        return SandboxMetrics._from_wire(reply.json())


class Sandbox(_SandboxBase):
    """A session Run of a :class:`~kruntimes.Client`: ``commands`` (foreground and background),
    ``files``, ``pty`` (terminals), and a context manager that closes it."""

    _client: "Client"

    def __init__(self, client: "Client", run: RunInfo) -> None:
        super().__init__(client, run)
        self.commands = Commands(self)
        self.files = Files(self)
        self.pty = Pty(self)

    @classmethod
    def create(cls, client: "Client", runtime: str = "bash", *, name: Optional[str] = None,
               namespace: Optional[str] = None, env: Optional[Mapping[str, str]] = None,
               idle_timeout: Optional[int] = None, queue_size: Optional[int] = None,
               operation_timeout: Optional[int] = None, timeout: Optional[int] = None,
               ready_timeout: float = 60.0) -> "Sandbox":
        """Creates a session Run on Runtime ``runtime`` and waits until it can be used.

        ``name`` defaults to ``sandbox-<random>``; ``env`` is the session's environment;
        ``idle_timeout``, ``queue_size`` and ``operation_timeout`` (seconds) are the
        Run's ``spec.mode.session`` fields and ``timeout`` its ``spec.timeout`` (total
        lifetime, seconds). Raises :class:`~kruntimes.RunEndedError` if the Run ends
        first and :class:`~kruntimes.WaitTimeoutError` after ``ready_timeout`` seconds (its
        message says why the Run still waits, e.g. ``NoIdlePod: 0/2 bash Pods can take this
        session: …``); either way the Run it created is deleted.
        """
        o = _Create(runtime, name, namespace, env, idle_timeout, queue_size, operation_timeout, timeout, ready_timeout)
        return cls(client, client._drive(cls._create(client, o)))

    @classmethod
    def connect(cls, client: "Client", name: Optional[str] = None, *, namespace: Optional[str] = None,
                endpoint: Optional[str] = None, ready_timeout: float = 60.0) -> "Sandbox":
        """Attaches to the existing session Run ``name`` (or the one at ``endpoint``)."""
        return cls(client, client._drive(cls._connect(client, name, namespace, endpoint, ready_timeout)))

    def status(self) -> SessionStatus:
        return self._client._drive(self._status())

    def get_metrics(self) -> SandboxMetrics:
        """What the session uses now: CPU, memory, processes, workspace and file system
        (``GET …/metrics``, bypasses the queue). Errors are typed as for any call."""
        return self._client._drive(self._metrics())

    def close(self, timeout: float = 120.0) -> RunInfo:
        """Ends the session once its accepted operations finish; returns the ended Run (``Succeeded``)."""
        return self._client._drive(self._end("Drain", timeout))

    def kill(self, timeout: float = 60.0) -> RunInfo:
        """Ends the session now, cancelling queued and running work (``Cancelled``)."""
        return self._client._drive(self._end("Immediate", timeout))

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.close()
        else:
            self.kill()


class AsyncSandbox(_SandboxBase):
    """:class:`Sandbox` of an :class:`~kruntimes.AsyncClient`.

    ``AsyncSandbox.create(…)`` and ``connect(…)`` are awaited (``sb = await …``) or
    entered directly (``async with AsyncSandbox.create(…) as sb``).
    """

    _client: "AsyncClient"

    def __init__(self, client: "AsyncClient", run: RunInfo) -> None:
        super().__init__(client, run)
        self.commands = AsyncCommands(self)
        self.files = AsyncFiles(self)
        self.pty = AsyncPty(self)

    @classmethod
    def create(cls, client: "AsyncClient", runtime: str = "bash", *, name: Optional[str] = None,
               namespace: Optional[str] = None, env: Optional[Mapping[str, str]] = None,
               idle_timeout: Optional[int] = None, queue_size: Optional[int] = None,
               operation_timeout: Optional[int] = None, timeout: Optional[int] = None,
               ready_timeout: float = 60.0) -> "_Opening[AsyncSandbox]":
        """:meth:`Sandbox.create`."""
        o = _Create(runtime, name, namespace, env, idle_timeout, queue_size, operation_timeout, timeout, ready_timeout)
        return _Opening(cls._opened(client, cls._create(client, o)))

    @classmethod
    def connect(cls, client: "AsyncClient", name: Optional[str] = None, *, namespace: Optional[str] = None,
                endpoint: Optional[str] = None, ready_timeout: float = 60.0) -> "_Opening[AsyncSandbox]":
        """:meth:`Sandbox.connect`."""
        return _Opening(cls._opened(client, cls._connect(client, name, namespace, endpoint, ready_timeout)))

    @classmethod
    async def _opened(cls, client: "AsyncClient", flow: Flow[RunInfo]) -> "AsyncSandbox":
        return cls(client, await client._drive(flow))

    async def status(self) -> SessionStatus:
        return await self._client._drive(self._status())

    async def get_metrics(self) -> SandboxMetrics:
        """:meth:`Sandbox.get_metrics`."""
        return await self._client._drive(self._metrics())

    async def close(self, timeout: float = 120.0) -> RunInfo:
        """:meth:`Sandbox.close`."""
        return await self._client._drive(self._end("Drain", timeout))

    async def kill(self, timeout: float = 60.0) -> RunInfo:
        """:meth:`Sandbox.kill`."""
        return await self._client._drive(self._end("Immediate", timeout))

    async def __aenter__(self) -> "AsyncSandbox":
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            await self.close()
        else:
            await self.kill()


class _Opening(Generic[S]):
    """An :class:`AsyncSandbox` on its way: awaitable, or entered with ``async with``."""

    def __init__(self, coro: "Coroutine[Any, Any, S]") -> None:
        self._coro = coro
        self._sandbox: Optional[S] = None

    def __await__(self) -> Generator[Any, None, S]:
        return self._coro.__await__()

    async def __aenter__(self) -> S:
        self._sandbox = await self._coro
        return self._sandbox

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        assert self._sandbox is not None
        await self._sandbox.__aexit__(exc_type, exc, tb)
