"""Function answers against a scripted transport: the handler's value as it is, the artifacts
envelope (``X-Kruntimes-Artifacts``) unwrapped by ``invoke`` and handed whole by ``call``, the
header alone deciding, and an envelope that is not one refused."""

import asyncio
import json

import pytest

import kruntimes
from kruntimes import ArtifactRef, AsyncClient, Invocation

from .fakes import AsyncFake, client, ok

URL = "https://gw/v1/namespaces/a/runtimes/python/runs/u-1:invoke"
REF = {"name": "invocations/sdk-1/report.txt",
       "uri": "file:///state/artifacts/a/u-1/files/invocations/sdk-1/report.txt",
       "size": 11, "sha256": "B94D27B9934D3E08A52E52D7DA7DABFAC484EFE37A5380EE9088F7ACE2EFCDE9"}


def envelope(outputs, refs, invocation_id="sdk-1", count=None):
    """An answer with artifacts: the envelope, marked by its header."""
    headers = {"x-kruntimes-artifacts": str(len(refs) if count is None else count),
               "x-kruntimes-invocation-id": invocation_id}
    return (200, headers, json.dumps({"outputs": outputs, "artifactRefs": refs}).encode())


def test_a_plain_answer_is_the_handlers_value():
    c, fake = client(lambda call: (200, {"x-kruntimes-invocation-id": "gw-7"}, b'{"message": "hi"}'))
    fn = c.function(endpoint=URL)
    assert fn.invoke({"name": "x"}, invocation_id="gw-7") == {"message": "hi"}
    assert fake.calls[0].headers["X-Kruntimes-Invocation-Id"] == "gw-7"
    inv = fn.call()
    assert inv == Invocation(output={"message": "hi"}, artifacts=[], invocation_id="gw-7")
    assert fake.calls[1].content == b"{}"


def test_invoke_unwraps_the_envelope_to_the_handlers_value():
    c, _ = client(lambda call: envelope({"summary": "ok", "n": [1, 2]}, [REF]))
    assert c.function(endpoint=URL).invoke({}, invocation_id="sdk-1") == {"summary": "ok", "n": [1, 2]}
    # A handler's value may be anything JSON, null too.
    c, _ = client(lambda call: envelope(None, [REF]))
    assert c.function(endpoint=URL).invoke() is None


def test_call_hands_out_the_output_the_refs_and_the_invocation_id():
    second = dict(REF, name="invocations/sdk-1/logs/a.txt", size=1,
                  sha256="ca978112ca1bbdcafac231b39a23dc4da786eff8147c4e72b9807785afee48bb")
    c, _ = client(lambda call: envelope({"summary": "ok"}, [REF, second]))
    inv = c.function(endpoint=URL).call({"x": 1}, invocation_id="sdk-1")
    assert inv.output == {"summary": "ok"} and inv.invocation_id == "sdk-1"
    assert [a.name for a in inv.artifacts] == ["invocations/sdk-1/report.txt", "invocations/sdk-1/logs/a.txt"]
    assert inv.artifacts[0] == ArtifactRef(name=REF["name"], uri=REF["uri"], size=11, sha256=REF["sha256"].lower())
    assert inv.artifacts[1].size == 1


def test_without_the_header_a_body_shaped_like_an_envelope_is_the_handlers_value():
    value = {"outputs": 1, "artifactRefs": [REF]}
    c, _ = client(lambda call: ok(value))
    fn = c.function(endpoint=URL)
    assert fn.invoke() == value
    inv = fn.call()
    assert (inv.output, inv.artifacts, inv.invocation_id) == (value, [], None)


@pytest.mark.parametrize("body", [
    b"[1, 2]",                                                # not an object
    b'{"artifactRefs": []}',                                  # no outputs
    b'{"outputs": 1}',                                        # no refs
    b'{"outputs": 1, "artifactRefs": {"name": "x"}}',         # refs not a list
    b'{"outputs": 1, "artifactRefs": ["invocations/x/y"]}',   # a ref not an object
    b'{"outputs": 1, "artifactRefs": [{"name": "a", "size": "big"}]}',
    b"not json",
])
def test_a_malformed_envelope_is_an_error_of_the_answer(body):
    headers = {"x-kruntimes-artifacts": "1", "x-kruntimes-invocation-id": "sdk-1"}
    c, fake = client(lambda call: (200, headers, body))
    fn = c.function(endpoint=URL)
    for method in (fn.call, fn.invoke):
        with pytest.raises(kruntimes.NetworkError) as e:
            method({}, invocation_id="sdk-1")
        assert e.value.invocation_id == "sdk-1"
        assert "x-kruntimes-artifacts" in e.value.message and URL in e.value.message
    assert len(fake.calls) == 2


def test_the_async_twin_unwraps_and_calls_the_same_way():
    answers = [envelope({"summary": "ok"}, [REF]), envelope([1], [REF]), ok("plain"),
               (200, {"x-kruntimes-artifacts": "1"}, b'{"outputs": 1}')]

    async def main():
        c = AsyncClient(gateway="https://gw", token="t")
        fake = AsyncFake(lambda call: answers.pop(0))
        c._transport = fake
        fn = c.function(endpoint=URL)
        assert await fn.invoke() == {"summary": "ok"}
        inv = await fn.call(invocation_id="sdk-1")
        assert (inv.output, [a.name for a in inv.artifacts], inv.invocation_id) == ([1], [REF["name"]], "sdk-1")
        assert await fn.call() == Invocation(output="plain")
        with pytest.raises(kruntimes.NetworkError):
            await fn.call()
        assert len(fake.calls) == 4

    asyncio.run(main())
