"""Helpers every part of the image builder shares: logging, commands, digests, JSON."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path


def log(msg: str) -> None:
    """A progress line on stderr."""
    print(f"images: {msg}", file=sys.stderr, flush=True)


def run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    """Runs `cmd`, failing with its stderr."""
    p = subprocess.run(cmd, capture_output=True, **kw)
    if p.returncode != 0:
        err = p.stderr.decode(errors="replace") if isinstance(p.stderr, bytes) else p.stderr
        raise SystemExit(f"images: {' '.join(cmd[:4])} …: exit {p.returncode}\n{err}")
    return p


def sha256_file(path: Path) -> str:
    """The hex SHA-256 of a file."""
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def iso(epoch: int) -> str:
    """`epoch` as an RFC 3339 UTC timestamp."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def canonical(obj) -> bytes:
    """JSON with sorted keys and no spaces: the same bytes for the same value."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()
