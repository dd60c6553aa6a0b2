"""An example custom Runtime Server: the kruntimes.runtime.v1 contract
(RuntimeServer and FunctionRuntime; no sessions) over a Unix socket, serving
the toy runtime `upper` (upper.py) with the registration rules of
registry.py. See README.md and docs/runtime-servers.md.

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
# The contract's largest message: a 32 MiB file and framing.
MAX_MESSAGE_BYTES = 40 * 1024 * 1024
_RUN_UID = re.compile(r"^[A-Za-z0-9-]{1,128}$")
log = logging.getLogger("upper-runtime-server")


class RejectedRequest(Exception):
    """A request answered with `code` and a message, never a crash."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code


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
        except registry.NotRegistered as e:
            context.abort(grpc.StatusCode.NOT_FOUND, str(e))
        except registry.StaleAttempt as e:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(e))
        except (upper.BadHandler, upper.BadInput) as e:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))

    wrapped.__name__ = rpc.__name__
    return wrapped


def _failure(reason: int, message: str) -> "pb.InvokeFunctionResponse":
    """An invocation that produced no answer: an outcome, never a status."""
    return pb.InvokeFunctionResponse(
        failure=pb.InvokeFailure(reason=reason, message=upper.bound(message))
    )


class UpperServer(pb_grpc.RuntimeServerServicer):
    """Who this server is: Info announces FunctionRuntime only, so runtimed
    never asks it for sessions (SessionRuntime is not served at all: its
    calls answer UNIMPLEMENTED)."""

    def __init__(self, functions: "UpperFunctions") -> None:
        self._functions = functions

    def Info(self, request, context):
        return pb.InfoResponse(
            name="example-upper",
            version=VERSION,
            runtimes=[upper.NAME],
            services=[FUNCTION_RUNTIME],
            contract=CONTRACT,
        )

    def Reset(self, request, context):
        return pb.ResetResponse(dropped=self._functions.reset())


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
        run_uid = request.run.uid
        if not _RUN_UID.match(run_uid):
            raise RejectedRequest(grpc.StatusCode.INVALID_ARGUMENT, f"bad run uid {run_uid!r}")
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


def serve(socket_path: str, work_root: str) -> grpc.Server:
    """Starts serving on `socket_path`, connectable by the socket
    directory's group (mode 0660): runtimed runs as another user of it."""
    if os.path.exists(socket_path) and stat.S_ISSOCK(os.stat(socket_path).st_mode):
        os.unlink(socket_path)  # left by an earlier run of this container
    os.makedirs(work_root, exist_ok=True)
    options = [
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ]
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8), options=options)
    functions = UpperFunctions(work_root)
    pb_grpc.add_RuntimeServerServicer_to_server(UpperServer(functions), server)
    pb_grpc.add_FunctionRuntimeServicer_to_server(functions, server)
    umask = os.umask(0o117)
    try:
        if server.add_insecure_port(f"unix:{socket_path}") == 0:
            raise OSError(f"cannot listen on unix:{socket_path}")
        server.start()
    finally:
        os.umask(umask)
    os.chmod(socket_path, 0o660)
    return server


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
    server = serve(args.socket, args.work_root)
    log.info("serving %s (RuntimeServer, FunctionRuntime) on unix:%s", CONTRACT, args.socket)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    # In-flight calls get a moment; runtimed treats what is cut off as lost.
    server.stop(grace=5).wait()


if __name__ == "__main__":
    main()
