"""A sandbox's metrics (``GET …/metrics``, docs/sessions.md "Metrics") against a scripted
transport: the request, the answer's fields in snake case (a null limit is None), typed errors
sent once, and the async twin."""

import asyncio
import dataclasses

import pytest

import kruntimes
from kruntimes import SandboxMetrics

from .fakes import SESSION, async_sandbox, error, ok, sandbox

WIRE = {"cpuSeconds": 12.34, "cpuCount": 2, "memoryBytes": 73400320, "memoryLimitBytes": 2147483648,
        "processes": 3, "diskBytes": 1048576, "diskPartial": False,
        "diskTotalBytes": 107374182400, "diskFreeBytes": 53687091200}


def test_metrics_are_read_from_the_metrics_route():
    sb, fake = sandbox(lambda call: ok(WIRE))
    m = sb.get_metrics()
    assert [(c.method, c.url, c.json, c.content) for c in fake.calls] == [("GET", f"{SESSION}/metrics", None, None)]
    assert m == SandboxMetrics(cpu_seconds=12.34, cpu_count=2, memory_bytes=73400320,
                               memory_limit_bytes=2147483648, processes=3, disk_bytes=1048576, disk_partial=False,
                               disk_total_bytes=107374182400, disk_free_bytes=53687091200)
    assert isinstance(m.cpu_seconds, float) and isinstance(m.memory_limit_bytes, int)
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.processes = 4  # type: ignore[misc]


def test_a_null_limit_is_none_and_whole_cpu_seconds_are_a_float():
    sb, _ = sandbox(lambda call: ok({**WIRE, "cpuSeconds": 0, "memoryLimitBytes": None, "processes": 0,
                                     "diskPartial": True}))
    m = sb.get_metrics()
    assert (m.cpu_seconds, m.memory_limit_bytes, m.processes, m.disk_partial) == (0.0, None, 0, True)
    assert isinstance(m.cpu_seconds, float)


@pytest.mark.parametrize("status,code,cls", [(404, "NotFound", kruntimes.NotFoundError),
                                             (503, "NotReady", kruntimes.NotReadyError),
                                             (503, "OwnerUnavailable", kruntimes.OwnerUnavailableError),
                                             (410, "RunEnded", kruntimes.RunEndedError)])
def test_errors_are_typed_and_not_retried(status, code, cls):
    sb, fake = sandbox(lambda call: error(status, code, retry_after=1 if status == 503 else None))
    with pytest.raises(cls) as e:
        sb.get_metrics()
    assert (e.value.status, e.value.code) == (status, code)
    if status == 503:
        assert isinstance(e.value, kruntimes.UnavailableError) and e.value.retry_after == 1.0
    assert len(fake.calls) == 1


def test_the_async_twin_reads_and_raises_the_same_way():
    async def main():
        sb, fake = async_sandbox(lambda call: ok({**WIRE, "memoryLimitBytes": None}))
        m = await sb.get_metrics()
        assert (m.cpu_seconds, m.cpu_count, m.memory_limit_bytes, m.disk_free_bytes) == (12.34, 2, None, 53687091200)
        assert [(c.method, c.url) for c in fake.calls] == [("GET", f"{SESSION}/metrics")]
        sb, fake = async_sandbox(lambda call: error(404, "NotFound"))
        with pytest.raises(kruntimes.NotFoundError):
            await sb.get_metrics()
        sb, _ = async_sandbox(lambda call: error(503, "Overloaded", retry_after=2))
        with pytest.raises(kruntimes.OverloadedError) as e:
            await sb.get_metrics()
        assert e.value.retry_after == 2.0

    asyncio.run(main())
