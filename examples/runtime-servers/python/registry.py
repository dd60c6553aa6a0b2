"""The registrations of one Runtime Server, keyed by Run UID.

The rules are the contract's (docs/runtime-servers.md): a higher attempt
replaces the registration, the same attempt again is idempotent, a lower one
is refused, and a handle names exactly one registration, so a stale handle
never reaches a newer registration. runtimed decides attempts and fencing;
the server only keeps the latest. Pure: no gRPC, no files.
"""

from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass


class StaleAttempt(Exception):
    """A registration for an attempt older than the one held."""


class NotRegistered(Exception):
    """No registration for that Run, or not the one the handle names."""


@dataclass(frozen=True)
class Registration:
    """One prepared function of a Run."""

    run_uid: str
    attempt: int
    handle: str
    handler: str
    workdir: str


class Registry:
    """The table of registrations; safe to use from many threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_run: dict[str, Registration] = {}

    def held(self, run_uid: str, attempt: int) -> Registration | None:
        """The registration a request for `attempt` is answered with as it
        is (same attempt), None when a new one is to be prepared (nothing
        held, or an older attempt); StaleAttempt for an older `attempt`."""
        with self._lock:
            current = self._by_run.get(run_uid)
        if current is None or attempt > current.attempt:
            return None
        if attempt < current.attempt:
            raise StaleAttempt(
                f"run {run_uid} is registered at attempt {current.attempt}, "
                f"not {attempt}"
            )
        return current

    def put(
        self, run_uid: str, attempt: int, handler: str, workdir: str
    ) -> tuple[Registration, Registration | None]:
        """Records a new registration under a fresh handle, returning it and
        the one it replaced (to clean up)."""
        reg = Registration(run_uid, attempt, uuid.uuid4().hex, handler, workdir)
        with self._lock:
            current = self._by_run.get(run_uid)
            if current is not None and attempt <= current.attempt:
                # Raced by a request for the same or a newer attempt.
                raise StaleAttempt(
                    f"run {run_uid} is registered at attempt {current.attempt}"
                )
            self._by_run[run_uid] = reg
        return reg, current

    def get(self, run_uid: str, handle: str | None = None) -> Registration:
        """The Run's registration, which must carry `handle` when given."""
        with self._lock:
            current = self._by_run.get(run_uid)
        if current is None:
            raise NotRegistered(f"run {run_uid} is not registered")
        if handle is not None and handle != current.handle:
            raise NotRegistered(
                f"handle {handle!r} is not run {run_uid}'s registration"
            )
        return current

    def remove(self, run_uid: str, handle: str) -> Registration | None:
        """Removes the Run's registration if `handle` names it (an empty
        handle names whichever is held); None when nothing was removed."""
        with self._lock:
            current = self._by_run.get(run_uid)
            if current is None or (handle and handle != current.handle):
                return None
            del self._by_run[run_uid]
            return current

    def clear(self) -> list[Registration]:
        """Removes every registration (Reset), returning them (to clean
        up)."""
        with self._lock:
            dropped = list(self._by_run.values())
            self._by_run.clear()
        return dropped
