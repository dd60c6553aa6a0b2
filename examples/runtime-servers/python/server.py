"""An example custom Runtime Server: the kruntimes.runtime.v1 contract
(RuntimeServer, FunctionRuntime and TaskRuntime; no sessions) over a Unix
socket, serving the toy runtime `upper`: its functions (upper.py, with the
registration rules of registry.py) and its tasks (tasks.py, taskspec.py,
each task under reaper.py). See README.md and docs/runtime-servers.md.

    python3 server.py --socket /run/kruntimes/runtime.sock --work-root /workspace

Both flags default to the environment a Runtime Pod gives the server
(KRUNTIMES_RUNTIME_SOCKET, KRUNTIMES_WORK_ROOT). The stubs runtime_pb2 and
runtime_pb2_grpc must be importable: generate them with generate.sh.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import shutil
import signal
import stat
import sys
import threading
from concurrent import futures
from pathlib import PurePosixPath

import grpc

import registry
import tasks
import taskspec
import upper

try:
    import runtime_pb2 as pb
    import runtime_pb2_grpc as pb_grpc
except ImportError as e:  # pragma: no cover - a setup error, said plainly
    sys.exit(f"{e}: generate the stubs with generate.sh OUT and put OUT on PYTHONPATH")

VERSION = "0.1.0"
# The contract this server speaks, and the services besides RuntimeServer.
CONTRACT = "kruntimes.runtime.v1"
FUNCTION_RUNTIME = CONTRACT + ".FunctionRuntime"
TASK_RUNTIME = CONTRACT + ".TaskRuntime"
# The contract's largest message: a 32 MiB file and framing.
MAX_MESSAGE_BYTES = 40 * 1024 * 1024
# The contract's Run UIDs (they name directories): 1-64 of [0-9a-f-].
_RUN_UID = re.compile(r"^[0-9a-f-]{1,64}$")
log = logging.getLogger("upper-runtime-server")


class RejectedRequest(Exception):
    """A request answered with `code` and a message, never a crash."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def _run_uid(uid: str) -> str:
    """A Run UID as the contract allows it."""
    if not _RUN_UID.match(uid):
        raise RejectedRequest(grpc.StatusCode.INVALID_ARGUMENT, f"run uid {uid!r} is malformed")
    return uid


def _source_path(workdir: str, path: str) -> str:
    """Where `path` lands beneath `workdir`: relative, without `..`."""
    p = PurePosixPath(path)
    if not path or p.is_absolute() or ".." in p.parts:
        raise RejectedRequest(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"source path {path!r} must be relative, without '..'",
        )
    return os.path.join(workdir, *p.parts)


def _answer(rpc):
    """Turns the typed failures of an RPC into its status code."""

    def wrapped(self, request, context):
        try:
            return rpc(self, request, context)
        except RejectedRequest as e:
            context.abort(e.code, str(e))
        except (registry.NotRegistered, tasks.NotHeld) as e:
            context.abort(grpc.StatusCode.NOT_FOUND, str(e))
        except (registry.StaleAttempt, tasks.StaleAttempt, tasks.CannotStart) as e:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, upper.bound(str(e)))
        except (upper.BadHandler, upper.BadInput, taskspec.BadRequest) as e:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))

    wrapped.__name__ = rpc.__name__
    return wrapped


def _failure(reason: int, message: str) -> "pb.InvokeFunctionResponse":
    """An invocation that produced no answer: an outcome, never a status."""
    return pb.InvokeFunctionResponse(
        failure=pb.InvokeFailure(reason=reason, message=upper.bound(message))
    )


class UpperServer(pb_grpc.RuntimeServerServicer):
    """Who this server is: Info announces FunctionRuntime and TaskRuntime,
    so runtimed never asks it for sessions (SessionRuntime is not served at
    all: its calls answer UNIMPLEMENTED)."""

    def __init__(self, functions: "UpperFunctions", task_runtime: "UpperTasks") -> None:
        self._functions = functions
        self._tasks = task_runtime

    def Info(self, request, context):
        return pb.InfoResponse(
            name="example-upper",
            version=VERSION,
            runtimes=[upper.NAME],
            services=[FUNCTION_RUNTIME, TASK_RUNTIME],
            contract=CONTRACT,
        )

    def Reset(self, request, context):
        dropped = self._functions.reset() + self._tasks.reset()
        return pb.ResetResponse(dropped=dropped)


class UpperFunctions(pb_grpc.FunctionRuntimeServicer):
    """The FunctionRuntime service over the registry."""

    def __init__(self, work_root: str) -> None:
        self._work_root = work_root
        self._registry = registry.Registry()
        # Registrations prepare files: one at a time. Invocations never
        # take this lock.
        self._preparing = threading.Lock()

    def reset(self) -> int:
        """Drops every registration and its files."""
        with self._preparing:
            dropped = self._registry.clear()
            for reg in dropped:
                shutil.rmtree(os.path.dirname(reg.workdir), ignore_errors=True)
        return len(dropped)

    @_answer
    def RegisterFunction(self, request, context):
        run_uid = _run_uid(request.run.uid)
        field = upper.check_handler(request.handler)
        with self._preparing:
            held = self._registry.held(run_uid, request.attempt)
            if held is not None:
                return pb.RegisterFunctionResponse(handle=held.handle)
            workdir = os.path.join(self._work_root, run_uid, str(request.attempt))
            shutil.rmtree(workdir, ignore_errors=True)
            os.makedirs(workdir, mode=0o700)
            if request.HasField("source") and request.source.inline:
                target = _source_path(workdir, request.source.path)
                os.makedirs(os.path.dirname(target), exist_ok=True)
                with open(target, "w", encoding="utf-8") as f:
                    f.write(request.source.inline)
            reg, replaced = self._registry.put(run_uid, request.attempt, field, workdir)
        if replaced is not None:
            shutil.rmtree(replaced.workdir, ignore_errors=True)
        log.info("registered run %s attempt %d", run_uid, request.attempt)
        return pb.RegisterFunctionResponse(handle=reg.handle)

    def InvokeFunction(self, request, context):
        # Every way an invocation ends is an answer (the contract's
        # InvokeFunctionResponse.outcome); a status would mean the server
        # itself failed.
        try:
            reg = self._registry.get(request.run_uid, request.handle)
        except registry.NotRegistered as e:
            return _failure(pb.INVOKE_FAILURE_REASON_NOT_REGISTERED, str(e))
        try:
            output = upper.invoke(reg.handler, request.input)
        except upper.BadInput as e:
            return _failure(pb.INVOKE_FAILURE_REASON_INVALID_INPUT, str(e))
        except upper.HandlerError as e:
            return pb.InvokeFunctionResponse(
                error=pb.FunctionError(kind=e.kind, message=e.message)
            )
        if request.max_output_bytes and len(output) > request.max_output_bytes:
            return _failure(
                pb.INVOKE_FAILURE_REASON_INVALID_OUTPUT,
                f"output of {len(output)} bytes exceeds {request.max_output_bytes}",
            )
        return pb.InvokeFunctionResponse(output=output)

    @_answer
    def UnregisterFunction(self, request, context):
        removed = self._registry.remove(request.run_uid, request.handle)
        if removed is not None:
            shutil.rmtree(os.path.dirname(removed.workdir), ignore_errors=True)
        return pb.UnregisterFunctionResponse(existed=removed is not None)

    @_answer
    def FunctionStatus(self, request, context):
        reg = self._registry.get(request.run_uid)
        # `upper` keeps no worker process.
        return pb.FunctionStatusResponse(
            attempt=reg.attempt, handle=reg.handle, worker_running=False
        )


_STREAMS = {"stdout": pb.COMMAND_STREAM_STDOUT, "stderr": pb.COMMAND_STREAM_STDERR}


def _task_result(r: tasks.Result) -> "pb.TaskResult":
    """How a task ended, as the contract says it."""
    return pb.TaskResult(
        attempt=r.attempt,
        end=pb.TASK_END_CANCELLED if r.cancelled else pb.TASK_END_EXITED,
        exit_code=r.exit_code,
        stdout_tail=r.stdout_tail,
        stderr_tail=r.stderr_tail,
        stdout_truncated=r.stdout_truncated,
        stderr_truncated=r.stderr_truncated,
        started_unix_ms=r.started_ms,
        finished_unix_ms=r.finished_ms,
    )


def _task_event(event: tuple) -> "pb.TaskEvent":
    """One event of a tasks.Watch, as WatchTask streams it."""
    kind = event[0]
    if kind == "output":
        _, stream, data = event
        return pb.TaskEvent(output=pb.CommandOutput(stream=_STREAMS[stream], data=data))
    if kind == "dropped":
        return pb.TaskEvent(dropped=event[1])
    return pb.TaskEvent(result=_task_result(event[1]))


class UpperTasks(pb_grpc.TaskRuntimeServicer):
    """The TaskRuntime service over the task table (tasks.py)."""

    def __init__(self, work_root: str) -> None:
        self._tasks = tasks.Tasks(work_root)

    def reset(self) -> int:
        """Closes every task: trees killed, directories removed."""
        return self._tasks.reset()

    @_answer
    def StartTask(self, request, context):
        if not request.HasField("run"):
            raise RejectedRequest(grpc.StatusCode.INVALID_ARGUMENT, "run is required")
        run_uid = _run_uid(request.run.uid)
        # `backend` names a built-in backend, which a custom runtime has
        # not; what runs is `upper`'s own choice (taskspec.py).
        spec = taskspec.parse(
            attempt=request.attempt,
            inline=request.source.inline,
            inline_path=request.source.path,
            entrypoint=request.entrypoint,
            args=list(request.args),
            env=dict(request.env),
            tail_bytes=request.tail_bytes,
        )
        task = self._tasks.start(run_uid, spec)
        return pb.StartTaskResponse(started_unix_ms=task.started_ms)

    @_answer
    def WatchTask(self, request, context):
        # Looked up before the stream starts, so that an unknown task is a
        # status; the events then come from a generator.
        task = self._tasks.get(_run_uid(request.run_uid), request.attempt)
        watch = task.watch(request.output)
        if not context.add_callback(watch.close):
            watch.close()  # the caller is already gone
        # The call is answered now, not at the first event: the caller then
        # knows it will see everything written from here on.
        context.send_initial_metadata(())
        return (_task_event(e) for e in watch)

    @_answer
    def TaskStatus(self, request, context):
        task = self._tasks.get(_run_uid(request.run_uid))
        result = task.result()
        return pb.TaskStatusResponse(
            attempt=task.attempt,
            started_unix_ms=task.started_ms,
            result=_task_result(result) if result is not None else None,
        )

    @_answer
    def CancelTask(self, request, context):
        try:
            task = self._tasks.get(_run_uid(request.run_uid), request.attempt)
        except tasks.NotHeld:
            return pb.CancelTaskResponse(running=False)
        return pb.CancelTaskResponse(running=task.cancel())

    @_answer
    def CloseTask(self, request, context):
        existed = self._tasks.close(_run_uid(request.run_uid))
        return pb.CloseTaskResponse(existed=existed)


def serve(socket_path: str, work_root: str) -> tuple[grpc.Server, UpperTasks]:
    """Starts serving on `socket_path`, connectable by the socket
    directory's group (mode 0660): runtimed runs as another user of it.
    Returns the server and its tasks (which outlive a stopped server
    unless closed)."""
    if os.path.exists(socket_path) and stat.S_ISSOCK(os.stat(socket_path).st_mode):
        os.unlink(socket_path)  # left by an earlier run of this container
    os.makedirs(work_root, exist_ok=True)
    options = [
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ]
    # Every call holds a thread while it runs, and a WatchTask holds one
    # until its task ends (runtimed watches each task it hosts): room for
    # a Pod's Runs and their calls.
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=64), options=options)
    functions = UpperFunctions(work_root)
    task_runtime = UpperTasks(work_root)
    pb_grpc.add_RuntimeServerServicer_to_server(UpperServer(functions, task_runtime), server)
    pb_grpc.add_FunctionRuntimeServicer_to_server(functions, server)
    pb_grpc.add_TaskRuntimeServicer_to_server(task_runtime, server)
    umask = os.umask(0o117)
    try:
        if server.add_insecure_port(f"unix:{socket_path}") == 0:
            raise OSError(f"cannot listen on unix:{socket_path}")
        server.start()
    finally:
        os.umask(umask)
    os.chmod(socket_path, 0o660)
    return server, task_runtime


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--socket", default=os.environ.get("KRUNTIMES_RUNTIME_SOCKET"))
    parser.add_argument(
        "--work-root", default=os.environ.get("KRUNTIMES_WORK_ROOT", "/workspace")
    )
    args = parser.parse_args(argv)
    if not args.socket:
        parser.error("--socket or KRUNTIMES_RUNTIME_SOCKET is required")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    server, task_runtime = serve(args.socket, args.work_root)
    log.info(
        "serving %s (RuntimeServer, FunctionRuntime, TaskRuntime) on unix:%s",
        CONTRACT,
        args.socket,
    )
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    # In-flight calls get a moment; runtimed treats what is cut off as lost.
    server.stop(grace=5).wait()
    # Then what still runs is killed, whole trees.
    task_runtime.reset()


if __name__ == "__main__":
    main()
