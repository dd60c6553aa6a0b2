"""A scripted transport: tests answer each call with a function and read back
what was sent. A streamed answer's body may be a list of chunks (an exception
among them is raised there, as a broken connection); the fakes count the
streams still open."""

import contextlib
import json
from typing import Callable, List, Tuple

from kruntimes import AsyncClient, Client
from kruntimes._runs import RunInfo
from kruntimes._wire import Call, Reply, raise_for
from kruntimes.sandbox import AsyncSandbox, Sandbox

Answer = Tuple[int, dict, bytes]


def ok(doc, status=200) -> Answer:
    return (status, {}, json.dumps(doc).encode())


def error(status, code, retry_after=None) -> Answer:
    headers = {"retry-after": str(retry_after)} if retry_after is not None else {}
    return (status, headers, json.dumps({"error": {"code": code, "message": code}}).encode())


def _opened(call: Call, answer: Answer):
    status, headers, body = answer
    err = raise_for(call, status, headers, body if isinstance(body, bytes) else b"")
    if err is not None:
        raise err
    return status, headers, [body] if isinstance(body, bytes) else list(body)


class FakeTransport:
    def __init__(self, answer: Callable[[Call], Answer]):
        self.answer = answer
        self.calls: List[Call] = []
        self.open_streams = 0
        self.closed_streams = 0

    @contextlib.contextmanager
    def stream(self, call: Call):
        self.calls.append(call)
        status, headers, chunks = _opened(call, self.answer(call))
        self.open_streams += 1
        try:
            yield status, headers, self._chunks(chunks)
        finally:
            self.open_streams -= 1
            self.closed_streams += 1

    @staticmethod
    def _chunks(chunks):
        for chunk in chunks:
            if isinstance(chunk, BaseException):
                raise chunk
            yield chunk

    def send(self, call: Call) -> Reply:
        self.calls.append(call)
        status, headers, body = self.answer(call)
        err = raise_for(call, status, headers, body)
        if err is not None:
            raise err
        return Reply(status, headers, body)

    def close(self):
        pass


class AsyncFake:
    """:class:`FakeTransport` of an :class:`~kruntimes.AsyncClient`."""

    def __init__(self, answer: Callable[[Call], Answer]):
        self.answer = answer
        self.calls: List[Call] = []
        self.open_streams = 0
        self.closed_streams = 0

    @contextlib.asynccontextmanager
    async def stream(self, call: Call):
        self.calls.append(call)
        status, headers, chunks = _opened(call, self.answer(call))
        self.open_streams += 1
        try:
            yield status, headers, self._chunks(chunks)
        finally:
            self.open_streams -= 1
            self.closed_streams += 1

    @staticmethod
    async def _chunks(chunks):
        for chunk in chunks:
            if isinstance(chunk, BaseException):
                raise chunk
            yield chunk

    async def send(self, call: Call) -> Reply:
        self.calls.append(call)
        status, headers, body = self.answer(call)
        err = raise_for(call, status, headers, body)
        if err is not None:
            raise err
        return Reply(status, headers, body)


def client(answer: Callable[[Call], Answer]) -> Tuple[Client, FakeTransport]:
    c = Client(gateway="https://gw", token="t")
    fake = FakeTransport(answer)
    c._transport = fake  # type: ignore[assignment]
    return c, fake


SESSION = "https://gw/v1/namespaces/default/runtimes/bash/sessions/u-1"


def session_run(endpoint: str = SESSION) -> RunInfo:
    return RunInfo(name="sb", namespace="default", uid="u-1", runtime="bash", mode="session", phase="Ready",
                   endpoint=endpoint)


def sandbox(answer: Callable[[Call], Answer]) -> Tuple[Sandbox, FakeTransport]:
    c, fake = client(answer)
    return Sandbox(c, session_run()), fake


def async_sandbox(answer: Callable[[Call], Answer]) -> Tuple[AsyncSandbox, AsyncFake]:
    c = AsyncClient(gateway="https://gw", token="t")
    fake = AsyncFake(answer)
    c._transport = fake  # type: ignore[assignment]
    return AsyncSandbox(c, session_run()), fake
