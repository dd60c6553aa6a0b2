"""A scripted transport: tests answer each call with a function and read back
what was sent."""

import json
from typing import Callable, List, Tuple

from kruntimes import Client
from kruntimes._runs import RunInfo
from kruntimes._wire import Call, Reply, raise_for
from kruntimes.sandbox import Sandbox

Answer = Tuple[int, dict, bytes]


def ok(doc, status=200) -> Answer:
    return (status, {}, json.dumps(doc).encode())


def error(status, code, retry_after=None) -> Answer:
    headers = {"retry-after": str(retry_after)} if retry_after is not None else {}
    return (status, headers, json.dumps({"error": {"code": code, "message": code}}).encode())


class FakeTransport:
    def __init__(self, answer: Callable[[Call], Answer]):
        self.answer = answer
        self.calls: List[Call] = []

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
    """:class:`FakeTransport` of an :class:`~kruntimes.AsyncClient` (``send`` only)."""

    def __init__(self, answer: Callable[[Call], Answer]):
        self.answer = answer
        self.calls: List[Call] = []

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


def sandbox(answer: Callable[[Call], Answer]) -> Tuple[Sandbox, FakeTransport]:
    c, fake = client(answer)
    run = RunInfo(name="sb", namespace="default", uid="u-1", runtime="bash", mode="session", phase="Ready",
                  endpoint=SESSION)
    return Sandbox(c, run), fake
