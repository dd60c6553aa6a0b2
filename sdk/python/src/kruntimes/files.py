"""Files in a sandbox's workspace. Paths are workspace-relative; absolute
paths, ``..`` and symlinks leading outside are refused (``InvalidPathError``).

Mutations (write, make_dir, rename, remove) go through the session's FIFO
queue, after the commands submitted before them; reads, listings and watches
(``watch_dir``, :mod:`kruntimes.watch`) do not wait in it. A mutation that
fails raises :class:`~kruntimes.OperationFailedError`.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any, Dict, List, Optional, Union

from ._wire import GATEWAY, Call, Flow
from .commands import CommandResult, _CommandsBase
from .errors import BadRequestError, NotFoundError, OperationFailedError, PayloadTooLargeError
from .watch import AsyncWatchHandle, WatchHandle, watch_call

if TYPE_CHECKING:
    from .sandbox import AsyncSandbox, Sandbox

#: What can be written: bytes, text (UTF-8) or a binary file object.
Content = Union[bytes, str, IO[bytes]]
#: The largest page the API serves.
MAX_PAGE = 1000
#: Largest file a session writes or reads (32 MiB): a larger one is refused before it is sent.
MAX_FILE_BYTES = 32 * 1024 * 1024


@dataclass(frozen=True)
class EntryInfo:
    """One directory entry."""

    name: str
    #: ``file``, ``directory``, ``symlink`` or ``other``.
    type: str
    size: int
    #: Workspace-relative path (the listed directory joined with ``name``).
    path: str

    @property
    def is_dir(self) -> bool:
        return self.type == "directory"


@dataclass(frozen=True)
class FilePage:
    """One page of a listing; ``next_page_token`` is None on the last."""

    entries: List[EntryInfo]
    next_page_token: Optional[str]


def _bytes(data: Content) -> bytes:
    if isinstance(data, bytes):
        return data
    if isinstance(data, str):
        return data.encode()
    return data.read()


def _join(directory: str, name: str) -> str:
    d = directory.strip("/")
    return f"{d}/{name}" if d and d != "." else name


class _FilesBase(_CommandsBase):
    def _mutate(self, body: Dict[str, Any]) -> Flow[CommandResult]:
        result = yield from self._execute(body)
        if not result.ok:
            raise OperationFailedError(f"{next(iter(body))}: {result.error or result.state}", result=result)
        return result

    def _write(self, path: str, data: Content) -> Flow[CommandResult]:
        content = _bytes(data)
        if len(content) > MAX_FILE_BYTES:
            raise PayloadTooLargeError(f"{path}: the file is {len(content)} bytes: a session file is at most "
                                       f"32 MiB ({MAX_FILE_BYTES} bytes)")
        encoded = base64.b64encode(content).decode()
        return self._mutate({"writeFile": {"path": path, "contentBase64": encoded}})

    def _read(self, path: str) -> Flow[bytes]:
        sb = self._sandbox
        reply = yield Call(GATEWAY, "GET", f"{sb.endpoint}/files:content", params={"path": path},
                           ca_pem=sb._ca_pem, timeout=None)
        assert reply is not None
        return reply.body

    def _page(self, path: str, limit: Optional[int], page_token: Optional[str]) -> Flow[FilePage]:
        params: Dict[str, Union[str, int]] = {"path": path}
        if limit is not None:
            params["limit"] = limit
        if page_token:
            params["pageToken"] = page_token
        sb = self._sandbox
        reply = yield Call(GATEWAY, "GET", f"{sb.endpoint}/files", params=params, ca_pem=sb._ca_pem)
        assert reply is not None
        doc = reply.json()
        entries = [EntryInfo(str(e["name"]), str(e["type"]), int(e.get("size") or 0), _join(path, str(e["name"])))
                   for e in doc.get("entries") or []]
        return FilePage(entries, doc.get("nextPageToken") or None)

    def _list(self, path: str, page_size: int) -> Flow[List[EntryInfo]]:
        out: List[EntryInfo] = []
        token: Optional[str] = None
        while True:
            page = yield from self._page(path, page_size, token)
            out.extend(page.entries)
            token = page.next_page_token
            if token is None:
                return out

    def _exists(self, path: str) -> Flow[bool]:
        parts = [p for p in path.split("/") if p not in ("", ".")]
        if not parts:
            return True
        parent, name = "/".join(parts[:-1]), parts[-1]
        token: Optional[str] = None
        while True:
            try:
                page = yield from self._page(parent, MAX_PAGE, token)
            except NotFoundError:
                return False
            except BadRequestError:
                return False  # the parent is not a directory
            for e in page.entries:
                if e.name == name:
                    return True
                # Names come in UTF-8 byte order: past it, it is not there.
                if e.name.encode() > name.encode():
                    return False
            token = page.next_page_token
            if token is None:
                return False


class Files(_FilesBase):
    """``sandbox.files`` of a :class:`~kruntimes.Sandbox`."""

    _sandbox: "Sandbox"

    def write(self, path: str, data: Content) -> None:
        """Writes (replaces) a file of at most 32 MiB."""
        self._sandbox._client._drive(self._write(path, data))

    def read(self, path: str) -> bytes:
        """A file's content (at most 32 MiB)."""
        return self._sandbox._client._drive(self._read(path))

    def read_text(self, path: str, encoding: str = "utf-8") -> str:
        return self.read(path).decode(encoding)

    def list(self, path: str = "", *, page_size: int = MAX_PAGE) -> List[EntryInfo]:
        """Every entry of a directory, in UTF-8 byte order of the names, paging through it."""
        return self._sandbox._client._drive(self._list(path, page_size))

    def list_page(self, path: str = "", *, limit: Optional[int] = None,
                  page_token: Optional[str] = None) -> FilePage:
        """One page of a directory (``limit`` 1–1000, default 100)."""
        return self._sandbox._client._drive(self._page(path, limit, page_token))

    def exists(self, path: str) -> bool:
        return self._sandbox._client._drive(self._exists(path))

    def make_dir(self, path: str) -> None:
        """Creates a directory and its missing parents."""
        self._sandbox._client._drive(self._mutate({"mkdir": {"path": path}}))

    def rename(self, src: str, dst: str) -> None:
        self._sandbox._client._drive(self._mutate({"rename": {"from": src, "to": dst}}))

    def remove(self, path: str) -> None:
        """Removes a file, a symlink (not its target) or a directory tree."""
        self._sandbox._client._drive(self._mutate({"delete": {"path": path}}))

    def watch_dir(self, path: str, recursive: bool = False) -> WatchHandle:
        """Watches what changes beneath a directory (``""``: the workspace; ``recursive``: its
        subdirectories too, those made later included). Returns once the session reports the
        watch ready, so every change after this call returns is reported: a
        :class:`~kruntimes.WatchHandle` (``get_new_events()``, iteration, ``lost``, ``stop()``).

        :class:`~kruntimes.NotFoundError` for a directory that does not exist,
        :class:`~kruntimes.ConflictError` for a file, :class:`~kruntimes.InvalidPathError` for a
        path that leaves the workspace, :class:`~kruntimes.BusyError` past 16 watches in the
        session (or a tree larger than the kernel watches)."""
        sb = self._sandbox
        return WatchHandle._open(sb._client._transport.abortable, watch_call(sb, path, recursive), path, recursive)


class AsyncFiles(_FilesBase):
    """``sandbox.files`` of an :class:`~kruntimes.AsyncSandbox`; the methods of :class:`Files`."""

    _sandbox: "AsyncSandbox"

    async def write(self, path: str, data: Content) -> None:
        await self._sandbox._client._drive(self._write(path, data))

    async def read(self, path: str) -> bytes:
        return await self._sandbox._client._drive(self._read(path))

    async def read_text(self, path: str, encoding: str = "utf-8") -> str:
        return (await self.read(path)).decode(encoding)

    async def list(self, path: str = "", *, page_size: int = MAX_PAGE) -> List[EntryInfo]:
        return await self._sandbox._client._drive(self._list(path, page_size))

    async def list_page(self, path: str = "", *, limit: Optional[int] = None,
                        page_token: Optional[str] = None) -> FilePage:
        return await self._sandbox._client._drive(self._page(path, limit, page_token))

    async def exists(self, path: str) -> bool:
        return await self._sandbox._client._drive(self._exists(path))

    async def make_dir(self, path: str) -> None:
        await self._sandbox._client._drive(self._mutate({"mkdir": {"path": path}}))

    async def rename(self, src: str, dst: str) -> None:
        await self._sandbox._client._drive(self._mutate({"rename": {"from": src, "to": dst}}))

    async def remove(self, path: str) -> None:
        await self._sandbox._client._drive(self._mutate({"delete": {"path": path}}))

    async def watch_dir(self, path: str, recursive: bool = False) -> AsyncWatchHandle:
        """:meth:`Files.watch_dir`: an :class:`~kruntimes.AsyncWatchHandle`, read by a task."""
        sb = self._sandbox
        return await AsyncWatchHandle._open(sb._client._transport.stream, watch_call(sb, path, recursive), path,
                                            recursive)
