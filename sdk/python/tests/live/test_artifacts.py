"""Artifacts on the live stack. On ``krt up`` (every Runtime exports to ``STATE_DIR/artifacts``):
a Bash task writes two files into ``$KRUNTIME_ARTIFACTS_DIR``; its result lists them, the
gateway's list has them with sizes and digests, one is read whole and by ranges, the other
downloaded and compared by SHA-256, and a missing name is a ``NotFoundError``. On the API server
harness no Runtime has a store and the SDK's Role does not grant ``runs/artifacts``: reading a
task's artifacts there is refused (403)."""

import asyncio
import hashlib

import pytest

import kruntimes
from kruntimes import AsyncClient

from .conftest import MODE, make_client

SCRIPT = """set -e
cd "$KRUNTIME_ARTIFACTS_DIR"
mkdir -p out/deep
printf 'hello artifacts' > report.txt
head -c 3000000 /dev/urandom > out/deep/blob.bin
"""


def sha(b):
    return hashlib.sha256(b).hexdigest()


def test_a_tasks_artifacts_are_listed_read_and_downloaded(client, runtime, tmp_path):
    if MODE != "embedded":
        # The harness's Runtimes have no artifact store, and alice's Role has no runs/artifacts.
        r = client.tasks.run("python", inline="print('no artifacts here')", name="sdk-py-artifacts")
        try:
            assert r.artifacts == ()
            with pytest.raises(kruntimes.PermissionDeniedError) as e:
                client.artifacts.list(r)
            assert (e.value.status, e.value.source) == (403, "gateway")
        finally:
            client.tasks.delete(r.name)
        return
    r = client.tasks.run(runtime, inline=SCRIPT, name="sdk-py-artifacts")
    try:
        assert (r.phase, r.exit_code) == ("Succeeded", 0), (r.stdout, r.stderr, r.message)
        # status.artifacts, on the result.
        by_name = {a.name: a for a in r.artifacts}
        assert sorted(by_name) == ["out/deep/blob.bin", "report.txt"], r.artifacts
        assert (by_name["report.txt"].size, by_name["report.txt"].sha256) == (15, sha(b"hello artifacts"))
        assert by_name["out/deep/blob.bin"].size == 3_000_000

        # The gateway's list: by name, by result, the same refs.
        listed = client.artifacts.list(r.name)
        assert sorted(listed, key=lambda a: a.name) == sorted(r.artifacts, key=lambda a: a.name)
        assert client.artifacts.list(r) == listed
        assert all(a.uri.startswith("file://") for a in listed), listed

        # Read whole, and by ranges.
        assert client.artifacts.read(r, "report.txt") == b"hello artifacts"
        assert client.artifacts.read(r.name, "report.txt", offset=6) == b"artifacts"
        assert client.artifacts.read(r, by_name["report.txt"], offset=-9) == b"artifacts"
        assert client.artifacts.read(r, "report.txt", offset=0, length=5) == b"hello"
        part = client.artifacts.read(r, "out/deep/blob.bin", offset=1000, length=1000)
        assert len(part) == 1000
        with pytest.raises(kruntimes.RangeNotSatisfiableError) as e:
            client.artifacts.read(r, "report.txt", offset=15)
        assert e.value.status == 416

        # Download the other, and compare.
        dest = tmp_path / "blob.bin"
        client.artifacts.download(r, "out/deep/blob.bin", dest)
        blob = dest.read_bytes()
        assert len(blob) == 3_000_000 and sha(blob) == by_name["out/deep/blob.bin"].sha256
        assert blob[1000:2000] == part
        assert [p.name for p in tmp_path.iterdir()] == ["blob.bin"]

        # A name the Run does not have.
        with pytest.raises(kruntimes.NotFoundError) as e:
            client.artifacts.read(r, "nope.txt")
        assert (e.value.status, e.value.source) == (404, "gateway") and "nope.txt" in e.value.message
        with pytest.raises(kruntimes.NotFoundError):
            client.artifacts.download(r, "nope.txt", tmp_path / "nope.txt")
        assert not (tmp_path / "nope.txt").exists()

        async def main():
            async with make_client(AsyncClient) as c:
                assert await c.artifacts.list(r) == listed
                assert await c.artifacts.read(r, "report.txt", offset=-9) == b"artifacts"
                await c.artifacts.download(r.name, "report.txt", tmp_path / "report.txt")
            assert (tmp_path / "report.txt").read_bytes() == b"hello artifacts"

        asyncio.run(main())
    finally:
        client.tasks.delete(r.name)
