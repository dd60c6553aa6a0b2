"""Function-mode Runs: a handler registered once and invoked many times."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Optional, Tuple, Union

from ._wire import GATEWAY, Call, Flow
from .errors import NotFoundError, NotReadyError

if TYPE_CHECKING:
    from .client import AsyncClient, Client

#: How long the client waits for an invocation (the server's deadline is at most 300 s).
DEFAULT_INVOKE_TIMEOUT = 330.0


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

    def _invoke(self, input: Any, invocation_id: Optional[str], timeout: Optional[float]) -> Flow[Any]:
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
        return reply.json()

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
        """
        return self._client._drive(self._invoke(input, invocation_id, timeout))


class AsyncFunction(_FunctionBase):
    """:class:`Function` of an :class:`~kruntimes.AsyncClient`."""

    _client: "AsyncClient"

    async def invoke(self, input: Any = None, *, invocation_id: Optional[str] = None,
                     timeout: Optional[float] = DEFAULT_INVOKE_TIMEOUT) -> Any:
        """:meth:`Function.invoke`."""
        return await self._client._drive(self._invoke(input, invocation_id, timeout))
