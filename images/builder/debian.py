"""Debian packages through the host's apt client over a private state: resolving a
package set's Depends closure and fetching the exact files into a cache, never installing
anything on the host."""

from __future__ import annotations

import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from .common import log, run, sha256_file

LISTS_MAX_AGE = 24 * 3600


@dataclass(frozen=True)
class Deb:
    """One package at an exact version."""

    name: str
    version: str
    arch: str

    @property
    def filename(self) -> str:
        """apt-get download's own name for the file."""
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
        """Each package's SHA256 from the signed lists (`apt-cache show`)."""
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
        """Whether `path` is a file with the SHA256 `sha`."""
        return path.is_file() and sha256_file(path) == sha
