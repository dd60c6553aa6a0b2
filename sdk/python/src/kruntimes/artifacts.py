"""Artifacts: the files a task Run left in ``$KRUNTIME_ARTIFACTS_DIR``, read back through the
gateway (``GET …/runs/{uid}/artifacts[/{name}]``, ``docs/artifacts.md``) with the client's own
token: no store credentials on this side.

``client.artifacts`` lists a Run's artifacts, reads one (whole or a byte range) and downloads
one to a file, streamed into a temporary file beside it and renamed into place only once whole
and checked against the SHA-256 the gateway announces. A Run is named by its name (looked up in
the client's namespace, or ``namespace``), by the :class:`~kruntimes.TaskResult` or
:class:`~kruntimes.RunInfo` the client handed out, or by its artifacts URL
(``status.endpoint.url`` of a task Run) for a client of the gateway alone.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from pathlib import Path
from typing import TYPE_CHECKING, AsyncIterator, Iterator, List, Mapping, Optional, Tuple, Union
from urllib.parse import urlsplit

from ._runs import ArtifactRef, RunInfo
from ._wire import GATEWAY, Call, Flow
from .errors import ArtifactIntegrityError, InvalidPathError, NotFoundError, NotReadyError
from .tasks import TaskResult

if TYPE_CHECKING:
    from .client import AsyncClient, Client

__all__ = ["ArtifactRef", "Artifacts", "AsyncArtifacts", "RunRef"]

#: A Run: its name, what the client returned for it, or its artifacts URL.
RunRef = Union[str, RunInfo, TaskResult]
#: An artifact: its name, or its ref.
NameRef = Union[str, ArtifactRef]

#: How long a read or download waits for the next bytes (seconds) unless told otherwise.
DEFAULT_READ_TIMEOUT = 300.0

# The gateway's rule for names (proto/src/api/path.rs, artifact_name).
_MAX_NAME_BYTES = 512
_MAX_SEGMENT_BYTES = 255
_MAX_DEPTH = 32
_NAME_CHARS = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-+=@,")


def name_problem(name: str) -> Optional[str]:
    """Why ``name`` cannot be an artifact's name, or None: 1–512 bytes, at most 32 ``/``-separated
    segments of 1–255 ASCII letters, digits and ``. _ - + = @ ,``, none ``.`` or ``..``."""
    raw = name.encode("utf-8", "replace")
    if not raw:
        return "the name is empty"
    if len(raw) > _MAX_NAME_BYTES:
        return f"the name is longer than {_MAX_NAME_BYTES} bytes"
    segments = raw.split(b"/")
    for seg in segments:
        if not seg:
            return "the name has an empty segment (a leading, trailing or double '/')"
        if seg in (b".", b".."):
            return "the name has a '.' or '..' segment"
        if len(seg) > _MAX_SEGMENT_BYTES:
            return f"a segment of the name is longer than {_MAX_SEGMENT_BYTES} bytes"
        if not all(c in _NAME_CHARS for c in seg):
            return "the name has a character other than ASCII letters, digits and '. _ - + = @ ,'"
    if len(segments) > _MAX_DEPTH:
        return f"the name is more than {_MAX_DEPTH} levels deep"
    return None


def _name(name: NameRef) -> str:
    n = name.name if isinstance(name, ArtifactRef) else name
    if not isinstance(n, str):
        raise TypeError(f"an artifact is named by a str or an ArtifactRef, not {type(n).__name__}")
    why = name_problem(n)
    if why is not None:
        # What the gateway would answer (400 InvalidPath), before anything is sent.
        raise InvalidPathError(f"{n!r} cannot be an artifact name: {why}", status=400, source="client")
    return n


def range_header(offset: Optional[int], length: Optional[int]) -> Optional[str]:
    """The ``Range`` of a read: None for the whole artifact; ``offset`` (from 0, or from the end
    when negative: ``-9`` is the last 9 bytes) and ``length`` (at least 1; None: to the end)."""
    if offset is None and length is None:
        return None
    if length is not None and (isinstance(length, bool) or not isinstance(length, int) or length < 1):
        raise ValueError(f"length is a number of bytes, at least 1 (got {length!r})")
    if offset is not None and (isinstance(offset, bool) or not isinstance(offset, int)):
        raise ValueError(f"offset is a byte position (got {offset!r})")
    if offset is not None and offset < 0:
        if length is not None:
            raise ValueError("a negative offset reads the last -offset bytes: it takes no length")
        return f"bytes={offset}"
    start = offset or 0
    return f"bytes={start}-" if length is None else f"bytes={start}-{start + length - 1}"


class _Target:
    """Where a Run's artifacts are read: ``…/runs/{uid}/artifacts``, and the CA it chains to."""

    def __init__(self, url: str, ca_pem: Optional[str], what: str) -> None:
        self.url = url
        self.ca_pem = ca_pem
        #: The Run, for messages.
        self.what = what

    def call(self, name: Optional[str] = None, headers: Optional[Mapping[str, str]] = None,
             timeout: Optional[float] = 30.0) -> Call:
        url = self.url if name is None else f"{self.url}/{name}"
        return Call(GATEWAY, "GET", url, headers=dict(headers or {}), ca_pem=self.ca_pem, timeout=timeout)


def _origin(url: str) -> str:
    u = urlsplit(url)
    return f"{u.scheme}://{u.netloc}"


def _header_size(headers: Mapping[str, str]) -> Optional[int]:
    try:
        return int(headers["x-kruntimes-artifact-size"])
    except (KeyError, ValueError):
        return None


def _header_sha256(headers: Mapping[str, str]) -> str:
    """The SHA-256 the gateway announces (``X-Kruntimes-Artifact-Sha256``, else the ``ETag``)."""
    digest = headers.get("x-kruntimes-artifact-sha256") or headers.get("etag", "").strip().strip('"')
    return digest.lower()


class _Check:
    """Hashes the bytes of a whole artifact as they pass and compares them with its headers."""

    def __init__(self, name: str, headers: Mapping[str, str]) -> None:
        self.name = name
        self.expected_sha256 = _header_sha256(headers)
        self.expected_size = _header_size(headers)
        self._hash = hashlib.sha256()
        self.size = 0

    def update(self, chunk: bytes) -> None:
        self._hash.update(chunk)
        self.size += len(chunk)

    def verify(self) -> None:
        actual = self._hash.hexdigest()
        bad_size = self.expected_size is not None and self.size != self.expected_size
        bad_sha = bool(self.expected_sha256) and actual != self.expected_sha256
        if bad_size or bad_sha:
            raise ArtifactIntegrityError(
                f"artifact {self.name!r}: received {self.size} bytes with SHA-256 {actual}, the gateway announced "
                f"{self.expected_size if self.expected_size is not None else '?'} bytes with SHA-256 "
                f"{self.expected_sha256 or '?'}",
                name=self.name, expected_sha256=self.expected_sha256, actual_sha256=actual,
                expected_size=self.expected_size, actual_size=self.size)


class _Partial:
    """A download in progress: a new file beside ``path`` (``.NAME.RANDOM.part``, created as
    ``open(path, "wb")`` would, so with the usual permissions), renamed over ``path`` only once
    whole and checked; removed on any failure."""

    def __init__(self, path: Union[str, "os.PathLike[str]"], name: str, headers: Mapping[str, str]) -> None:
        self.path = Path(path)
        self.check = _Check(name, headers)
        parent = self.path.parent
        while True:
            self.tmp = parent / f".{self.path.name}.{secrets.token_hex(6)}.part"
            try:
                fd = os.open(self.tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
            except FileExistsError:
                continue
            break
        self.file = os.fdopen(fd, "wb")

    def write(self, chunk: bytes) -> None:
        self.check.update(chunk)
        self.file.write(chunk)

    def commit(self) -> None:
        self.check.verify()
        self.file.flush()
        os.fsync(self.file.fileno())
        self.file.close()
        os.replace(self.tmp, self.path)

    def abort(self) -> None:
        self.file.close()
        try:
            self.tmp.unlink()
        except FileNotFoundError:
            pass


class _ArtifactsBase:
    _client: "Union[Client, AsyncClient]"

    def __init__(self, client: "Union[Client, AsyncClient]") -> None:
        self._client = client

    def _target(self, run: RunRef, namespace: Optional[str]) -> Flow[_Target]:
        if isinstance(run, str) and "://" in run:
            url = run.rstrip("/")
            if not urlsplit(url).path.endswith("/artifacts"):
                raise ValueError(f"{run!r} is not an artifacts URL (…/runs/{{uid}}/artifacts, a task Run's "
                                 "status.endpoint.url)")
            return _Target(url, None, url)
        if isinstance(run, RunInfo):
            info = run
        elif isinstance(run, (str, TaskResult)):
            name = run if isinstance(run, str) else run.name
            ns = (run.namespace if isinstance(run, TaskResult) else None) or namespace or self._client.namespace
            found = yield from self._client._get_run(name, ns)
            if found is None:
                raise NotFoundError(f"no run {ns}/{name}", source=self._client._store().source)
            if isinstance(run, TaskResult) and run.uid and found.uid != run.uid:
                raise NotFoundError(f"run {ns}/{name} was deleted and created again (uid {found.uid}, not "
                                    f"{run.uid}): its artifacts are gone", source=self._client._store().source)
            info = found
        else:
            raise TypeError(f"a Run is named by its name, a TaskResult, a RunInfo or its artifacts URL, "
                            f"not {type(run).__name__}")
        what = f"run {info.namespace}/{info.name}"
        base = _origin(info.endpoint) if info.endpoint else self._client.gateway
        if not base or not info.uid or not info.runtime:
            raise NotReadyError(f"{what} has no endpoint yet (phase {info.phase})", source="client",
                                phase=info.phase, reason=info.reason)
        url = f"{base}/v1/namespaces/{info.namespace}/runtimes/{info.runtime}/runs/{info.uid}/artifacts"
        return _Target(url, info.ca_pem, what)

    def _list(self, run: RunRef, namespace: Optional[str]) -> Flow[List[ArtifactRef]]:
        target = yield from self._target(run, namespace)
        reply = yield target.call()
        assert reply is not None
        doc = reply.json()
        refs = doc.get("artifacts") if isinstance(doc, dict) else None
        return list(ArtifactRef.list_from_json(refs or []))

    def _read(self, run: RunRef, name: NameRef, namespace: Optional[str], offset: Optional[int],
              length: Optional[int], timeout: Optional[float]) -> Flow[bytes]:
        n = _name(name)
        spec = range_header(offset, length)
        target = yield from self._target(run, namespace)
        reply = yield target.call(n, {"Range": spec} if spec else None, timeout)
        assert reply is not None
        if reply.status == 206:
            return reply.body
        # The whole artifact: checked against what the gateway announces, then (had a server
        # ignored the Range) cut as asked.
        check = _Check(n, reply.headers)
        check.update(reply.body)
        check.verify()
        if spec is None:
            return reply.body
        if offset is not None and offset < 0:
            return reply.body[offset:]
        start = offset or 0
        return reply.body[start:] if length is None else reply.body[start:start + length]

    def _download_call(self, run: RunRef, name: NameRef, namespace: Optional[str],
                       timeout: Optional[float]) -> Flow[Tuple[str, Call]]:
        n = _name(name)
        target = yield from self._target(run, namespace)
        return n, target.call(n, None, timeout)


class Artifacts(_ArtifactsBase):
    """A Run's artifacts, through a :class:`~kruntimes.Client` (``client.artifacts``)."""

    _client: "Client"

    def list(self, run: RunRef, *, namespace: Optional[str] = None) -> List[ArtifactRef]:
        """Every artifact of the Run (not only the 100 ``status.artifacts`` lists), in name order;
        ``[]`` before its export, after a failed one, or for a Run that exported nothing.
        :class:`~kruntimes.NotFoundError` for no such Run (or a Runtime without an artifact store)."""
        return self._client._drive(self._list(run, namespace))

    def read(self, run: RunRef, name: NameRef, *, namespace: Optional[str] = None, offset: Optional[int] = None,
             length: Optional[int] = None, timeout: Optional[float] = DEFAULT_READ_TIMEOUT) -> bytes:
        """An artifact's content, in memory: whole (checked against its SHA-256), or ``length`` bytes
        from ``offset`` (a ``Range``; to the end without ``length``; a negative ``offset`` reads
        the last ``-offset`` bytes). A range past the end is cut to it; one starting at or past
        it raises :class:`~kruntimes.RangeNotSatisfiableError`. :class:`~kruntimes.NotFoundError`
        for a name the Run does not have (the message names it); ``timeout`` is the longest wait
        for the next bytes. Use :meth:`download` for large files."""
        return self._client._drive(self._read(run, name, namespace, offset, length, timeout))

    def download(self, run: RunRef, name: NameRef, path: Union[str, "os.PathLike[str]"], *,
                 namespace: Optional[str] = None, timeout: Optional[float] = DEFAULT_READ_TIMEOUT) -> None:
        """Streams an artifact into ``path``: into a new file beside it, renamed over ``path`` once
        whole and its SHA-256 and size match what the gateway announces. A broken connection
        (:class:`~kruntimes.NetworkError`) or a mismatch (:class:`~kruntimes.ArtifactIntegrityError`)
        leaves no partial file, and ``path`` as it was."""
        n, call = self._client._drive(self._download_call(run, name, namespace, timeout))
        with self._client._transport.stream(call) as (_, headers, chunks):
            _save(path, n, headers, chunks)


def _save(path: Union[str, "os.PathLike[str]"], name: str, headers: Mapping[str, str], chunks: Iterator[bytes]) -> None:
    part = _Partial(path, name, headers)
    try:
        for chunk in chunks:
            part.write(chunk)
        part.commit()
    except BaseException:
        part.abort()
        raise


async def _save_async(path: Union[str, "os.PathLike[str]"], name: str, headers: Mapping[str, str],
                      chunks: AsyncIterator[bytes]) -> None:
    # The writes go to a local file as chunks arrive, as any asyncio download does.
    part = _Partial(path, name, headers)
    try:
        async for chunk in chunks:
            part.write(chunk)
        part.commit()
    except BaseException:
        part.abort()
        raise


class AsyncArtifacts(_ArtifactsBase):
    """:class:`Artifacts` of an :class:`~kruntimes.AsyncClient`."""

    _client: "AsyncClient"

    async def list(self, run: RunRef, *, namespace: Optional[str] = None) -> List[ArtifactRef]:
        """:meth:`Artifacts.list`."""
        return await self._client._drive(self._list(run, namespace))

    async def read(self, run: RunRef, name: NameRef, *, namespace: Optional[str] = None,
                   offset: Optional[int] = None, length: Optional[int] = None,
                   timeout: Optional[float] = DEFAULT_READ_TIMEOUT) -> bytes:
        """:meth:`Artifacts.read`."""
        return await self._client._drive(self._read(run, name, namespace, offset, length, timeout))

    async def download(self, run: RunRef, name: NameRef, path: Union[str, "os.PathLike[str]"], *,
                       namespace: Optional[str] = None, timeout: Optional[float] = DEFAULT_READ_TIMEOUT) -> None:
        """:meth:`Artifacts.download`."""
        n, call = await self._client._drive(self._download_call(run, name, namespace, timeout))
        async with self._client._transport.stream(call) as (_, headers, chunks):
            await _save_async(path, n, headers, chunks)
