"""Layers written from packages' data archives and from files the builder makes: an
in-memory tree, written as a sorted, reproducible tar and gzipped."""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import re
import subprocess
import sys
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

from .common import run
from .debian import Deb

# The merged-/usr layout of Debian 12: these top-level directories are links into /usr.
USR_MERGED = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
# What debian:bookworm-slim leaves out of every package (its dpkg path-exclude list):
# documentation but the copyright files, manuals, info pages, translations.
EXCLUDED = re.compile(
    r"^usr/share/(man|info|groff|linda|lintian|locale)(/|$)|^usr/share/doc/(?!(?:[^/]+/copyright)$)."
)


@dataclass
class Entry:
    """One path of a layer. `data` for regular files, `link` for symlinks and hard links."""

    kind: bytes  # a tarfile type: REGTYPE, DIRTYPE, SYMTYPE, LNKTYPE
    mode: int
    uid: int = 0
    gid: int = 0
    data: bytes = b""
    link: str = ""
    origin: str = ""
    mtime: int | None = None  # None: the layer's own time

    def same(self, other: "Entry") -> bool:
        """Whether both entries give the same file."""
        return (self.kind, self.mode, self.uid, self.gid, self.data, self.link) == (
            other.kind, other.mode, other.uid, other.gid, other.data, other.link)


def usr_merged(path: str) -> str:
    """`path` (relative, no `./`) in the merged-/usr layout: bin/x → usr/bin/x."""
    top, _, rest = path.partition("/")
    if top in USR_MERGED:
        return f"usr/{top}/{rest}".rstrip("/") if rest else f"usr/{top}"
    return path


@dataclass
class Layer:
    """A layer's tree, built in memory and written as one sorted tar."""

    entries: dict[str, Entry] = field(default_factory=dict)

    def add(self, path: str, e: Entry) -> None:
        """Adds `e` at `path`; a second, different entry for a path is an error."""
        path = path.strip("/")
        if not path:
            return
        old = self.entries.get(path)
        if old is None:
            self.entries[path] = e
        elif old.kind == tarfile.DIRTYPE and e.kind == tarfile.DIRTYPE:
            pass  # Directories shared by packages: the first one's mode stands.
        elif not old.same(e):
            raise SystemExit(f"images: {path}: shipped differently by {old.origin} and {e.origin}")

    def dir(self, path: str, mode: int = 0o755, uid: int = 0, gid: int = 0) -> None:
        """A directory."""
        self.add(path, Entry(tarfile.DIRTYPE, mode, uid, gid, origin="build.py"))

    def file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        """A regular file."""
        self.add(path, Entry(tarfile.REGTYPE, mode, data=data, origin="build.py"))

    def symlink(self, path: str, target: str) -> None:
        """A symbolic link."""
        self.add(path, Entry(tarfile.SYMTYPE, 0o777, link=target, origin="build.py"))

    def add_deb(self, deb: Deb, path: Path) -> None:
        """The package's files (what `dpkg-deb -x` would unpack), moved into the merged-/usr
        layout, without the excluded documentation, without setuid or setgid bits; and its
        control file under var/lib/dpkg/status.d/, where image scanners look for packages."""
        tar_stream = subprocess.Popen(["dpkg-deb", "--fsys-tarfile", str(path)],
                                      stdout=subprocess.PIPE)
        assert tar_stream.stdout is not None
        with tarfile.open(fileobj=tar_stream.stdout, mode="r|") as tf:
            for m in tf:
                name = usr_merged(m.name.removeprefix("./").strip("/"))
                if name in ("", ".") or EXCLUDED.search(name):
                    continue
                mode = m.mode & 0o1777 if m.isdir() else m.mode & 0o777
                e = Entry(m.type, mode, m.uid, m.gid, origin=deb.name, mtime=int(m.mtime))
                if m.isreg():
                    e.kind = tarfile.REGTYPE
                    f = tf.extractfile(m)
                    e.data = f.read() if f else b""
                elif m.issym():
                    e.link = m.linkname
                elif m.islnk():
                    e.link = usr_merged(m.linkname.removeprefix("./").strip("/"))
                elif not m.isdir():
                    raise SystemExit(f"images: {deb.name}: {m.name}: unsupported entry type")
                self.add(name, e)
        if tar_stream.wait() != 0:
            raise SystemExit(f"images: dpkg-deb --fsys-tarfile {path} failed")
        control = run(["dpkg-deb", "-f", str(path)]).stdout
        self.file(f"var/lib/dpkg/status.d/{deb.name}", control)

    def compile_python(self, epoch: int) -> int:
        """Byte-compiles the Python modules under usr/lib/python3*, as the packages'
        postinst (py3compile) would: the root filesystem is read-only at run time, and an
        interpreter that compiles its standard library at every start takes ~0.5 s instead
        of ~0.15 s. Done by this interpreter, which must be the image's minor version (the
        same bytecode); timestamp pycs, carrying each source's mtime as the layer keeps it."""
        from importlib._bootstrap_external import _code_to_timestamp_pyc  # type: ignore
        import importlib.util
        tag = sys.implementation.cache_tag  # cpython-311
        n = 0
        for path, e in sorted(self.entries.items()):
            if not (path.startswith(f"usr/lib/python{sys.version_info[0]}.{sys.version_info[1]}/")
                    or path.startswith("usr/lib/python3/dist-packages/")):
                continue
            if e.kind != tarfile.REGTYPE or not path.endswith(".py"):
                continue
            try:
                code = compile(e.data, "/" + path, "exec", dont_inherit=True, optimize=0)
            except (SyntaxError, ValueError):
                continue  # test data that is not Python; py3compile skips it too
            head, base = os.path.split(path)
            pyc = f"{head}/__pycache__/{base[:-3]}.{tag}.pyc"
            mtime = e.mtime if e.mtime is not None else epoch
            data = bytes(_code_to_timestamp_pyc(code, mtime, len(e.data)))
            assert data[:4] == importlib.util.MAGIC_NUMBER
            self.add(pyc, Entry(tarfile.REGTYPE, 0o644, data=data, origin="build.py (pyc)",
                                mtime=mtime))
            n += 1
        return n

    def tar(self, epoch: int) -> bytes:
        """The layer as an uncompressed tar: parents before children, entries sorted,
        packages' files with their own mtimes and the rest with `epoch`, owners numeric;
        hard links point at the first path of their group in that order (a tar reader needs
        the target first)."""
        entries = dict(self.entries)
        for path in list(entries):
            parent = os.path.dirname(path)
            while parent and parent not in entries:
                entries[parent] = Entry(tarfile.DIRTYPE, 0o755, origin="build.py")
                parent = os.path.dirname(parent)
        groups: dict[str, list[str]] = {}
        for path, e in entries.items():
            if e.kind == tarfile.LNKTYPE:
                target = entries.get(e.link)
                if target is None or target.kind != tarfile.REGTYPE:
                    raise SystemExit(f"images: {path}: hard link to missing {e.link}")
                groups.setdefault(e.link, [e.link]).append(path)
        for members in groups.values():
            members.sort()
            first = members[0]
            source = entries[members[0] if entries[members[0]].kind == tarfile.REGTYPE
                             else next(p for p in members if entries[p].kind == tarfile.REGTYPE)]
            entries[first] = Entry(tarfile.REGTYPE, source.mode, source.uid, source.gid,
                                   source.data, origin=source.origin, mtime=source.mtime)
            for p in members[1:]:
                entries[p] = Entry(tarfile.LNKTYPE, source.mode, source.uid, source.gid,
                                   link=first, origin=source.origin, mtime=source.mtime)
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
            for path in sorted(entries):
                e = entries[path]
                ti = tarfile.TarInfo(path + ("/" if e.kind == tarfile.DIRTYPE else ""))
                ti.type, ti.mode, ti.uid, ti.gid = e.kind, e.mode, e.uid, e.gid
                ti.mtime = e.mtime if e.mtime is not None else epoch
                ti.uname, ti.gname = "", ""
                if e.kind in (tarfile.SYMTYPE, tarfile.LNKTYPE):
                    ti.linkname = e.link
                if e.kind == tarfile.REGTYPE:
                    ti.size = len(e.data)
                    tf.addfile(ti, io.BytesIO(e.data))
                else:
                    tf.addfile(ti)
        return buf.getvalue()


@dataclass
class Blob:
    """A compressed layer: its digest, its uncompressed digest (diff id), its bytes."""

    digest: str
    diff_id: str
    data: bytes
    comment: str
    raw_size: int


def compress(tar: bytes, comment: str) -> Blob:
    """gzip without a name or timestamp (the same bytes for the same tar)."""
    data = gzip.compress(tar, compresslevel=6, mtime=0)
    return Blob("sha256:" + hashlib.sha256(data).hexdigest(),
                "sha256:" + hashlib.sha256(tar).hexdigest(), data, comment, len(tar))
