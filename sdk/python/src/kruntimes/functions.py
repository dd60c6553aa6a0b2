"""Function-mode Runs: a handler registered once and invoked many times.

On a Runtime with an artifact store, what an invocation leaves in
``$KRUNTIME_ARTIFACTS_DIR`` is exported before its answer, which then carries
``X-Kruntimes-Artifacts: N`` and is the envelope ``{"outputs": <the handler's
value>, "artifactRefs": [...]}`` (``docs/artifacts.md``). :meth:`Function.invoke`
returns the handler's value either way; :meth:`Function.call` returns an
:class:`Invocation` with the refs too, named ``invocations/{id}/…`` in the Run and
read with ``client.artifacts``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, List, Optional, Tuple, Union

from ._runs import ArtifactRef
from ._wire import GATEWAY, Call, Flow, Reply
from .errors import NetworkError, NotFoundError, NotReadyError

if TYPE_CHECKING:
    from .client import AsyncClient, Client

#: How long the client waits for an invocation (the server's deadline is at most 300 s).
DEFAULT_INVOKE_TIMEOUT = 330.0

#: The header that marks an answer as the artifacts envelope; its value is the number of refs.
ARTIFACTS_HEADER = "x-kruntimes-artifacts"
_INVOCATION_ID_HEADER = "x-kruntimes-invocation-id"


@dataclass(frozen=True)
class Invocation:
    """One invocation's answer (:meth:`Function.call`): the handler's value and what it left in
    ``$KRUNTIME_ARTIFACTS_DIR``."""

    #: The handler's JSON value (what :meth:`Function.invoke` returns).
    output: Any
    #: The files the invocation left, exported before its answer and named
    #: ``invocations/{id}/…`` in the Run (``{id}`` the invocation id when it is a valid name
    #: segment, else a 32-hex hash of it): read them with
    #: ``client.artifacts.read(function.name, ref)``. ``[]`` when it left none, or on a Runtime
    #: without an artifact store.
    artifacts: List[ArtifactRef] = field(default_factory=list)
    #: The answer's ``X-Kruntimes-Invocation-Id``: the one sent, or the one the gateway chose.
    invocation_id: Optional[str] = None


def _invocation(reply: Reply, url: str) -> Invocation:
    """The :class:`Invocation` of a 2xx invoke answer: the body as it is, or, under
    ``X-Kruntimes-Artifacts``, the envelope's ``outputs`` and ``artifactRefs``."""
    invocation_id = reply.headers.get(_INVOCATION_ID_HEADER) or None
    if reply.headers.get(ARTIFACTS_HEADER) is None:
        return Invocation(output=reply.json(), invocation_id=invocation_id)
    problem = "not JSON"
    try:
        doc = reply.json()
    except ValueError:
        doc = None
    else:
        problem = "not an object with outputs and a list artifactRefs"
    if isinstance(doc, dict) and "outputs" in doc and isinstance(doc.get("artifactRefs"), list):
        try:
            refs = [ArtifactRef.from_json(r) for r in doc["artifactRefs"]]
        except (TypeError, ValueError) as e:
            problem = f"an artifact ref is malformed: {e}"
        else:
            return Invocation(output=doc["outputs"], artifacts=refs, invocation_id=invocation_id)
    # The call ran (and its files were exported), but its answer cannot be read.
    raise NetworkError(f"POST {url}: the answer says {ARTIFACTS_HEADER}: {reply.headers[ARTIFACTS_HEADER]} but its "
                       f"body is {problem}", invocation_id=invocation_id)


class _FunctionBase:
    def __init__(self, client: "Union[Client, AsyncClient]", name: Optional[str], namespace: str,
                 endpoint: Optional[str]) -> None:
        if (name is None) == (endpoint is None):
            raise ValueError("name a function Run, or pass its endpoint")
        self._client = client
        #: The Run's name (None when addressed by endpoint).
        self.name = name
        self.namespace = namespace
        self._resolved: Optional[Tuple[str, Optional[str]]] = (endpoint, None) if endpoint else None

    def _endpoint(self) -> Flow[Tuple[str, Optional[str]]]:
        if self._resolved is not None:
            return self._resolved
        assert self.name is not None
        run = yield from self._client._lookup(self.name, self.namespace, "function")
        if not run.endpoint:
            raise NotReadyError(f"run {self.namespace}/{self.name} has no endpoint yet (phase {run.phase})",
                                source=self._client._store().source)
        self._resolved = (run.endpoint, run.ca_pem)
        return self._resolved

    def _invoke(self, input: Any, invocation_id: Optional[str], timeout: Optional[float]) -> Flow[Invocation]:
        url, ca = yield from self._endpoint()
        headers = {"Content-Type": "application/json"}
        if invocation_id is not None:
            headers["X-Kruntimes-Invocation-Id"] = invocation_id
        body = json.dumps({} if input is None else input).encode()
        try:
            reply = yield Call(GATEWAY, "POST", url, content=body, headers=headers, ca_pem=ca, timeout=timeout)
        except NotFoundError:
            # The Run was deleted, maybe re-created under a new UID: look it up again next time.
            if self.name is not None:
                self._resolved = None
            raise
        assert reply is not None
        return _invocation(reply, url)

    def _output(self, input: Any, invocation_id: Optional[str], timeout: Optional[float]) -> Flow[Any]:
        invocation = yield from self._invoke(input, invocation_id, timeout)
        return invocation.output

    @property
    def endpoint(self) -> Optional[str]:
        """The invoke URL, once looked up."""
        return self._resolved[0] if self._resolved else None


class Function(_FunctionBase):
    """A function Run of a :class:`~kruntimes.Client`."""

    _client: "Client"

    def invoke(self, input: Any = None, *, invocation_id: Optional[str] = None,
               timeout: Optional[float] = DEFAULT_INVOKE_TIMEOUT) -> Any:
        """Calls the handler with ``input`` (JSON; None sends ``{}``) and returns its JSON output.

        ``invocation_id`` is sent as ``X-Kruntimes-Invocation-Id`` and comes back on
        errors. Never retried: a :class:`~kruntimes.BusyError` or
        :class:`~kruntimes.UnavailableError` may be retried after its ``retry_after``.
        An answer with artifacts gives its ``outputs`` (:meth:`call` has the refs too).
        """
        return self._client._drive(self._output(input, invocation_id, timeout))

    def call(self, input: Any = None, *, invocation_id: Optional[str] = None,
             timeout: Optional[float] = DEFAULT_INVOKE_TIMEOUT) -> Invocation:
        """:meth:`invoke`, returning the :class:`Invocation`: the handler's output, the refs of the
        files it left in ``$KRUNTIME_ARTIFACTS_DIR`` and the invocation id. An answer marked
        ``X-Kruntimes-Artifacts`` whose body is not the envelope raises
        :class:`~kruntimes.NetworkError` (the call ran; its answer is unreadable).
        """
        return self._client._drive(self._invoke(input, invocation_id, timeout))


class AsyncFunction(_FunctionBase):
    """:class:`Function` of an :class:`~kruntimes.AsyncClient`."""

    _client: "AsyncClient"

    async def invoke(self, input: Any = None, *, invocation_id: Optional[str] = None,
                     timeout: Optional[float] = DEFAULT_INVOKE_TIMEOUT) -> Any:
        """:meth:`Function.invoke`."""
        return await self._client._drive(self._output(input, invocation_id, timeout))

    async def call(self, input: Any = None, *, invocation_id: Optional[str] = None,
                   timeout: Optional[float] = DEFAULT_INVOKE_TIMEOUT) -> Invocation:
        """:meth:`Function.call`."""
        return await self._client._drive(self._invoke(input, invocation_id, timeout))
