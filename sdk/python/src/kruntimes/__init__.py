"""Python client for kruntimes: function Runs (invoke a handler), session
Runs (agent sandboxes: commands, files and watches of them, streamed output,
background processes and terminals) and task Runs (run once, read the exit code, the output and the
files left behind), against a Kubernetes cluster or a ``krt up`` stack,
blocking or with asyncio.

    from kruntimes import Client, Sandbox

    client = Client.from_kubeconfig(namespace="default")    # or Client.from_state_dir(".kruntimes")
    print(client.function("hello-python").invoke({"name": "X"}))
    with Sandbox.create(client, runtime="bash") as sb:
        print(sb.commands.run("echo hi").stdout)
    print(client.tasks.run("python", inline="print('hi')").stdout)
    print(client.artifacts.list("nightly-report"))            # files a task left behind

See ``docs/sdk-python.md``.
"""

from ._runs import ArtifactRef, RunInfo
from .artifacts import Artifacts, AsyncArtifacts
from .client import AsyncClient, Client
from .commands import AsyncCommands, CommandEvent, CommandResult, Commands
from .errors import *  # noqa: F403 - every error class, listed in errors.__all__
from .errors import __all__ as _errors
from .files import AsyncFiles, EntryInfo, FilePage, Files
from .functions import AsyncFunction, Function, Invocation
from .processes import (AsyncCommandHandle, AsyncPty, AsyncPtyHandle, CommandHandle, ProcessEvent, ProcessInfo,
                        ProcessResult, Pty, PtyHandle)
from .sandbox import AsyncSandbox, Sandbox, SandboxMetrics, SessionStatus
from .tasks import AsyncTasks, TaskResult, Tasks
from .watch import AsyncWatchHandle, FilesystemEvent, WatchHandle

__version__ = "0.2.0"

__all__ = [
    "ArtifactRef",
    "Artifacts",
    "AsyncArtifacts",
    "AsyncClient",
    "AsyncCommandHandle",
    "AsyncCommands",
    "AsyncFiles",
    "AsyncFunction",
    "AsyncPty",
    "AsyncPtyHandle",
    "AsyncSandbox",
    "AsyncTasks",
    "AsyncWatchHandle",
    "Client",
    "CommandEvent",
    "CommandHandle",
    "CommandResult",
    "Commands",
    "EntryInfo",
    "FilePage",
    "Files",
    "FilesystemEvent",
    "Function",
    "Invocation",
    "ProcessEvent",
    "ProcessInfo",
    "ProcessResult",
    "Pty",
    "PtyHandle",
    "RunInfo",
    "Sandbox",
    "SandboxMetrics",
    "SessionStatus",
    "TaskResult",
    "Tasks",
    "WatchHandle",
    *_errors,
]
