"""Artifacts against a local server that answers like the gateway's artifact routes: the list
parsed into refs, the Range a read sends, 416 and 503 as typed errors, a whole read and a
download checked against the announced SHA-256, a download written whole or not at all, the
ways a Run is named, and the async twin."""

import asyncio
import hashlib
import json
import os

import pytest

import kruntimes
from kruntimes import ArtifactRef, AsyncClient, Client, RunInfo, TaskResult
from kruntimes._runs import KubernetesRuns, StateDirRuns
from kruntimes.artifacts import name_problem, range_header

from .fakes import client as fake_client
from .fakes import error, ok
from .servers import ARTIFACTS, ArtifactServer

REPORT = b"hello artifacts"
BLOB = bytes(range(256)) * 4000  # ~1 MB: several chunks on the wire


def sha(b):
    return hashlib.sha256(b).hexdigest()


@pytest.fixture
def server():
    with ArtifactServer({"report.txt": REPORT, "out/deep/blob.bin": BLOB, "empty": b""}) as s:
        yield s


def run_on(server, **kw):
    return RunInfo(name="t", namespace="default", uid="u-1", runtime="bash", mode="task", phase="Succeeded",
                   endpoint=server.url + ARTIFACTS, **kw)


@pytest.fixture
def gw(server):
    with Client(gateway=server.url, token="secret-t") as c:
        yield c


def test_the_list_is_parsed_into_refs_and_sent_with_the_token(server, gw):
    refs = gw.artifacts.list(run_on(server))
    assert refs == [
        ArtifactRef("empty", "file:///store/empty", 0, sha(b"")),
        ArtifactRef("out/deep/blob.bin", "file:///store/out/deep/blob.bin", len(BLOB), sha(BLOB)),
        ArtifactRef("report.txt", "file:///store/report.txt", 15, sha(REPORT)),
    ]
    path, headers = server.seen[-1]
    assert path == ARTIFACTS and headers["authorization"] == "Bearer secret-t"
    assert "range" not in headers


def test_a_list_with_no_artifacts_or_odd_entries_is_an_empty_list():
    c, _ = fake_client(lambda call: ok({"artifacts": []}))
    run = RunInfo(name="t", namespace="default", uid="u-1", runtime="bash", mode="task", phase="Running",
                  endpoint="https://gw" + ARTIFACTS)
    assert c.artifacts.list(run) == []
    c, _ = fake_client(lambda call: ok({}))
    assert c.artifacts.list(run) == []
    c, fake = fake_client(lambda call: ok({"artifacts": [{"name": "a", "uri": "s3://b/k", "size": 3,
                                                          "sha256": "AB" * 32}]}))
    assert c.artifacts.list(run) == [ArtifactRef("a", "s3://b/k", 3, "ab" * 32)]
    assert fake.calls[0].url == "https://gw" + ARTIFACTS


@pytest.mark.parametrize("offset,length,header", [
    (None, None, None),
    (0, None, "bytes=0-"),
    (1000, None, "bytes=1000-"),
    (1000, 1000, "bytes=1000-1999"),
    (None, 10, "bytes=0-9"),
    (-9, None, "bytes=-9"),
])
def test_offsets_and_lengths_are_ranges(offset, length, header):
    assert range_header(offset, length) == header


@pytest.mark.parametrize("offset,length", [(0, 0), (5, -1), (-9, 3), (1.5, None), (True, None), (0, "3")])
def test_ranges_that_mean_nothing_are_refused_before_anything_is_sent(offset, length):
    c, fake = fake_client(lambda call: pytest.fail("sent"))
    with pytest.raises(ValueError):
        c.artifacts.read("https://gw" + ARTIFACTS, "a", offset=offset, length=length)
    assert fake.calls == []


def test_a_read_sends_its_range_and_returns_those_bytes(server, gw):
    run = run_on(server)
    assert gw.artifacts.read(run, "report.txt") == REPORT
    assert "range" not in server.seen[-1][1]
    assert gw.artifacts.read(run, "out/deep/blob.bin", offset=1000, length=1000) == BLOB[1000:2000]
    path, headers = server.seen[-1]
    assert path == ARTIFACTS + "/out/deep/blob.bin" and headers["range"] == "bytes=1000-1999"
    assert gw.artifacts.read(run, "report.txt", offset=-9) == b"artifacts"
    assert server.seen[-1][1]["range"] == "bytes=-9"
    assert gw.artifacts.read(run, "report.txt", offset=6) == b"artifacts"
    # A range past the end is cut to it; a ref names its artifact.
    ref = ArtifactRef("report.txt", "", 15, sha(REPORT))
    assert gw.artifacts.read(run, ref, offset=10, length=100) == b"facts"
    assert gw.artifacts.read(run, "empty") == b""


def test_a_range_at_or_past_the_end_is_range_not_satisfiable(server, gw):
    for name, offset in (("report.txt", 15), ("report.txt", 100), ("empty", 0)):
        with pytest.raises(kruntimes.RangeNotSatisfiableError) as e:
            gw.artifacts.read(run_on(server), name, offset=offset)
        assert (e.value.status, e.value.code, e.value.source) == (416, "RangeNotSatisfiable", "gateway")
        assert e.value.invocation_id == "inv-9" and not isinstance(e.value, kruntimes.UnavailableError)


def test_a_missing_name_is_not_found_and_a_failing_store_is_retryable(server, gw, tmp_path):
    with pytest.raises(kruntimes.NotFoundError) as e:
        gw.artifacts.read(run_on(server), "nope.txt")
    assert (e.value.status, e.value.code) == (404, "NotFound")
    server.unavailable = True
    for call in (lambda: gw.artifacts.list(run_on(server)),
                 lambda: gw.artifacts.read(run_on(server), "report.txt"),
                 lambda: gw.artifacts.download(run_on(server), "report.txt", tmp_path / "never")):
        with pytest.raises(kruntimes.ArtifactStoreUnavailableError) as e:
            call()
        assert isinstance(e.value, kruntimes.UnavailableError)
        assert (e.value.status, e.value.code, e.value.retry_after) == (503, "ArtifactStoreUnavailable", 1.0)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("name", ["", "a b", "../etc/passwd", "a//b", "/abs", "a/./b", "x:y", "résumé.pdf",
                                  "a" * 256, "/".join(["a"] * 33), "a/"])
def test_names_the_gateway_would_refuse_are_refused_before_anything_is_sent(name):
    assert name_problem(name) is not None
    c, fake = fake_client(lambda call: pytest.fail("sent"))
    with pytest.raises(kruntimes.InvalidPathError) as e:
        c.artifacts.read("https://gw" + ARTIFACTS, name)
    assert (e.value.status, e.value.source) == (400, "client")
    assert fake.calls == []


def test_names_of_the_rule_pass_unencoded():
    for name in ("report.txt", "out/deep/blob.bin", "a+b=c@d,e_f-g.h", "/".join(["a"] * 32), "a" * 255):
        assert name_problem(name) is None, name
    c, fake = fake_client(lambda call: (200, {}, b"x"))
    c.artifacts.read("https://gw" + ARTIFACTS, "a+b=c@d,e/x.y")
    assert fake.calls[0].url == "https://gw" + ARTIFACTS + "/a+b=c@d,e/x.y"


def test_a_download_streams_to_the_path_and_checks_the_digest(server, gw, tmp_path):
    dest = tmp_path / "blob.bin"
    gw.artifacts.download(run_on(server), "out/deep/blob.bin", dest)
    assert dest.read_bytes() == BLOB and sha(dest.read_bytes()) == sha(BLOB)
    assert os.listdir(tmp_path) == ["blob.bin"]
    # Made as open(path, "wb") would: the umask's permissions, not a private temporary file's.
    umask = os.umask(0)
    os.umask(umask)
    assert dest.stat().st_mode & 0o777 == 0o666 & ~umask
    # Over an existing file, and the empty artifact.
    gw.artifacts.download(run_on(server), "report.txt", str(dest))
    assert dest.read_bytes() == REPORT
    gw.artifacts.download(run_on(server), "empty", tmp_path / "empty")
    assert (tmp_path / "empty").read_bytes() == b""


def test_a_digest_mismatch_raises_and_leaves_no_file(server, gw, tmp_path):
    server.lie = True
    dest = tmp_path / "report.txt"
    with pytest.raises(kruntimes.ArtifactIntegrityError) as e:
        gw.artifacts.download(run_on(server), "report.txt", dest)
    err = e.value
    assert (err.name, err.actual_sha256, err.expected_sha256) == ("report.txt", sha(REPORT), sha(b"lies"))
    assert (err.expected_size, err.actual_size, err.status, err.source) == (15, 15, 0, "client")
    assert os.listdir(tmp_path) == []
    # A file already there stays as it was.
    dest.write_bytes(b"before")
    with pytest.raises(kruntimes.ArtifactIntegrityError):
        gw.artifacts.download(run_on(server), "report.txt", dest)
    assert dest.read_bytes() == b"before" and os.listdir(tmp_path) == ["report.txt"]
    # A whole read is checked too; a range cannot be.
    with pytest.raises(kruntimes.ArtifactIntegrityError):
        gw.artifacts.read(run_on(server), "report.txt")
    assert gw.artifacts.read(run_on(server), "report.txt", offset=0, length=5) == b"hello"


def test_a_broken_stream_leaves_no_partial_file(server, gw, tmp_path):
    server.break_after = 300_000
    dest = tmp_path / "blob.bin"
    with pytest.raises(kruntimes.NetworkError):
        gw.artifacts.download(run_on(server), "out/deep/blob.bin", dest)
    assert os.listdir(tmp_path) == []
    dest.write_bytes(b"before")
    with pytest.raises(kruntimes.NetworkError):
        gw.artifacts.download(run_on(server), "out/deep/blob.bin", dest)
    assert dest.read_bytes() == b"before" and os.listdir(tmp_path) == ["blob.bin"]
    server.break_after = None
    gw.artifacts.download(run_on(server), "out/deep/blob.bin", dest)
    assert dest.read_bytes() == BLOB


def test_a_missing_artifact_downloads_nothing(server, gw, tmp_path):
    with pytest.raises(kruntimes.NotFoundError):
        gw.artifacts.download(run_on(server), "nope.txt", tmp_path / "nope.txt")
    assert os.listdir(tmp_path) == []


def state_dir(tmp_path, server, uid="u-1", endpoint=True):
    row = {"name": "report", "namespace": "default", "runtime": "bash", "uid": uid, "mode": "task",
           "phase": "Succeeded", "reason": "Completed", "attempt": 1,
           "artifacts": [{"name": "report.txt", "uri": "file:///store/report.txt", "size": 15,
                          "sha256": sha(REPORT)}]}
    if endpoint:
        row["endpoint"] = server.url + f"/v1/namespaces/default/runtimes/bash/runs/{uid}/artifacts"
    (tmp_path / "runs.json").write_text(json.dumps({"runs": [row]}))
    return StateDirRuns(tmp_path, None)


def test_a_run_is_named_by_name_result_info_or_url(server, gw, tmp_path):
    gw._runs = state_dir(tmp_path, server)
    by_name = gw.artifacts.list("report")
    assert [a.name for a in by_name] == ["empty", "out/deep/blob.bin", "report.txt"]
    # The row's refs reach the Run and a task's result.
    info = gw.get_run("report")
    assert info.artifacts == (ArtifactRef("report.txt", "file:///store/report.txt", 15, sha(REPORT)),)
    result = TaskResult.from_run(info)
    assert result.artifacts == info.artifacts
    assert gw.artifacts.read(result, result.artifacts[0]) == REPORT
    assert gw.artifacts.read(server.url + ARTIFACTS + "/", "report.txt") == REPORT
    with pytest.raises(kruntimes.NotFoundError):
        gw.artifacts.list("other")
    with pytest.raises(ValueError):
        gw.artifacts.list(server.url + "/v1/namespaces/default/runtimes/bash/sessions/u-1")
    with pytest.raises(TypeError):
        gw.artifacts.list(42)


def test_a_run_without_an_endpoint_uses_the_clients_gateway(server, gw, tmp_path):
    gw._runs = state_dir(tmp_path, server, endpoint=False)
    assert gw.artifacts.read("report", "report.txt") == REPORT
    gw.gateway = None
    with pytest.raises(kruntimes.NotReadyError):
        gw.artifacts.list("report")


def test_a_result_of_a_run_created_again_is_not_found(server, gw, tmp_path):
    gw._runs = state_dir(tmp_path, server)
    old = TaskResult.from_run(gw.get_run("report"))
    gw._runs = state_dir(tmp_path, server, uid="u-2")
    with pytest.raises(kruntimes.NotFoundError) as e:
        gw.artifacts.list(old)
    assert "created again" in e.value.message


def test_a_cluster_run_is_read_at_its_endpoints_origin_with_its_ca():
    obj = {"metadata": {"name": "report", "namespace": "ci", "uid": "u-7"},
           "spec": {"runtime": "bash", "mode": {"task": {}}},
           "status": {"phase": "Succeeded", "endpoint": {
               "url": "https://gw.example:8443/v1/namespaces/ci/runtimes/bash/runs/u-7/artifacts",
               "caBundle": "LS0tLS1CRUdJTg=="},
               "artifacts": [{"name": "r.txt", "uri": "s3://b/k", "size": 1, "sha256": "00" * 32}]}}

    def answer(call):
        if call.target == "kubernetes":
            return ok(obj)
        return ok({"artifacts": []})

    c, fake = fake_client(answer)
    c._runs = KubernetesRuns()
    assert c.artifacts.list("report", namespace="ci") == []
    assert fake.calls[0].url == "/apis/kruntimes.io/v1alpha1/namespaces/ci/runs/report"
    call = fake.calls[1]
    assert call.url == "https://gw.example:8443/v1/namespaces/ci/runtimes/bash/runs/u-7/artifacts"
    assert call.ca_pem == "-----BEGIN"
    # The refs of the status reach the RunInfo.
    assert RunInfo.from_object(obj).artifacts == (ArtifactRef("r.txt", "s3://b/k", 1, "00" * 32),)


def test_the_async_twin_lists_reads_and_downloads(server, tmp_path):
    async def main():
        async with AsyncClient(gateway=server.url, token="t") as c:
            run = run_on(server)
            assert [a.name for a in await c.artifacts.list(run)] == ["empty", "out/deep/blob.bin", "report.txt"]
            assert await c.artifacts.read(run, "report.txt", offset=-9) == b"artifacts"
            with pytest.raises(kruntimes.RangeNotSatisfiableError):
                await c.artifacts.read(run, "report.txt", offset=15)
            await c.artifacts.download(run, "out/deep/blob.bin", tmp_path / "blob.bin")
            assert (tmp_path / "blob.bin").read_bytes() == BLOB
            server.lie = True
            with pytest.raises(kruntimes.ArtifactIntegrityError):
                await c.artifacts.download(run, "report.txt", tmp_path / "report.txt")
            server.lie, server.break_after = False, 1000
            with pytest.raises(kruntimes.NetworkError):
                await c.artifacts.download(run, "out/deep/blob.bin", tmp_path / "cut.bin")
        assert sorted(os.listdir(tmp_path)) == ["blob.bin"]

    asyncio.run(main())


def test_errors_of_the_routes_map_like_every_other_code():
    c, _ = fake_client(lambda call: error(416, "RangeNotSatisfiable"))
    with pytest.raises(kruntimes.RangeNotSatisfiableError):
        c.artifacts.read("https://gw" + ARTIFACTS, "a", offset=3)
    c, _ = fake_client(lambda call: error(503, "ArtifactStoreUnavailable", retry_after=2))
    with pytest.raises(kruntimes.ArtifactStoreUnavailableError) as e:
        c.artifacts.list("https://gw" + ARTIFACTS)
    assert e.value.retry_after == 2.0
