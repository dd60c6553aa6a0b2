"""kruntimes Python function worker.

Started by runtimed once per registration: imports the handler module once,
then serves invocations over a framed protocol on the original stdin/stdout
(4-byte big-endian length, then a one-byte tag and the payload). The handler's
own prints go to stderr, which runtimed forwards to its logs.

Started without a handler (argv has no module), the worker is a *spare*: the
interpreter is already running and waits for b"l" + JSON {"module",
"function", "cwd", "env"}, so a registration only pays for the import.

Tags runtimed -> worker: b"l" + JSON load request (spares only), b"i" + JSON
input.
Tags worker -> runtimed: b"r" ready, b"f" + JSON error (import failed),
b"o" + JSON output, b"e" + JSON {"type", "message"} (handler raised).
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
    # Keep the protocol channel private: handler output goes to stderr and
    # handlers read from an empty stdin.
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(2, 1)
    sys.stdin = open(os.devnull, "r")
    sys.stdout = sys.stderr

    def send(tag, payload=b""):
        proto_out.write(struct.pack(">I", len(payload) + 1) + tag + payload)

    def error_json(exc):
        message = str(exc)
        if len(message) > MAX_MESSAGE:
            message = message[:MAX_MESSAGE] + "..."
        return json.dumps({"type": type(exc).__name__, "message": message}).encode()

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
        header = read_exact(4)
        if header is None:
            return
        (length,) = struct.unpack(">I", header)
        frame = read_exact(length)
        if frame is None or frame[:1] != b"l":
            return
        load = json.loads(frame[1:])
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
        send(b"f", error_json(exc))
        return

    send(b"r")
    while True:
        header = read_exact(4)
        if header is None:
            return
        (length,) = struct.unpack(">I", header)
        frame = read_exact(length)
        if frame is None or frame[:1] != b"i":
            return
        try:
            request = json.loads(frame[1:])
            result = handler(request)
            body = json.dumps(result, ensure_ascii=False, allow_nan=False).encode()
        except BaseException as exc:  # noqa: BLE001 - handler errors are data
            traceback.print_exc()
            send(b"e", error_json(exc))
            continue
        send(b"o", body)


if __name__ == "__main__":
    main()
