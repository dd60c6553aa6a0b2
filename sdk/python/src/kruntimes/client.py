"""Clients: how to reach the gateway, and where Runs are looked up and created.

Three ways to make one, the same for :class:`Client` (blocking) and
:class:`AsyncClient` (asyncio):

- ``from_state_dir(".kruntimes")`` — a ``krt up`` stack: the gateway, CA and token
  of ``client.json``; Runs from ``runs.json``; sandboxes and tasks created as
  manifests in its runs directory.
- ``from_kubeconfig(namespace=…)`` — a cluster: Runs looked up and created
  through the Kubernetes API as the kubeconfig's user (token, token file,
  client certificate or exec plugin; in a Pod, its service account), whose
  token also authenticates to the gateway; each Run's status names its
  endpoint and CA.
- ``Client(gateway=…, token=…, ca_file=…)`` — the gateway alone: functions and
  sandboxes addressed by endpoint URL (``Run.status.endpoint.url``).
"""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, TypeVar

from . import _kubeconfig
from ._credentials import StaticToken, TokenSource
from ._runs import KubernetesRuns, RunInfo, RunStore, StateDirRuns
from ._transport import AsyncTransport, SyncTransport
from ._wire import Flow, drive, drive_async
from .errors import ConfigError, NotFoundError, UnsupportedError

if TYPE_CHECKING:
    from .artifacts import Artifacts, AsyncArtifacts
    from .functions import AsyncFunction, Function
    from .tasks import AsyncTasks, Tasks

T = TypeVar("T")
C = TypeVar("C", bound="_ClientBase")


class _ClientBase:
    """What both clients know: the namespace, the Run store and the gateway's credentials."""

    #: The namespace Runs are looked up and created in unless a call names another.
    namespace: str
    #: The gateway's base URL, when known (state dir, explicit); a cluster's Runs name theirs.
    gateway: Optional[str]

    def __init__(self, gateway: Optional[str] = None, token: Optional[str] = None, ca_file: Optional[str] = None,
                 *, namespace: str = "default") -> None:
        self._setup(gateway=gateway, token=StaticToken(token) if token else None, ca_file=ca_file,
                    runs=None, kube=None, namespace=namespace)

    def _setup(self, *, gateway: Optional[str], token: Optional[TokenSource], ca_file: Optional[str],
               runs: Optional[RunStore], kube: Optional[_kubeconfig.KubeTarget], namespace: str) -> None:
        self.gateway = gateway.rstrip("/") if gateway else None
        self.namespace = namespace
        self._runs = runs
        self._open_transport(token, ca_file, kube)

    def _open_transport(self, token: Optional[TokenSource], ca_file: Optional[str],
                        kube: Optional[_kubeconfig.KubeTarget]) -> None:
        raise NotImplementedError

    @classmethod
    def from_state_dir(cls: "type[C]", path: str = ".kruntimes", *, token: Optional[str] = None,
                       namespace: str = "default") -> C:
        """A client of the ``krt up`` stack whose state directory is ``path``.

        ``token`` replaces the one in ``client.json`` (e.g. a token the cluster of
        ``krt up --kubeconfig`` accepts, or one minted with ``krt token``).
        """
        state = Path(path)
        if not _stack_running(state):
            raise ConfigError(f"no krt up running for {state} (start one with `krt --state-dir {state} up`): "
                              "its state files describe a stack that is gone")
        try:
            cfg = json.loads((state / "client.json").read_text())
        except (OSError, ValueError) as e:
            raise ConfigError(f"read {state / 'client.json'} (is `krt up` running with this state dir?): {e}") from e
        client = cls.__new__(cls)
        client._setup(gateway=cfg["gateway"], token=StaticToken(token or cfg["token"]), ca_file=cfg.get("caFile"),
                      runs=StateDirRuns(state, cfg.get("runsDir")), kube=None, namespace=namespace)
        return client

    @classmethod
    def from_kubeconfig(cls: "type[C]", path: Optional[str] = None, *, context: Optional[str] = None,
                        namespace: Optional[str] = None, token: Optional[str] = None,
                        gateway_ca_file: Optional[str] = None) -> C:
        """A client of the cluster in the kubeconfig at ``path`` (default ``$KUBECONFIG``,
        ``~/.kube/config``, else the Pod's service account).

        ``namespace`` defaults to the context's. The user's credentials reach the
        gateway too; ``token`` replaces them there (a user with a client certificate
        only, or a gateway with its own ``--token-audiences``). ``gateway_ca_file`` is
        trusted for Runs whose status carries no CA bundle.
        """
        target = _kubeconfig.load(path, context, namespace)
        client = cls.__new__(cls)
        client._setup(gateway=None, token=StaticToken(token) if token else target.token, ca_file=gateway_ca_file,
                      runs=KubernetesRuns(), kube=target, namespace=target.namespace)
        return client

    def _store(self) -> RunStore:
        if self._runs is None:
            raise UnsupportedError("this client knows only the gateway: address Runs by endpoint, or use "
                                   "Client.from_kubeconfig / Client.from_state_dir")
        return self._runs

    def _lookup(self, name: str, namespace: Optional[str], mode: str) -> Flow[RunInfo]:
        ns = namespace or self.namespace
        run = yield from self._store().get(ns, name)
        # The control plane's answer (the Kubernetes API's 404, or runs.json).
        if run is None:
            raise NotFoundError(f"no run {ns}/{name}", source=self._store().source)
        if run.mode != mode:
            raise NotFoundError(f"run {ns}/{name} is a {run.mode or 'task'} Run, not a {mode} Run",
                                source=self._store().source)
        return run

    def _get_run(self, name: str, namespace: Optional[str]) -> Flow[Optional[RunInfo]]:
        return self._store().get(namespace or self.namespace, name)


class Client(_ClientBase):
    """A blocking client; a context manager that closes its connections."""

    def _open_transport(self, token: Optional[TokenSource], ca_file: Optional[str],
                        kube: Optional[_kubeconfig.KubeTarget]) -> None:
        self._transport = SyncTransport(token, ca_file, kube)

    def _drive(self, flow: Flow[T]) -> T:
        return drive(flow, self._transport.send)

    def function(self, name: Optional[str] = None, *, namespace: Optional[str] = None,
                 endpoint: Optional[str] = None) -> "Function":
        """The function Run ``name`` (looked up at the first call), or the one at ``endpoint``."""
        from .functions import Function

        return Function(self, name, namespace or self.namespace, endpoint)

    @property
    def tasks(self) -> "Tasks":
        """Task Runs: ``client.tasks.run("python", inline="print(1)")``, ``get``, ``delete``."""
        from .tasks import Tasks

        return Tasks(self)

    @property
    def artifacts(self) -> "Artifacts":
        """The files task Runs left: ``client.artifacts.list(run)``, ``read``, ``download``."""
        from .artifacts import Artifacts

        return Artifacts(self)

    def get_run(self, name: str, *, namespace: Optional[str] = None) -> Optional[RunInfo]:
        """The Run's status as its control plane reports it, or None."""
        return self._drive(self._get_run(name, namespace))

    def close(self) -> None:
        self._transport.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class AsyncClient(_ClientBase):
    """:class:`Client` for asyncio; an async context manager."""

    def _open_transport(self, token: Optional[TokenSource], ca_file: Optional[str],
                        kube: Optional[_kubeconfig.KubeTarget]) -> None:
        self._transport = AsyncTransport(token, ca_file, kube)

    async def _drive(self, flow: Flow[T]) -> T:
        return await drive_async(flow, self._transport.send)

    def function(self, name: Optional[str] = None, *, namespace: Optional[str] = None,
                 endpoint: Optional[str] = None) -> "AsyncFunction":
        """:meth:`Client.function`."""
        from .functions import AsyncFunction

        return AsyncFunction(self, name, namespace or self.namespace, endpoint)

    @property
    def tasks(self) -> "AsyncTasks":
        """:attr:`Client.tasks`, as coroutines."""
        from .tasks import AsyncTasks

        return AsyncTasks(self)

    @property
    def artifacts(self) -> "AsyncArtifacts":
        """:attr:`Client.artifacts`, as coroutines."""
        from .artifacts import AsyncArtifacts

        return AsyncArtifacts(self)

    async def get_run(self, name: str, *, namespace: Optional[str] = None) -> Optional[RunInfo]:
        """:meth:`Client.get_run`."""
        return await self._drive(self._get_run(name, namespace))

    async def aclose(self) -> None:
        await self._transport.aclose()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()


def _stack_running(state: Path) -> bool:
    """Whether a ``krt up`` holds ``state`` (its lifelong ``flock`` on ``krt-up.lock``): a
    shared lock is refused exactly while it does."""
    try:
        fd = os.open(state / "krt-up.lock", os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False
