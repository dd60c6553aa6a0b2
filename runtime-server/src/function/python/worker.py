"""kruntimes Python function worker.

Started by the Runtime Server once per registration: imports the handler
module once, then serves invocations over a framed protocol on the original
stdin/stdout (4-byte big-endian length, a one-byte tag, an 8-byte big-endian
sequence number, then the payload). A reply carries the sequence number of the
request it answers, so the server can tell it from a reply to an earlier call.
The handler's own stdout (prints, and its children's output) goes to the
descriptor named by the first argument, its stderr to stderr: the server
writes both, labelled, to the Run's log.

Started without a handler (argv has no module), the worker is a *spare*: the
interpreter is already running and waits for b"l" + JSON {"module",
"function", "cwd", "env"}, so a registration only pays for the import.

Tags server -> worker: b"l" + JSON load request (spares only, sequence 0),
b"i" + JSON input.
Tags worker -> server: b"r" ready, b"f" + JSON error (import failed), both
with sequence 0; b"o" + JSON output, b"a" + JSON output when the artifacts
directory (KRUNTIME_ARTIFACTS_DIR, as registered) is not empty after the call,
b"e" + JSON {"type", "message"} (handler raised), b"v" + JSON error (a value
JSON cannot hold), all with the sequence of the b"i" they answer.
"""

import importlib
import json
import os
import struct
import sys
import traceback

MAX_MESSAGE = 1024


def main():
    proto_in = os.fdopen(os.dup(0), "rb", buffering=0)
    proto_out = os.fdopen(os.dup(1), "wb", buffering=0)
    # Keep the protocol channel private: handler output goes to its own
    # descriptor and handlers read from an empty stdin.
    out_fd = int(sys.argv.pop(1))
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(out_fd, 1)
    os.close(out_fd)
    sys.stdin = open(os.devnull, "r")
    sys.stdout = open(1, "w", buffering=1, closefd=False)

    def send(tag, seq=0, payload=b""):
        proto_out.write(struct.pack(">IcQ", len(payload) + 9, tag, seq) + payload)

    def error_json(exc):
        message = str(exc)
        if len(message) > MAX_MESSAGE:
            message = message[:MAX_MESSAGE] + "..."
        return json.dumps({"type": type(exc).__name__, "message": message}).encode()

    def read_frame():
        header = read_exact(13)
        if header is None:
            return None
        length, tag, seq = struct.unpack(">IcQ", header)
        if length < 9:
            return None
        payload = read_exact(length - 9)
        if payload is None:
            return None
        return tag, seq, payload

    def read_exact(n):
        chunks = []
        while n:
            chunk = proto_in.read(n)
            if not chunk:
                return None
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    if len(sys.argv) >= 3:
        module_name, function_name = sys.argv[1], sys.argv[2]
    else:
        frame = read_frame()
        if frame is None or frame[0] != b"l":
            return
        load = json.loads(frame[2])
        module_name, function_name = load["module"], load["function"]
        os.chdir(load["cwd"])
        os.environ.clear()
        os.environ.update(load["env"])

    sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
        handler = getattr(module, function_name)
        if not callable(handler):
            raise TypeError(f"{module_name}.{function_name} is not callable")
    except BaseException as exc:  # noqa: BLE001 - report every import failure
        traceback.print_exc()
        send(b"f", 0, error_json(exc))
        return

    # As registered: whatever the handler does to os.environ.
    artifacts_dir = os.environ.get("KRUNTIME_ARTIFACTS_DIR")

    def artifacts_left():
        """Whether the call left anything in the artifacts directory, or put
        something in its place (never following a link)."""
        if not artifacts_dir:
            return False
        try:
            if os.path.islink(artifacts_dir) or not os.path.isdir(artifacts_dir):
                return True
            with os.scandir(artifacts_dir) as entries:
                return next(entries, None) is not None
        except OSError:
            return True

    send(b"r")
    while True:
        frame = read_frame()
        if frame is None or frame[0] != b"i":
            return
        seq = frame[1]
        try:
            request = json.loads(frame[2])
            result = handler(request)
        except BaseException as exc:  # noqa: BLE001 - handler errors are data
            traceback.print_exc()
            send(b"e", seq, error_json(exc))
            continue
        try:
            body = json.dumps(result, ensure_ascii=False, allow_nan=False).encode()
        except (TypeError, ValueError, RecursionError) as exc:
            # The handler returned; its value is what JSON cannot hold.
            send(b"v", seq, error_json(exc))
            continue
        send(b"a" if artifacts_left() else b"o", seq, body)


if __name__ == "__main__":
    main()
