"""The async twin: the same methods as coroutines (and async iterators), on
the same live stack. Each test runs its own event loop (no plugin needed)."""

import asyncio

import pytest

import kruntimes
from kruntimes import AsyncClient, AsyncSandbox

from .conftest import MODE, env, make_client


def run(coro_fn):
    async def main():
        async with make_client(AsyncClient) as client:
            return await coro_fn(client)

    return asyncio.run(main())


def test_async_invoke_and_its_errors():
    async def body(client):
        fn = client.function(env("KRT_TEST_FUNCTION"))
        assert (await fn.invoke({"name": "async"}))["message"] == "hello async"
        inv = await fn.call({"report": "async"}, invocation_id="sdk-async-1")
        assert (inv.output["reported"], inv.invocation_id) == (5, "sdk-async-1")
        assert [a.name for a in inv.artifacts] == (["invocations/sdk-async-1/report.txt"] if MODE == "embedded" else [])
        with pytest.raises(kruntimes.FunctionError):
            await fn.invoke({"raise": "async"})
        with pytest.raises(kruntimes.NotFoundError):
            await client.function("no-such-function").invoke({})
        # Two at once: one runs, the other is refused (never queued, never retried).
        slow = asyncio.ensure_future(fn.invoke({"sleep": 1.2, "name": "first"}))
        await asyncio.sleep(0.4)
        with pytest.raises(kruntimes.BusyError):
            await fn.invoke({})
        assert (await slow)["message"] == "hello first"
        with pytest.raises(kruntimes.DeadlineExceededError):
            await fn.invoke({"sleep": 10})

    run(body)


def test_async_sandbox_commands_files_and_paging():
    async def body(client):
        async with AsyncSandbox.create(client, runtime=env("KRT_TEST_SESSION_RUNTIME"), env={"A": "1"}) as sb:
            r = await sb.commands.run("echo $A; exit 2")
            assert (r.exit_code, r.stdout) == (2, "1\n")
            events = [e async for e in sb.commands.stream(["bash", "-c", "echo one; echo two"])]
            assert [e.type for e in events][0] == "accepted" and events[-1].type == "completed"
            assert "".join(e.data for e in events if e.type == "output") == "one\ntwo\n"
            await sb.files.make_dir("d")
            await sb.files.write("d/a.txt", b"async bytes")
            assert await sb.files.read("d/a.txt") == b"async bytes"
            assert await sb.files.exists("d/a.txt") and not await sb.files.exists("d/b.txt")
            await sb.files.rename("d/a.txt", "d/b.txt")
            assert [e.name for e in await sb.files.list("d")] == ["b.txt"]
            await sb.files.remove("d/b.txt")
            assert await sb.files.list("d") == []
            assert (await sb.commands.run("mkdir big && cd big && for i in $(seq -w 0 2499); do : > f$i; done")).ok
            entries = await sb.files.list("big")
            assert len(entries) == 2500 and entries[-1].name == "f2499"
            page = await sb.files.list_page("big", limit=1000)
            assert len(page.entries) == 1000 and page.next_page_token
            with pytest.raises(kruntimes.InvalidPathError):
                await sb.files.read("../x")
            again = await AsyncSandbox.connect(client, sb.name)
            assert (await again.status()).uid == sb.uid
        assert sb.run_info.phase == "Succeeded"
        with pytest.raises(kruntimes.RunEndedError):
            await sb.commands.run("true")
        sb = await AsyncSandbox.create(client, runtime=env("KRT_TEST_SESSION_RUNTIME"))
        assert (await sb.kill()).phase == "Cancelled"

    run(body)
