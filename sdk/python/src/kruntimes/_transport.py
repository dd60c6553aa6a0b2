"""The I/O adapters of :mod:`kruntimes._wire`: send a :class:`Call` with httpx,
blocking or with asyncio, to the gateway (one connection pool per CA bundle,
since each Run's status names the CA its endpoint chains to) or to the
Kubernetes API. Non-2xx answers become typed errors; nothing is retried
here (see :class:`kruntimes._credentials.BearerAuth` for the one exception,
a refreshed token after a 401)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from typing import Any, AsyncIterator, Callable, Dict, Iterator, Optional, Tuple

import httpx

from . import _tls
from ._credentials import BearerAuth, TokenSource
from ._kubeconfig import KubeTarget
from ._wire import GATEWAY, Call, Reply, lower_headers, raise_for
from .errors import ConfigError, KruntimesError, NetworkError

_CONNECT_TIMEOUT = 10.0


def _shut_down(response: httpx.Response) -> None:
    """Shuts the socket of a streamed response down. Closing it would not do: a read blocked on
    it in another thread goes on until the peer sends something; after a shutdown it returns."""
    stream = response.extensions.get("network_stream")
    sock = stream.get_extra_info("socket") if stream is not None else None
    if isinstance(sock, socket.socket):
        with contextlib.suppress(OSError, ValueError):
            sock.shutdown(socket.SHUT_RDWR)
    else:  # another transport (HTTP/2, a mounted one): close it, for what that does
        with contextlib.suppress(Exception):
            response.close()


class _Base:
    def __init__(self, gateway_token: Optional[TokenSource], gateway_ca_file: Optional[str],
                 kube: Optional[KubeTarget]) -> None:
        self._gateway_auth = BearerAuth(gateway_token) if gateway_token is not None else None
        self._gateway_ca_file = gateway_ca_file
        self._kube = kube
        self._kube_identity: Optional[_tls.Identity] = None

    def _gateway_options(self, call: Call) -> Dict[str, Any]:
        """The pool of a gateway call: keyed by the CA its endpoint chains to."""
        ssl_ctx = _tls.context(ca_pem=call.ca_pem) if call.ca_pem else _tls.context(ca_file=self._gateway_ca_file)
        return {"verify": ssl_ctx, "auth": self._gateway_auth}

    def _kube_options(self) -> Dict[str, Any]:
        kube = self._require_kube()
        auth: Optional[httpx.Auth] = None
        if kube.token is not None:
            auth = BearerAuth(kube.token)
        elif kube.basic is not None:
            auth = httpx.BasicAuth(*kube.basic)
        return {"base_url": kube.server, "auth": auth, "verify": kube.ssl_context(self._kube_identity)}

    def _require_kube(self) -> KubeTarget:
        if self._kube is None:
            raise ConfigError("this client has no Kubernetes API (use Client.from_kubeconfig)")
        return self._kube

    def _kube_extensions(self) -> Dict[str, Any]:
        name = self._kube.tls_server_name if self._kube else None
        return {"sni_hostname": name} if name else {}

    def _request(self, call: Call) -> Dict[str, Any]:
        kw: Dict[str, Any] = {
            "method": call.method,
            "url": call.url,
            "params": call.params,
            "headers": dict(call.headers),
            "timeout": httpx.Timeout(call.timeout, connect=_CONNECT_TIMEOUT),
        }
        if call.json is not None:
            kw["json"] = call.json
        if call.content is not None:
            kw["content"] = call.content
        if call.target != GATEWAY:
            kw["extensions"] = self._kube_extensions()
        return kw

    @staticmethod
    def _reply(call: Call, response: httpx.Response) -> Reply:
        headers = lower_headers(response.headers)
        err = raise_for(call, response.status_code, headers, response.content)
        if err is not None:
            raise err
        return Reply(response.status_code, headers, response.content)

    @staticmethod
    def _network(call: Call, e: Exception) -> KruntimesError:
        return NetworkError(f"{call.method} {call.url}: {type(e).__name__}: {e}")


class SyncTransport(_Base):
    """Blocking I/O."""

    def __init__(self, gateway_token: Optional[TokenSource], gateway_ca_file: Optional[str],
                 kube: Optional[KubeTarget]) -> None:
        super().__init__(gateway_token, gateway_ca_file, kube)
        self._gateways: Dict[str, httpx.Client] = {}
        self._kube_client: Optional[httpx.Client] = None

    def _client(self, call: Call) -> httpx.Client:
        if call.target == GATEWAY:
            pool = self._gateways.get(call.ca_pem or "")
            if pool is None:
                pool = self._gateways[call.ca_pem or ""] = httpx.Client(**self._gateway_options(call))
            return pool
        identity = self._require_kube().current_identity()
        if self._kube_client is None or identity != self._kube_identity:
            if self._kube_client is not None:
                self._kube_client.close()
            self._kube_identity = identity
            self._kube_client = httpx.Client(**self._kube_options())
        return self._kube_client

    def send(self, call: Call) -> Reply:
        try:
            response = self._client(call).request(**self._request(call))
        except httpx.TransportError as e:
            raise self._network(call, e) from e
        return self._reply(call, response)

    def lines(self, call: Call) -> Iterator[str]:
        """The non-empty lines of a streamed answer; closing the iterator closes the connection."""
        try:
            with self._client(call).stream(**self._request(call)) as response:
                if response.status_code >= 300:
                    response.read()
                    self._reply(call, response)
                for line in response.iter_lines():
                    if line:
                        yield line
        except httpx.TransportError as e:
            raise self._network(call, e) from e

    @contextlib.contextmanager
    def _open(self, call: Call) -> Iterator[httpx.Response]:
        try:
            with self._client(call).stream(**self._request(call)) as response:
                if response.status_code >= 300:
                    response.read()
                    self._reply(call, response)
                yield response
        except httpx.TransportError as e:
            raise self._network(call, e) from e

    @contextlib.contextmanager
    def stream(self, call: Call) -> Iterator[Tuple[int, Dict[str, str], Iterator[bytes]]]:
        """A streamed 2xx answer: its status, headers and body chunks (a broken connection raises
        :class:`NetworkError` from the chunks); the connection closes with the context."""
        with self._open(call) as response:
            yield response.status_code, lower_headers(response.headers), self._chunks(call, response)

    @contextlib.contextmanager
    def abortable(self, call: Call) -> Iterator[Tuple[Iterator[bytes], Callable[[], None]]]:
        """:meth:`stream` read by one thread and ended by another: the body chunks, and a function
        that shuts the connection down, so that a read blocked on it returns at once (the chunks
        then raise :class:`NetworkError`). Call it only while the context is open."""
        with self._open(call) as response:
            yield self._chunks(call, response), lambda: _shut_down(response)

    def _chunks(self, call: Call, response: httpx.Response) -> Iterator[bytes]:
        try:
            yield from response.iter_bytes()
        except httpx.TransportError as e:
            raise self._network(call, e) from e

    def close(self) -> None:
        for c in self._gateways.values():
            c.close()
        self._gateways.clear()
        if self._kube_client is not None:
            self._kube_client.close()
            self._kube_client = None


class AsyncTransport(_Base):
    """asyncio I/O."""

    def __init__(self, gateway_token: Optional[TokenSource], gateway_ca_file: Optional[str],
                 kube: Optional[KubeTarget]) -> None:
        super().__init__(gateway_token, gateway_ca_file, kube)
        self._gateways: Dict[str, httpx.AsyncClient] = {}
        self._kube_client: Optional[httpx.AsyncClient] = None

    async def _client(self, call: Call) -> httpx.AsyncClient:
        if call.target == GATEWAY:
            pool = self._gateways.get(call.ca_pem or "")
            if pool is None:
                pool = self._gateways[call.ca_pem or ""] = httpx.AsyncClient(**self._gateway_options(call))
            return pool
        kube = self._require_kube()
        # An exec plugin may run to produce the certificate: off the event loop.
        identity = await asyncio.to_thread(kube.current_identity) if kube.exec_plugin else kube.identity
        if self._kube_client is None or identity != self._kube_identity:
            if self._kube_client is not None:
                await self._kube_client.aclose()
            self._kube_identity = identity
            self._kube_client = httpx.AsyncClient(**self._kube_options())
        return self._kube_client

    async def send(self, call: Call) -> Reply:
        try:
            response = await (await self._client(call)).request(**self._request(call))
        except httpx.TransportError as e:
            raise self._network(call, e) from e
        return self._reply(call, response)

    async def lines(self, call: Call) -> AsyncIterator[str]:
        """:meth:`SyncTransport.lines`, asynchronously."""
        try:
            async with (await self._client(call)).stream(**self._request(call)) as response:
                if response.status_code >= 300:
                    await response.aread()
                    self._reply(call, response)
                async for line in response.aiter_lines():
                    if line:
                        yield line
        except httpx.TransportError as e:
            raise self._network(call, e) from e

    @contextlib.asynccontextmanager
    async def stream(self, call: Call) -> AsyncIterator[Tuple[int, Dict[str, str], AsyncIterator[bytes]]]:
        """:meth:`SyncTransport.stream`, asynchronously."""
        try:
            async with (await self._client(call)).stream(**self._request(call)) as response:
                if response.status_code >= 300:
                    await response.aread()
                    self._reply(call, response)
                yield response.status_code, lower_headers(response.headers), self._chunks(call, response)
        except httpx.TransportError as e:
            raise self._network(call, e) from e

    async def _chunks(self, call: Call, response: httpx.Response) -> AsyncIterator[bytes]:
        try:
            async for chunk in response.aiter_bytes():
                yield chunk
        except httpx.TransportError as e:
            raise self._network(call, e) from e

    async def aclose(self) -> None:
        for c in self._gateways.values():
            await c.aclose()
        self._gateways.clear()
        if self._kube_client is not None:
            await self._kube_client.aclose()
            self._kube_client = None
