"""Runs one task's program and takes its whole process tree down with it.

    python3 -I -B reaper.py GRACE_SECONDS PROGRAM [ARGS...]

The server starts every task under a reaper of its own, in a new session
(so the reaper leads the task's process group). The reaper makes itself a
child subreaper (Linux's PR_SET_CHILD_SUBREAPER): an orphan of the tree —
a double-forked daemon, a `setsid` child whose parent exited — is
re-parented to the reaper instead of to init, so everything the program
started stays a descendant of the reaper and can be found in /proc.

The program gets the reaper's stdio, environment and directory. When it
exits, every descendant still left is killed and the reaper exits with the
program's status: its exit code, or 128 + N when signal N ended it (as
shells report it). On SIGTERM (the server cancelling the task) the whole
tree gets SIGTERM, then SIGKILL after GRACE_SECONDS.

Linux only, standard library only; started with -I (the task's PYTHON*
variables do not reach it) and -B (it writes no bytecode).
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys

PR_SET_CHILD_SUBREAPER = 36


def descendants(root: int) -> list[int]:
    """Every live descendant of `root`, read from /proc."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", encoding="ascii", errors="replace") as f:
                stat = f.read()
        except OSError:
            continue  # gone meanwhile
        # The command name may hold spaces and parentheses: the fields
        # after its last ')' are state, ppid, ...
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(name))
    found, frontier = [], [root]
    while frontier:
        for child in children.get(frontier.pop(), []):
            found.append(child)
            frontier.append(child)
    return found


def signal_tree(sig: int) -> None:
    """Sends `sig` to every descendant of this reaper."""
    for pid in descendants(os.getpid()):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def main() -> None:
    grace = float(sys.argv[1])
    argv = sys.argv[2:]
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        sys.exit(f"reaper: prctl: {os.strerror(ctypes.get_errno())}")

    def terminate(*_):
        signal_tree(signal.SIGTERM)
        signal.alarm(max(1, round(grace)))

    signal.signal(signal.SIGALRM, lambda *_: signal_tree(signal.SIGKILL))
    signal.signal(signal.SIGTERM, terminate)
    try:
        program = subprocess.Popen(argv, restore_signals=True)
    except OSError as e:
        sys.stderr.write(f"{argv[0]}: {e.strerror}\n")
        sys.exit(127)
    # Reap whatever ends — the program, and orphans handed to us — until
    # the program has. (Popen is bypassed: a status is reaped only once.)
    status = None
    while status is None:
        pid, wait_status = os.waitpid(-1, 0)
        if pid == program.pid:
            status = wait_status
    # Nothing the program started outlives it.
    while True:
        signal_tree(signal.SIGKILL)
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            break
    if os.WIFSIGNALED(status):
        os._exit(128 + os.WTERMSIG(status))
    os._exit(os.WEXITSTATUS(status))


if __name__ == "__main__":
    main()
