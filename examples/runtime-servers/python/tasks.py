"""The tasks of one Runtime Server: one process per Run attempt, run to its
exit, kept — running or ended — until it is closed.

The rules are the contract's (docs/runtime-servers.md, TaskRuntime):
starting the same attempt again answers with the task already started, a
higher attempt kills the older one's tree and replaces it, a lower one is
refused. Each task runs under reaper.py, in a session of its own, so its
whole tree can be killed: cancelling sends SIGTERM to its process group (the
reaper passes it on to every descendant, `setsid` ones included) and SIGKILL
after a grace period. Its output goes, as it comes, to a bounded tail per
stream (for the result) and to whoever watches it.

No gRPC here: server.py turns these into the contract's messages.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass

import taskspec

REAPER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "reaper.py")
# Between SIGTERM and SIGKILL when a task is cancelled.
KILL_GRACE_SECONDS = 2
# Output chunks a watcher may fall behind before it loses some.
WATCH_BUFFER = 256
# How long the result waits for output still in the pipes once the task's
# process has exited (its tree is dead by then: the pipes close at once).
DRAIN_SECONDS = 5
log = logging.getLogger("upper-runtime-server")


class StaleAttempt(Exception):
    """A start for an attempt older than the one held (FAILED_PRECONDITION)."""


class CannotStart(Exception):
    """The task cannot be started (FAILED_PRECONDITION): a start failure,
    not an exit."""


class NotHeld(Exception):
    """No task for that Run, or not at that attempt (NOT_FOUND)."""


@dataclass(frozen=True)
class Result:
    """How a task ended."""

    attempt: int
    # Killed by CancelTask, CloseTask or a newer attempt.
    cancelled: bool
    # 128 + N when signal N ended it.
    exit_code: int
    stdout_tail: str
    stderr_tail: str
    stdout_truncated: bool
    stderr_truncated: bool
    started_ms: int
    finished_ms: int


class Tail:
    """The last `capacity` bytes of one output stream."""

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._bytes = bytearray()
        self.truncated = False

    def push(self, data: bytes) -> None:
        self._bytes += data
        excess = len(self._bytes) - self._capacity
        if excess > 0:
            del self._bytes[:excess]
            self.truncated = True

    def text(self) -> str:
        """The tail as text: a character whose first bytes were cut off is
        left out whole; bytes that are not UTF-8 become U+FFFD."""
        data = bytes(self._bytes)
        skip = 0
        while self.truncated and skip < min(3, len(data)) and data[skip] & 0xC0 == 0x80:
            skip += 1
        return data[skip:].decode("utf-8", errors="replace")


def _now_ms() -> int:
    return int(time.time() * 1000)


class Task:
    """The latest attempt of one Run."""

    def __init__(self, run_uid: str, attempt: int, workdir: str, tail_bytes: int) -> None:
        self.run_uid = run_uid
        self.attempt = attempt
        self.workdir = workdir
        self.started_ms = 0
        self._tails = {"stdout": Tail(tail_bytes), "stderr": Tail(tail_bytes)}
        # Guards everything below; notified on output, on the result and
        # when a watch closes.
        self._changed = threading.Condition()
        self._watches: list[Watch] = []
        self._result: Result | None = None
        self._cancelled = False
        self._process: subprocess.Popen | None = None

    def run(self, argv: list[str], env: dict[str, str]) -> None:
        """Starts the process under its reaper, in a session of its own."""
        self._process = subprocess.Popen(
            [sys.executable, "-I", "-B", REAPER, str(KILL_GRACE_SECONDS), *argv],
            cwd=self.workdir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            bufsize=0,
        )
        self.started_ms = _now_ms()
        pumps = [
            threading.Thread(target=self._pump, args=(name, pipe), daemon=True)
            for name, pipe in (("stdout", self._process.stdout), ("stderr", self._process.stderr))
        ]
        for p in pumps:
            p.start()
        threading.Thread(target=self._wait, args=(pumps,), daemon=True).start()

    def result(self) -> Result | None:
        """How the task ended; None while it runs."""
        with self._changed:
            return self._result

    def watch(self, with_output: bool) -> Watch:
        """A follower of the task: its output from now on (if asked for),
        then its result. An ended task answers with its result at once."""
        w = Watch(self, with_output)
        with self._changed:
            self._watches.append(w)
        return w

    def cancel(self) -> bool:
        """Kills the task's tree unless it has ended, and waits for its
        result; whether it was running."""
        with self._changed:
            running = self._result is None
            if running and not self._cancelled:
                self._cancelled = True
                self._signal(signal.SIGTERM)
            # The reaper ends the tree within the grace period; should it
            # be stuck itself, its whole group is killed.
            while not self._changed.wait_for(
                lambda: self._result is not None, timeout=KILL_GRACE_SECONDS + 5
            ):
                self._signal(signal.SIGKILL)
        return running

    def _signal(self, sig: int) -> None:
        # The reaper leads the task's process group; once it has been
        # waited for, its pid may name another process.
        if self._process is not None and self._process.returncode is None:
            try:
                os.killpg(self._process.pid, sig)
            except ProcessLookupError:
                pass

    def _pump(self, name: str, pipe) -> None:
        """Reads one stream to its end: to the tail and the watchers."""
        while data := pipe.read(64 * 1024):
            with self._changed:
                self._tails[name].push(data)
                for w in self._watches:
                    w.offer(name, data)
                self._changed.notify_all()

    def _wait(self, pumps: list[threading.Thread]) -> None:
        """Waits for the task to exit, then publishes its result."""
        status = self._process.wait()
        for p in pumps:
            p.join(timeout=DRAIN_SECONDS)
        with self._changed:
            out, err = self._tails["stdout"], self._tails["stderr"]
            self._result = Result(
                attempt=self.attempt,
                cancelled=self._cancelled,
                # The reaper reports a signal as 128 + N; the reaper itself
                # killed (the backstop above) is reported the same way.
                exit_code=status if status >= 0 else 128 - status,
                stdout_tail=out.text(),
                stderr_tail=err.text(),
                stdout_truncated=out.truncated,
                stderr_truncated=err.truncated,
                started_ms=self.started_ms,
                finished_ms=_now_ms(),
            )
            self._changed.notify_all()
        log.info(
            "task of run %s attempt %d ended: exit code %d%s",
            self.run_uid,
            self.attempt,
            self._result.exit_code,
            " (cancelled)" if self._cancelled else "",
        )


class Watch:
    """One follower of a task, iterated by WatchTask: ("output", stream,
    bytes), ("dropped", bytes) when it fell more than WATCH_BUFFER chunks
    behind, then ("result", Result)."""

    def __init__(self, task: Task, with_output: bool) -> None:
        self._task = task
        self._with_output = with_output
        self._events: deque = deque()
        self._dropped = 0
        self._closed = False

    def offer(self, stream: str, data: bytes) -> None:
        """A chunk of output (the task's lock is held)."""
        if not self._with_output:
            return
        if len(self._events) >= WATCH_BUFFER:
            self._dropped += len(data)
            return
        if self._dropped:
            self._events.append(("dropped", self._dropped))
            self._dropped = 0
        self._events.append(("output", stream, data))

    def close(self) -> None:
        """Ends the iteration and stops following the task (the caller went
        away, or the iteration ended)."""
        with self._task._changed:
            self._closed = True
            if self in self._task._watches:
                self._task._watches.remove(self)
            self._task._changed.notify_all()

    def __iter__(self):
        changed = self._task._changed
        try:
            while True:
                with changed:
                    changed.wait_for(
                        lambda: self._closed
                        or self._events
                        or self._dropped
                        or self._task._result is not None
                    )
                    if self._closed:
                        return
                    if self._events:
                        event = self._events.popleft()
                    elif self._dropped:
                        event, self._dropped = ("dropped", self._dropped), 0
                    else:
                        event = ("result", self._task._result)
                yield event
                if event[0] == "result":
                    return
        finally:
            self.close()


class Tasks:
    """Every task of the server, keyed by Run UID; safe to use from many
    threads."""

    def __init__(self, work_root: str) -> None:
        self._work_root = work_root
        self._lock = threading.Lock()
        self._by_run: dict[str, Task] = {}
        # Starts, closes and resets, one at a time.
        self._changing = threading.Lock()

    def get(self, run_uid: str, attempt: int = 0) -> Task:
        """The Run's task, at `attempt` unless it is 0."""
        with self._lock:
            task = self._by_run.get(run_uid)
        if task is None or attempt not in (0, task.attempt):
            raise NotHeld(f"task {run_uid} at attempt {attempt} is not held by this server")
        return task

    def start(self, run_uid: str, spec: taskspec.Spec) -> Task:
        """Starts a task: the same attempt again answers with the one
        started, a higher one replaces the older (its tree killed), a lower
        one is refused."""
        with self._changing:
            with self._lock:
                held = self._by_run.get(run_uid)
            if held is not None:
                if spec.attempt == held.attempt:
                    return held
                if spec.attempt < held.attempt:
                    raise StaleAttempt(
                        f"attempt {spec.attempt} is older than registered attempt {held.attempt}"
                    )
                self._close(held)
            task = self._spawn(run_uid, spec)
            with self._lock:
                self._by_run[run_uid] = task
        log.info("task of run %s attempt %d started", run_uid, spec.attempt)
        return task

    def _spawn(self, run_uid: str, spec: taskspec.Spec) -> Task:
        """Writes the source into a fresh WORK_ROOT/RUN_UID/ATTEMPT and
        starts the process there."""
        run_dir = os.path.join(self._work_root, run_uid)
        workdir = os.path.join(run_dir, str(spec.attempt))
        shutil.rmtree(run_dir, ignore_errors=True)  # left by an earlier server
        os.makedirs(workdir, mode=0o700)
        # Its real path: HOME and the shell's PWD then agree.
        workdir = os.path.realpath(workdir)
        try:
            if spec.source is not None:
                path, text = spec.source
                target = os.path.join(workdir, path)
                # The directory is fresh: no symlink can redirect this.
                os.makedirs(os.path.dirname(target), exist_ok=True)
                with open(target, "w", encoding="utf-8") as f:
                    f.write(text)
            env = taskspec.environment(
                spec.env,
                run_uid,
                spec.attempt,
                home=workdir,
                path=os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
                tmp=os.environ.get("TMPDIR") or "/tmp",
            )
            program = spec.argv[0]
            if not env["PATH"] or shutil.which(program, path=env["PATH"]) is None:
                raise CannotStart(f"{program}: not found or not executable on the task's PATH")
            task = Task(run_uid, spec.attempt, workdir, spec.tail_bytes)
            try:
                task.run(spec.argv, env)
            except OSError as e:
                raise CannotStart(f"start {program}: {e.strerror}") from None
            return task
        except BaseException:
            shutil.rmtree(run_dir, ignore_errors=True)
            raise

    def close(self, run_uid: str) -> bool:
        """Kills what still runs and forgets the task, its directory
        removed; False when there is none."""
        with self._changing:
            with self._lock:
                task = self._by_run.get(run_uid)
            if task is None:
                return False
            self._close(task)
        log.info("task of run %s closed", run_uid)
        return True

    def reset(self) -> int:
        """Closes every task; how many there were."""
        with self._changing:
            with self._lock:
                held = list(self._by_run.values())
            for task in held:
                self._close(task)
        return len(held)

    def _close(self, task: Task) -> None:
        task.cancel()
        with self._lock:
            if self._by_run.get(task.run_uid) is task:
                del self._by_run[task.run_uid]
        shutil.rmtree(os.path.dirname(task.workdir), ignore_errors=True)
