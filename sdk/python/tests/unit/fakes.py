"""A scripted transport: tests answer each call with a function and read back
what was sent. A streamed answer's body may be a list of chunks (an exception
among them is raised there, as a broken connection; ``HOLD`` waits there, as a
quiet connection, until the stream is aborted or its task cancelled); the fakes
count the streams still open."""

import asyncio
import contextlib
import json
import threading
from typing import Callable, List, Tuple

from kruntimes import AsyncClient, Client, NetworkError
from kruntimes._runs import RunInfo
from kruntimes._wire import Call, Reply, raise_for
from kruntimes.sandbox import AsyncSandbox, Sandbox

Answer = Tuple[int, dict, bytes]

#: A chunk that never comes: the stream waits there until it is aborted (or cancelled).
HOLD = object()


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
        self.aborts = 0

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

    @contextlib.contextmanager
    def abortable(self, call: Call):
        aborted = threading.Event()

        def abort():
            self.aborts += 1
            aborted.set()

        with self.stream(call) as (_, _, chunks):
            yield self._until(chunks, aborted), abort

    @staticmethod
    def _until(chunks, aborted):
        for chunk in chunks:
            if chunk is HOLD:
                aborted.wait(30)
                raise NetworkError("the connection was shut down")
            if aborted.is_set():
                raise NetworkError("the connection was shut down")
            yield chunk

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
            if chunk is HOLD:
                await asyncio.Event().wait()
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
