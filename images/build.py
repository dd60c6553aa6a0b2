#!/usr/bin/env python3
"""Builds the kruntimes container images as OCI image archives, without a container engine.

Each image is the Depends closure of a few Debian packages (fetched with the host's apt
client into a private apt state, never installed on the host, cached by version under
~/.cache/kruntimes/debs/), its /etc/passwd and /etc/group, and one binary of the workspace
(built with cargo) or, for `pause`, a static C program. The layers are written straight from
the packages' data archives: sorted entries, the packages' own mtimes (what the builder
adds: the newest of them in a package layer, SOURCE_DATE_EPOCH — default the commit time of
HEAD — in the binary's layer and the config), owners numeric, gzip without a timestamp, so the
same binaries and package versions always give the same archive, byte for byte, and the
package layers stay the same from one commit to the next. Nothing is pulled: there is no base
image.

Usage (from anywhere; see docs/images.md):
  python3 images/build.py build [--only NAME,…] [--profile release|dev] [--tag T] …
  python3 images/build.py inspect ARCHIVE    # the reference, config and layers, as JSON
  python3 images/build.py unpack ARCHIVE DIR  # the root filesystem (as root: owners kept)
  python3 images/build.py lint                # the Dockerfiles agree with images.toml
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import time
import tomllib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CACHE = Path(os.environ.get("KRUNTIMES_CACHE", Path.home() / ".cache" / "kruntimes"))
# The merged-/usr layout of Debian 12: these top-level directories are links into /usr.
USR_MERGED = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
# What debian:bookworm-slim leaves out of every package (its dpkg path-exclude list):
# documentation but the copyright files, manuals, info pages, translations.
EXCLUDED = re.compile(
    r"^usr/share/(man|info|groff|linda|lintian|locale)(/|$)|^usr/share/doc/(?!(?:[^/]+/copyright)$)."
)
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
LISTS_MAX_AGE = 24 * 3600


def log(msg: str) -> None:
    print(f"images: {msg}", file=sys.stderr, flush=True)


def run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    """Runs `cmd`, failing with its stderr."""
    p = subprocess.run(cmd, capture_output=True, **kw)
    if p.returncode != 0:
        err = p.stderr.decode(errors="replace") if isinstance(p.stderr, bytes) else p.stderr
        raise SystemExit(f"images: {' '.join(cmd[:4])} …: exit {p.returncode}\n{err}")
    return p


# ---------------------------------------------------------------------------------------------
# Debian packages through a private apt state


@dataclass(frozen=True)
class Deb:
    """One package at an exact version."""

    name: str
    version: str
    arch: str

    @property
    def filename(self) -> str:
        # apt-get download's own name for the file.
        return f"{self.name}_{self.version.replace(':', '%3a')}_{self.arch}.deb"


class Apt:
    """The host's apt client over a private state: its own package lists and an empty dpkg
    status (nothing counts as installed, no package as Essential), so resolving and
    downloading never reads or changes what the host has installed."""

    def __init__(self, root: Path, debs: Path):
        self.root = root
        self.debs = debs
        for d in (root / "lists" / "partial", root / "cache" / "archives" / "partial",
                  debs / "partial"):
            d.mkdir(parents=True, exist_ok=True)
        status = root / "status"
        if not status.exists():
            status.write_text("")
        self.opts = [
            "-o", f"Dir::State::status={status}",
            "-o", f"Dir::State::Lists={root / 'lists'}",
            "-o", f"Dir::Cache={root / 'cache'}",
            # Kept (Debian's container images turn these caches off): a resolve then reads the
            # lists once, not at every call.
            "-o", "Dir::Cache::pkgcache=pkgcache.bin",
            "-o", "Dir::Cache::srcpkgcache=srcpkgcache.bin",
            "-o", "Debug::NoLocking=1",
            "-o", "APT::Sandbox::User=root",
            "-o", "APT::Install-Recommends=false",
            "-o", "APT::Install-Suggests=false",
            "-o", "pkgCacheGen::Essential=none",
            "-q",
        ]
        self._resolved: dict[tuple[str, ...], list[Deb]] = {}

    def update(self, force: bool) -> None:
        """Refreshes the private lists when missing, older than a day, or `force`."""
        stamp = self.root / "lists.stamp"
        have = any((self.root / "lists").glob("*_Packages*"))
        if have and not force and stamp.exists() and time.time() - stamp.stat().st_mtime < LISTS_MAX_AGE:
            return
        log("apt-get update (private lists)")
        p = subprocess.run(["apt-get", *self.opts, "update"], capture_output=True, text=True)
        if p.returncode != 0:
            if have:
                log(f"apt-get update failed, keeping the old lists:\n{p.stderr.strip()}")
                return
            raise SystemExit(f"images: apt-get update failed:\n{p.stderr}")
        stamp.touch()

    def resolve(self, names: list[str]) -> list[Deb]:
        """The Depends and Pre-Depends closure of `names` (no Recommends), as apt would
        install it on an empty system."""
        key = tuple(sorted(names))
        if key not in self._resolved:
            p = run(["apt-get", *self.opts, "-s", "install", *key], text=True)
            debs = []
            for line in p.stdout.splitlines():
                m = re.match(r"^Inst (\S+) \((\S+) .*\[(\S+)\]\)", line)
                if m:
                    debs.append(Deb(m[1], m[2], m[3]))
            if not debs:
                raise SystemExit(f"images: apt resolved nothing for {key}:\n{p.stdout}")
            self._resolved[key] = sorted(debs, key=lambda d: d.name)
        return self._resolved[key]

    def fetch(self, debs: list[Deb]) -> dict[Deb, Path]:
        """Each package's file in the cache, downloaded when missing, every file checked
        against the SHA256 of the signed package lists."""
        want = sorted(set(debs), key=lambda d: d.name)
        sums = self._sha256(want)
        missing = [d for d in want if not self._valid(self.debs / d.filename, sums[d])]
        if missing:
            log(f"downloading {len(missing)} packages into {self.debs}")
            part = self.debs / "partial"
            run(["apt-get", *self.opts, "download", *[f"{d.name}={d.version}" for d in missing]],
                cwd=part)
            for d in missing:
                got = part / d.filename
                if not self._valid(got, sums[d]):
                    raise SystemExit(f"images: {got}: missing or not the SHA256 of the package lists")
                got.replace(self.debs / d.filename)
        return {d: self.debs / d.filename for d in want}

    def _sha256(self, debs: list[Deb]) -> dict[Deb, str]:
        p = run(["apt-cache", *self.opts, "show", *[f"{d.name}={d.version}" for d in debs]], text=True)
        sums: dict[Deb, str] = {}
        for para in p.stdout.split("\n\n"):
            fields = dict(re.findall(r"^([A-Za-z0-9-]+): (.*)$", para, re.M))
            if "Package" in fields and "SHA256" in fields:
                d = Deb(fields["Package"], fields["Version"], fields["Architecture"])
                sums.setdefault(d, fields["SHA256"])
        lost = [d for d in debs if d not in sums]
        if lost:
            raise SystemExit(f"images: no SHA256 in the package lists for {lost}")
        return sums

    @staticmethod
    def _valid(path: Path, sha: str) -> bool:
        return path.is_file() and sha256_file(path) == sha


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# ---------------------------------------------------------------------------------------------
# Layers


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
        self.add(path, Entry(tarfile.DIRTYPE, mode, uid, gid, origin="build.py"))

    def file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        self.add(path, Entry(tarfile.REGTYPE, mode, data=data, origin="build.py"))

    def symlink(self, path: str, target: str) -> None:
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


# ---------------------------------------------------------------------------------------------
# The images


@dataclass
class Settings:
    registry: str
    repository: str
    tag: str
    epoch: int
    revision: str
    source: str
    out: Path
    target_dir: Path
    profile: str


def reference(s: Settings, name: str) -> str:
    prefix = "/".join(p.strip("/") for p in (s.registry, s.repository) if p.strip("/"))
    return f"{prefix}/{name}:{s.tag}" if prefix else f"{name}:{s.tag}"


def passwd_group(spec: dict) -> tuple[bytes, bytes]:
    users = spec["users"]
    passwd = ["root:x:0:0:root:/root:/usr/sbin/nologin"]
    groups = {0: "root"}
    for name, u in sorted(users.items(), key=lambda kv: kv[1]["uid"]):
        passwd.append(f"{name}:x:{u['uid']}:{u['gid']}:kruntimes {name}:{u['home']}:/usr/sbin/nologin")
        groups.setdefault(u["gid"], name)
    group = [f"{g}:x:{gid}:" for gid, g in sorted(groups.items())]
    return ("\n".join(passwd) + "\n").encode(), ("\n".join(group) + "\n").encode()


def base_files(layer: Layer, spec: dict) -> None:
    """What every Debian-based image has besides its packages: the merged-/usr links,
    the users, name lookup through files then DNS, mount points, /tmp."""
    for top in ("bin", "sbin", "lib", "lib64"):
        layer.symlink(top, f"usr/{top}")
        layer.dir(f"usr/{top}")
    passwd, group = passwd_group(spec)
    layer.file("etc/passwd", passwd)
    layer.file("etc/group", group)
    layer.file("etc/nsswitch.conf", b"passwd: files\ngroup: files\nhosts: files dns\n")
    for d in ("dev", "proc", "sys", "run", "root", "home", "var/lib/dpkg/status.d"):
        layer.dir(d, 0o700 if d == "root" else 0o755)
    layer.dir("tmp", 0o1777)
    layer.dir("var/tmp", 0o1777)


@dataclass(frozen=True)
class GroupLayer:
    """One package group's layer in one image: the packages it adds to the groups below."""

    group: str
    debs: tuple[Deb, ...]
    base: bool  # the first layer, which also holds base_files()


def plan_layers(name: str, img: dict, spec: dict, apt: Apt) -> list[GroupLayer]:
    """The image's package layers: group k holds the closure of groups 1..k minus what
    groups 1..k-1 hold, so images that start with the same groups get the same layers."""
    below: set[Deb] = set()
    names: list[str] = []
    plan = []
    for i, group in enumerate(img["groups"]):
        names += spec["groups"][group]
        closure = apt.resolve(names)
        lost = below - set(closure)
        if lost:
            log(f"{name}: group {group} resolves without {sorted(d.name for d in lost)} of the groups below it")
        own = tuple(d for d in closure if d not in below)
        plan.append(GroupLayer(group, own, i == 0))
        below |= set(own)
    return plan


def python_minor(debs: tuple[Deb, ...]) -> str | None:
    """The `3.11` of a group that brings python3.11-minimal, if it does."""
    for d in debs:
        m = re.fullmatch(r"python(3\.\d+)-minimal", d.name)
        if m:
            return m[1]
    return None


def group_blob(gl: GroupLayer, spec: dict, files: dict[Deb, Path], s: Settings) -> Blob:
    """The group's layer, from the cache when the same packages, users and builder made it
    before (the key covers all of them and this file's own text). It does not depend on the
    commit: the packages' files keep their own mtimes, and what this file adds takes the
    newest of them, so a new commit reuses the layer."""
    minor = python_minor(gl.debs)
    here = f"{sys.version_info[0]}.{sys.version_info[1]}"
    compile_pyc = minor is not None and minor == here
    if minor is not None and not compile_pyc:
        log(f"{gl.group}: the image's Python is {minor}, this interpreter {here}: no .pyc files "
            f"(run images/build.py with python{minor} to have them)")
    key = hashlib.sha256(canonical({
        "builder": hashlib.sha256(Path(__file__).read_bytes()).hexdigest(),
        "debs": [(d.filename, sha256_file(files[d])) for d in gl.debs],
        "base": gl.base, "users": spec["users"] if gl.base else None,
        "pyc": sys.version if compile_pyc else None,
    })).hexdigest()
    cache = CACHE / "layers"
    meta, blob = cache / f"{key}.json", cache / f"{key}.tar.gz"
    if meta.is_file() and blob.is_file():
        m = json.loads(meta.read_text())
        data = blob.read_bytes()
        if "sha256:" + hashlib.sha256(data).hexdigest() == m["digest"]:
            return Blob(m["digest"], m["diff_id"], data, m["comment"], m["raw_size"])
    layer = Layer()
    if gl.base:
        base_files(layer, spec)
    for d in gl.debs:
        layer.add_deb(d, files[d])
    epoch = max(e.mtime for e in layer.entries.values() if e.mtime is not None)
    comment = f"debian packages ({gl.group}): " + " ".join(f"{d.name}={d.version}" for d in gl.debs)
    if compile_pyc:
        comment += f"; {layer.compile_python(epoch)} modules byte-compiled"
    b = compress(layer.tar(epoch), comment)
    cache.mkdir(parents=True, exist_ok=True)
    for path, content in ((blob, b.data), (meta, canonical({
            "digest": b.digest, "diff_id": b.diff_id, "comment": b.comment, "raw_size": b.raw_size}))):
        tmp = path.with_name(path.name + ".partial")
        tmp.write_bytes(content)
        tmp.replace(path)
    return b


def binary_blob(img: dict, binary: Path, s: Settings) -> Blob:
    """The image's own layer: its program and the directories it runs with."""
    top = Layer()
    if not img["groups"]:
        for d in ("dev", "proc", "sys"):
            top.dir(d)
    top.file(img["entrypoint"][0].lstrip("/"), binary.read_bytes(), 0o755)
    for d in img.get("dirs", []):
        top.dir(d["path"], d["mode"], d["uid"], d["gid"])
    return compress(top.tar(s.epoch), f"{img['binary']} (cargo profile {s.profile})"
                    if "package" in img else f"{img['binary']} (gcc -static)")


def iso(epoch: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def canonical(obj) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def write_archive(path: Path, ref: str, tag: str, img: dict, name: str, blobs: list[Blob],
                  s: Settings) -> dict:
    """An OCI image layout (oci-layout, index.json, blobs/sha256/) in one tar, plus Docker's
    manifest.json so `docker load` of older engines takes it too."""
    user = img["user"]
    labels = {
        "org.opencontainers.image.title": name,
        "org.opencontainers.image.description": img["description"],
        "org.opencontainers.image.version": s.tag,
        "org.opencontainers.image.revision": s.revision,
        "org.opencontainers.image.licenses": "Apache-2.0",
        "org.opencontainers.image.created": iso(s.epoch),
        **({"org.opencontainers.image.source": s.source} if s.source else {}),
    }
    config = {
        "architecture": "amd64",
        "os": "linux",
        "created": iso(s.epoch),
        "config": {
            "User": user,
            "Entrypoint": img["entrypoint"],
            "Env": [f"PATH={DEFAULT_PATH}"],
            "WorkingDir": img.get("workdir", "/"),
            "Labels": labels,
            **({"Cmd": img["cmd"]} if "cmd" in img else {}),
        },
        "rootfs": {"type": "layers", "diff_ids": [b.diff_id for b in blobs]},
        "history": [{"created": iso(s.epoch), "created_by": f"images/build.py: {b.comment}"}
                    for b in blobs],
    }
    config_bytes = canonical(config)
    config_digest = "sha256:" + hashlib.sha256(config_bytes).hexdigest()
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": config_digest, "size": len(config_bytes)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                    "digest": b.digest, "size": len(b.data)} for b in blobs],
        "annotations": {"org.opencontainers.image.created": iso(s.epoch)},
    }
    manifest_bytes = canonical(manifest)
    manifest_digest = "sha256:" + hashlib.sha256(manifest_bytes).hexdigest()
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": manifest_digest,
            "size": len(manifest_bytes),
            "platform": {"architecture": "amd64", "os": "linux"},
            "annotations": {"io.containerd.image.name": ref,
                            "org.opencontainers.image.ref.name": tag},
        }],
    }
    docker = [{"Config": f"blobs/sha256/{config_digest[7:]}", "RepoTags": [ref],
               "Layers": [f"blobs/sha256/{b.digest[7:]}" for b in blobs]}]
    files = {
        "oci-layout": canonical({"imageLayoutVersion": "1.0.0"}),
        "index.json": canonical(index),
        "manifest.json": canonical(docker),
        f"blobs/sha256/{config_digest[7:]}": config_bytes,
        f"blobs/sha256/{manifest_digest[7:]}": manifest_bytes,
        **{f"blobs/sha256/{b.digest[7:]}": b.data for b in blobs},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".partial")
    with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tf:
        for d in ("blobs", "blobs/sha256"):
            ti = tarfile.TarInfo(d + "/")
            ti.type, ti.mode, ti.mtime = tarfile.DIRTYPE, 0o755, s.epoch
            tf.addfile(ti)
        for name_ in sorted(files):
            ti = tarfile.TarInfo(name_)
            ti.size, ti.mode, ti.mtime = len(files[name_]), 0o644, s.epoch
            tf.addfile(ti, io.BytesIO(files[name_]))
    tmp.replace(path)
    return {"manifest": manifest_digest, "config": config_digest}


# ---------------------------------------------------------------------------------------------
# Inputs: the spec, the binaries, the settings


def load_spec() -> dict:
    with (HERE / "images.toml").open("rb") as f:
        return tomllib.load(f)


def cargo_metadata() -> dict:
    p = run(["cargo", "metadata", "--no-deps", "--format-version", "1", "--offline"],
            cwd=ROOT, text=True)
    return json.loads(p.stdout)


def build_binaries(images: dict, profile: str, target_dir: Path, skip_cargo: bool,
                   version: str) -> dict[str, Path]:
    """Every image's binary: `cargo build` of the workspace's (debug info stripped: the
    symbols stay, for backtraces) and `gcc -static` of C sources."""
    rust = {(img["package"], img["binary"]) for img in images.values() if "package" in img}
    if rust and not skip_cargo:
        cmd = ["cargo", "build", "--locked", "--profile", profile]
        if profile == "dev":
            # The features `cargo test --workspace` resolves (dev-dependencies on): a build
            # of only these packages would resolve others, recompile a hundred crates, and
            # the next test run would recompile them back. So the dev binaries are those
            # the tests run, and the tests after this build compile nothing.
            cmd += ["--workspace", "--all-targets"]
        else:
            for package, binary in sorted(rust):
                cmd += ["-p", package, "--bin", binary]
        log(" ".join(cmd))
        started = time.monotonic()
        if subprocess.run(cmd, cwd=ROOT).returncode != 0:
            raise SystemExit("images: cargo build failed")
        log(f"cargo build: {time.monotonic() - started:.0f} s")
    out_dir = target_dir / ("debug" if profile == "dev" else profile)
    stripped = target_dir / "images" / "bin"
    stripped.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    for name, img in images.items():
        dest = stripped / img["binary"]
        if "package" in img:
            src = out_dir / img["binary"]
            if not src.is_file():
                raise SystemExit(f"images: {src} is missing (cargo build --profile {profile})")
            run(["objcopy", "--strip-debug", str(src), str(dest)])
        else:
            run(["gcc", "-static", "-O2", "-s", "-Wall", "-Werror", f'-DPAUSE_VERSION="{version}"',
                 f"-ffile-prefix-map={ROOT}=.", "-o", str(dest), str(HERE / img["source"])])
        paths[name] = dest
    return paths


def workspace_repository() -> str:
    with (ROOT / "Cargo.toml").open("rb") as f:
        return tomllib.load(f).get("workspace", {}).get("package", {}).get("repository", "")


def git(*args: str) -> str:
    p = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
    return p.stdout.strip() if p.returncode == 0 else ""


def cmd_build(a: argparse.Namespace) -> None:
    started = time.monotonic()
    spec = load_spec()
    images = spec["images"]
    if a.only:
        wanted = a.only.split(",")
        unknown = [n for n in wanted if n not in images]
        if unknown:
            raise SystemExit(f"images: unknown images {unknown}; known: {sorted(images)}")
        images = {n: images[n] for n in wanted}
    meta = cargo_metadata()
    target_dir = Path(meta["target_directory"])
    version = next(p["version"] for p in meta["packages"] if p["name"] == "kruntimes-operator")
    epoch = int(os.environ.get("SOURCE_DATE_EPOCH") or git("log", "-1", "--format=%ct") or 0)
    s = Settings(
        registry=a.registry, repository=a.repository, tag=a.tag or version, epoch=epoch,
        revision=git("rev-parse", "HEAD") or "unknown",
        source=workspace_repository(),
        out=Path(a.out) if a.out else target_dir / "images", target_dir=target_dir,
        profile=a.profile,
    )
    binaries = build_binaries(images, a.profile, target_dir, a.no_cargo, s.tag)
    plans: dict[str, list[GroupLayer]] = {n: [] for n in images}
    files: dict[Deb, Path] = {}
    if any(img["groups"] for img in images.values()):
        apt = Apt(CACHE / "apt", CACHE / "debs")
        apt.update(a.refresh)
        prefixes = sorted({tuple(n for g in img["groups"][:k + 1] for n in spec["groups"][g])
                           for img in images.values() for k in range(len(img["groups"]))})
        apt.resolve(list(prefixes[0]))  # writes the package cache the others then read
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
            list(pool.map(lambda names: apt.resolve(list(names)), prefixes[1:]))
        plans = {n: plan_layers(n, img, spec, apt) for n, img in images.items()}
        files = apt.fetch([d for plan in plans.values() for gl in plan for d in gl.debs])
    assembled = time.monotonic()
    unique = sorted({gl for plan in plans.values() for gl in plan}, key=lambda gl: [d.filename for d in gl.debs])
    # zlib lets go of the GIL: the layers compress on both cores.
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        group_blobs = dict(zip(unique, pool.map(lambda gl: group_blob(gl, spec, files, s), unique)))
        own_blobs = dict(zip(sorted(images), pool.map(
            lambda n: binary_blob(images[n], binaries[n], s), sorted(images))))
    summary = []
    for name in sorted(images):
        img = images[name]
        blobs = [group_blobs[gl] for gl in plans[name]] + [own_blobs[name]]
        ref = reference(s, name)
        path = s.out / f"{name}-{s.tag}.oci.tar"
        digests = write_archive(path, ref, s.tag, img, name, blobs, s)
        summary.append({
            "name": name, "ref": ref, "archive": str(path), "bytes": path.stat().st_size,
            "uncompressed": sum(b.raw_size for b in blobs),
            "packages": sorted(f"{d.name}={d.version}" for gl in plans[name] for d in gl.debs),
            "layers": [b.digest for b in blobs], **digests})
    (s.out / "images.json").write_text(json.dumps(summary, indent=2) + "\n")
    for r in summary:
        log(f"{r['ref']}: {r['archive']} ({r['bytes'] / 1e6:.1f} MB; {r['uncompressed'] / 1e6:.1f} MB "
            f"unpacked; {len(r['packages'])} packages; {r['manifest'][:19]})")
    log(f"assembled in {time.monotonic() - assembled:.1f} s; total {time.monotonic() - started:.1f} s")


# ---------------------------------------------------------------------------------------------
# Reading archives back


def read_archive(path: Path) -> tuple[tarfile.TarFile, dict, dict, dict]:
    tf = tarfile.open(path)

    def blob(digest: str) -> bytes:
        f = tf.extractfile(f"blobs/sha256/{digest.split(':', 1)[1]}")
        assert f is not None
        data = f.read()
        if "sha256:" + hashlib.sha256(data).hexdigest() != digest:
            raise SystemExit(f"images: {path}: blob {digest} does not match its digest")
        return data

    f = tf.extractfile("index.json")
    assert f is not None
    index = json.load(f)
    desc = index["manifests"][0]
    manifest = json.loads(blob(desc["digest"]))
    config = json.loads(blob(manifest["config"]["digest"]))
    tf.blob = blob  # type: ignore[attr-defined]
    return tf, desc, manifest, config


def cmd_inspect(a: argparse.Namespace) -> None:
    tf, desc, manifest, config = read_archive(Path(a.archive))
    layers = []
    for layer, diff_id in zip(manifest["layers"], config["rootfs"]["diff_ids"]):
        raw = gzip.decompress(tf.blob(layer["digest"]))  # type: ignore[attr-defined]
        if "sha256:" + hashlib.sha256(raw).hexdigest() != diff_id:
            raise SystemExit(f"images: {a.archive}: layer {layer['digest']} does not match its diff id")
        layers.append({"digest": layer["digest"], "size": layer["size"], "uncompressed": len(raw)})
    json.dump({"ref": desc["annotations"]["io.containerd.image.name"], "manifest": desc["digest"],
               "config": config["config"], "layers": layers}, sys.stdout, indent=2)
    print()


def cmd_unpack(a: argparse.Namespace) -> None:
    tf, _, manifest, _ = read_archive(Path(a.archive))
    dest = Path(a.dir)
    dest.mkdir(parents=True, exist_ok=True)
    for layer in manifest["layers"]:
        data = gzip.decompress(tf.blob(layer["digest"]))  # type: ignore[attr-defined]
        with tarfile.open(fileobj=io.BytesIO(data)) as lt:
            for m in lt:
                if m.name.startswith("/") or ".." in m.name.split("/"):
                    raise SystemExit(f"images: unsafe path {m.name}")
                target = dest / m.name
                if target.is_symlink() or (target.exists() and not target.is_dir()):
                    target.unlink()
                lt.extract(m, dest, set_attrs=True, numeric_owner=True)


# ---------------------------------------------------------------------------------------------
# The Dockerfiles against images.toml


def lint() -> tuple[list[str], set[str]]:
    """What in the Dockerfiles disagrees with images.toml, and their final base images."""
    spec = load_spec()
    problems = []
    bases = set()
    for name, img in spec["images"].items():
        path = HERE / name / "Dockerfile"
        if not path.is_file():
            problems.append(f"{path}: missing")
            continue
        text = re.sub(r"\\\n", " ", path.read_text())
        lines = [l.strip() for l in text.splitlines() if l.strip() and not l.lstrip().startswith("#")]
        final = max(i for i, l in enumerate(lines) if l.upper().startswith("FROM "))
        stage = lines[final:]
        if img["groups"]:
            bases.add(stage[0].split()[1])
        def last(word: str) -> str | None:
            found = [l[len(word):].strip() for l in stage if l.upper().startswith(word + " ")]
            return found[-1] if found else None
        expect = {"USER": img["user"], "ENTRYPOINT": json.dumps(img["entrypoint"]),
                  "WORKDIR": img.get("workdir")}
        if "cmd" in img:
            expect["CMD"] = json.dumps(img["cmd"])
        for word, want in expect.items():
            got = last(word)
            if want is None:
                continue
            if got is None or (json.loads(got) if got.startswith("[") else got) != (
                    json.loads(want) if want.startswith("[") else want):
                problems.append(f"{path}: {word} is {got!r}, images.toml says {want!r}")
        dest = img["entrypoint"][0]
        if not any(l.upper().startswith("COPY ") and l.endswith(" " + dest) for l in stage):
            problems.append(f"{path}: the final stage does not COPY its binary to {dest}")
    if len(bases) > 1:
        problems.append(f"the final stages use different base images: {sorted(bases)}")
    return problems, bases


def cmd_lint(_: argparse.Namespace) -> None:
    problems, bases = lint()
    for p in problems:
        print(f"lint: {p}", file=sys.stderr)
    if problems:
        raise SystemExit(1)
    print(f"lint: {len(load_spec()['images'])} Dockerfiles agree with images.toml (final base {', '.join(sorted(bases))})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build the image archives")
    b.add_argument("--only", help="comma-separated image names (default: every image)")
    b.add_argument("--profile", default="release", help="cargo profile of the binaries (release, dev)")
    b.add_argument("--registry", default="ghcr.io", help="the chart's image.registry")
    b.add_argument("--repository", default="kruntimes", help="the chart's image.repository")
    b.add_argument("--tag", default="", help="image tag (default: the workspace version, the chart's appVersion)")
    b.add_argument("--out", help="output directory (default: TARGET_DIR/images)")
    b.add_argument("--no-cargo", action="store_true", help="use the binaries already built")
    b.add_argument("--refresh", action="store_true", help="refresh the private apt lists now")
    b.set_defaults(func=cmd_build)
    i = sub.add_parser("inspect", help="print an archive's reference, config and layers")
    i.add_argument("archive")
    i.set_defaults(func=cmd_inspect)
    u = sub.add_parser("unpack", help="unpack an archive's root filesystem into a directory")
    u.add_argument("archive")
    u.add_argument("dir")
    u.set_defaults(func=cmd_unpack)
    sub.add_parser("lint", help="check the Dockerfiles against images.toml").set_defaults(func=cmd_lint)
    a = ap.parse_args()
    a.func(a)


if __name__ == "__main__":
    main()
