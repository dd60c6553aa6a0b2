"""The sans-I/O core shared by the sync and async clients.

Every multi-step operation (look a Run up, create it and wait until it is
Ready, page through a directory, …) is written once, as a generator *flow*
that yields :class:`Call` (an HTTP request to send) or :class:`Sleep` and is
sent back a :class:`Reply`. Error answers are thrown into the flow as typed
:class:`~kruntimes.KruntimesError` so it can handle the ones it expects.
:func:`drive` runs a flow with blocking I/O, :func:`drive_async` with asyncio;
nothing else differs between ``Sandbox`` and ``AsyncSandbox``.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Dict, Generator, Generic, Mapping, Optional, TypeVar, Union

from . import errors

T = TypeVar("T")

#: Where a call goes.
GATEWAY = "gateway"
KUBERNETES = "kubernetes"


@dataclass(frozen=True)
class Call:
    """One HTTP request.

    ``url`` is absolute for the gateway and a path for the Kubernetes API.
    ``ca_pem`` is the CA bundle the gateway's certificate must chain to (from
    the Run's status), or None for the client's default.
    """

    target: str
    method: str
    url: str
    params: Optional[Mapping[str, Union[str, int]]] = None
    json: Any = None
    content: Optional[bytes] = None
    headers: Mapping[str, str] = field(default_factory=dict)
    ca_pem: Optional[str] = None
    #: Seconds the client waits for the answer (None: forever; the server bounds the call).
    timeout: Optional[float] = 30.0


@dataclass(frozen=True)
class Sleep:
    """Waits before the flow goes on."""

    seconds: float


@dataclass(frozen=True)
class Reply:
    """A successful (2xx) answer."""

    status: int
    headers: Mapping[str, str]
    body: bytes

    def json(self) -> Any:
        import json

        return json.loads(self.body)


Step = Union[Call, Sleep]
Flow = Generator[Step, Optional[Reply], T]


def done(value: T) -> Flow[T]:
    """A flow that needs no I/O."""
    return value
    yield  # pragma: no cover - makes this a generator


def raise_for(call: Call, status: int, headers: Mapping[str, str], body: bytes) -> Optional[errors.KruntimesError]:
    """The typed error of a non-2xx answer, or None."""
    if 200 <= status < 300:
        return None
    return errors.from_answer(call.target, status, headers, body)


class _Runner(Generic[T]):
    """Steps a flow: sends it each reply (or throws each error) and hands out its next step."""

    def __init__(self, flow: Flow[T]) -> None:
        self._flow = flow
        self._reply: Optional[Reply] = None
        self._failure: Optional[BaseException] = None
        self.value: Any = None

    def step(self) -> Optional[Step]:
        """The next step, or None once the flow returned (its value is in ``value``)."""
        try:
            if self._failure is not None:
                step = self._flow.throw(self._failure)
            else:
                step = self._flow.send(self._reply)
        except StopIteration as stop:
            self.value = stop.value
            return None
        self._reply, self._failure = None, None
        return step

    def answer(self, reply: Reply) -> None:
        self._reply = reply

    def fail(self, error: BaseException) -> None:
        self._failure = error


def drive(flow: Flow[T], send: Callable[[Call], Reply]) -> T:
    """Runs ``flow`` with blocking I/O; ``send`` raises typed errors for non-2xx answers."""
    runner = _Runner(flow)
    while (step := runner.step()) is not None:
        if isinstance(step, Sleep):
            time.sleep(step.seconds)
            continue
        try:
            runner.answer(send(step))
        except errors.KruntimesError as e:
            runner.fail(e)
    return runner.value  # type: ignore[no-any-return]


async def drive_async(flow: Flow[T], send: Callable[[Call], Awaitable[Reply]]) -> T:
    """:func:`drive` with asyncio."""
    runner = _Runner(flow)
    while (step := runner.step()) is not None:
        if isinstance(step, Sleep):
            await asyncio.sleep(step.seconds)
            continue
        try:
            runner.answer(await send(step))
        except errors.KruntimesError as e:
            runner.fail(e)
    return runner.value  # type: ignore[no-any-return]


def lower_headers(headers: Mapping[str, str]) -> Dict[str, str]:
    return {k.lower(): v for k, v in headers.items()}
