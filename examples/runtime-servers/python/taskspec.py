"""What a StartTask asks for, validated before anything runs: the program
(its command line), the inline source, the environment and the tail bound.
Pure: no gRPC, no files, no processes.

What a task of `upper` runs is the runtime's own choice (the contract leaves
it to each runtime): it is a shell-style runtime, so

  inline source        `bash main.sh` (the source's path, default main.sh)
  entrypoint + args    `bash ENTRYPOINT ARGS...`
  args alone           shell commands, one per line, run as a CI runner
                       does: `bash -e -o pipefail -c "ARGS joined by newlines"`
                       (the first failing command ends them with its code)

and a script whose path ends in `.py` runs with `python3 -u` instead
(unbuffered: its output reaches watchers as it is written). Inline source
wins over an entrypoint and args, as in the built-in server.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath

DEFAULT_SOURCE_PATH = "main.sh"
# The contract's tail bounds: 4 KiB when the request says 0, at most 64 KiB.
DEFAULT_TAIL_BYTES = 4096
MAX_TAIL_BYTES = 64 * 1024
SHELL = ["bash"]
PYTHON = ["python3", "-u"]


class BadRequest(ValueError):
    """A malformed request (INVALID_ARGUMENT)."""


@dataclass(frozen=True)
class Spec:
    """A StartTask, validated."""

    attempt: int
    # The command line, run in the task's working directory.
    argv: list[str]
    # Inline source: (relative path, text), written before the start.
    source: tuple[str, str] | None
    # The Run's own variables (the basics are added at the start).
    env: dict[str, str]
    tail_bytes: int


def relative_path(path: str, what: str) -> str:
    """`path` beneath the working directory: relative, without `..`, not
    empty ('.' parts are dropped)."""
    p = PurePosixPath(path)
    if "\0" in path or p.is_absolute() or ".." in p.parts or not p.parts:
        raise BadRequest(f"{what} {path!r} must be a relative path without '..'")
    return str(p)


def _interpreter(path: str) -> list[str]:
    return PYTHON if path.endswith(".py") else SHELL


def parse(
    attempt: int,
    inline: str,
    inline_path: str,
    entrypoint: str,
    args: list[str],
    env: dict[str, str],
    tail_bytes: int,
) -> Spec:
    """Validates the fields of a StartTaskRequest into a Spec."""
    if attempt < 1:
        raise BadRequest("attempt must be at least 1")
    if any("\0" in a for a in args):
        raise BadRequest("args contain NUL")
    for name, value in env.items():
        if not name or "=" in name or "\0" in name or "\0" in value:
            raise BadRequest(f"invalid env variable {name!r}")
    source = None
    if inline:
        path = relative_path(inline_path or DEFAULT_SOURCE_PATH, "source path")
        source = (path, inline)
        argv = _interpreter(path) + [path]
    elif entrypoint:
        path = relative_path(entrypoint, "entrypoint")
        argv = _interpreter(path) + [path, *args]
    elif args:
        argv = SHELL + ["-e", "-o", "pipefail", "-c", "\n".join(args)]
    else:
        raise BadRequest("a task needs inline source, an entrypoint or args")
    tail = DEFAULT_TAIL_BYTES if tail_bytes == 0 else min(tail_bytes, MAX_TAIL_BYTES)
    return Spec(attempt, argv, source, dict(env), tail)


def environment(
    requested: dict[str, str],
    run_uid: str,
    attempt: int,
    home: str,
    path: str,
    tmp: str,
) -> dict[str, str]:
    """The task's whole environment: the contract's basics (PATH, HOME at
    the working directory, LANG, TMPDIR, KRUNTIMES_RUN_UID), then the Run's
    own variables, which win; KRUNTIMES_ATTEMPT unless the Run sets it.
    Nothing of the server's own environment."""
    env = {
        "PATH": path,
        "HOME": home,
        "LANG": "C.UTF-8",
        "TMPDIR": tmp,
        "KRUNTIMES_RUN_UID": run_uid,
    }
    env.update(requested)
    env.setdefault("KRUNTIMES_ATTEMPT", str(attempt))
    return env
