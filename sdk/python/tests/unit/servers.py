"""Local HTTP(S) servers on loopback that answer like the Kubernetes API for
one Run, or like the gateway's artifact routes or a session's process or watch
routes, and record what each request carried."""

import hashlib
import json
import select
import socket
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer, ThreadingHTTPServer
from typing import Callable, Dict, List, Optional, Tuple
from urllib.parse import parse_qs, urlsplit

RUN = {
    "metadata": {"name": "hello", "namespace": "a", "uid": "u-1"},
    "spec": {"runtime": "python", "mode": {"function": {}}},
    "status": {"phase": "Ready", "endpoint": {"url": "https://gw/v1/namespaces/a/runtimes/python/runs/u-1:invoke"}},
}


class Seen:
    def __init__(self) -> None:
        self.authorization: List[Optional[str]] = []
        self.peer_cn: List[Optional[str]] = []


class KubeServer:
    """Serves GET /apis/kruntimes.io/v1alpha1/namespaces/a/runs/hello; ``status`` picks each answer."""

    def __init__(self, tls: Optional[ssl.SSLContext] = None,
                 status: Callable[[Optional[str]], int] = lambda auth: 200) -> None:
        self.seen = Seen()
        seen, pick = self.seen, status

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - the http.server API
                auth = self.headers.get("Authorization")
                seen.authorization.append(auth)
                peer = self.connection.getpeercert() if isinstance(self.connection, ssl.SSLSocket) else None
                cn = None
                for rdn in (peer or {}).get("subject", ()):
                    for key, value in rdn:
                        if key == "commonName":
                            cn = value
                seen.peer_cn.append(cn)
                code = pick(auth) if self.path.endswith("/runs/hello") else 404
                body = json.dumps(RUN if code == 200 else {"kind": "Status", "code": code, "reason": "Nope",
                                                           "message": "no"}).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = HTTPServer(("127.0.0.1", 0), Handler)
        if tls is not None:
            self.httpd.socket = tls.wrap_socket(self.httpd.socket, server_side=True)
        self.scheme = "https" if tls is not None else "http"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> "KubeServer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


ARTIFACTS = "/v1/namespaces/default/runtimes/bash/runs/u-1/artifacts"


class ArtifactServer:
    """Answers like the gateway's artifact routes of Run ``u-1`` (``ARTIFACTS``), over plain HTTP:
    the list, each file of ``files`` with ``Range`` (``bytes=A-B``, ``A-``, ``-N``; 206, 416), 404
    for other names. ``break_after`` (bytes) cuts the connection mid-body; ``lie`` announces a
    wrong SHA-256; ``unavailable`` answers 503 ``ArtifactStoreUnavailable``. Records each
    request's path and headers in ``seen``."""

    def __init__(self, files: Dict[str, bytes]) -> None:
        self.files = files
        self.break_after: Optional[int] = None
        self.lie = False
        self.unavailable = False
        self.seen: List[Tuple[str, Dict[str, str]]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _send(self, code: int, body: bytes, headers: Dict[str, str]) -> None:
                self.send_response(code)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _error(self, code: int, name: str, extra: Optional[Dict[str, str]] = None) -> None:
                body = json.dumps({"error": {"code": name, "message": f"{name} here", "invocationId": "inv-9"}})
                self._send(code, body.encode(), {"Content-Type": "application/json", **(extra or {})})

            def do_GET(self):  # noqa: N802 - the http.server API
                server.seen.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
                if server.unavailable:
                    return self._error(503, "ArtifactStoreUnavailable", {"Retry-After": "1"})
                if self.path == ARTIFACTS:
                    refs = [{"name": n, "uri": f"file:///store/{n}", "size": len(b),
                             "sha256": hashlib.sha256(b).hexdigest()} for n, b in sorted(server.files.items())]
                    return self._send(200, json.dumps({"artifacts": refs}).encode(),
                                      {"Content-Type": "application/json"})
                name = self.path[len(ARTIFACTS) + 1:] if self.path.startswith(ARTIFACTS + "/") else None
                if name is None or name not in server.files:
                    return self._error(404, "NotFound")
                data = server.files[name]
                sha = hashlib.sha256(b"lies" if server.lie else data).hexdigest()
                headers = {"Content-Type": "application/octet-stream", "Accept-Ranges": "bytes",
                           "ETag": f'"{sha}"', "X-Kruntimes-Artifact-Sha256": sha,
                           "X-Kruntimes-Artifact-Size": str(len(data))}
                code, body = 200, data
                spec = self.headers.get("Range")
                if spec:
                    first, _, last = spec[len("bytes="):].partition("-")
                    if first == "":
                        start, end = max(0, len(data) - int(last)), len(data)
                    else:
                        start, end = int(first), min(len(data), int(last) + 1 if last else len(data))
                    if start >= len(data):
                        return self._error(416, "RangeNotSatisfiable", {"Content-Range": f"bytes */{len(data)}"})
                    code, body = 206, data[start:end]
                    headers["Content-Range"] = f"bytes {start}-{end - 1}/{len(data)}"
                if server.break_after is None:
                    return self._send(code, body, headers)
                # Announce the whole body, send part of it, hang up.
                self.send_response(code)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body[:server.break_after])
                self.wfile.flush()
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> "ArtifactServer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


SESSION_PATH = "/v1/namespaces/default/runtimes/bash/sessions/u-1"


class ProcessServer:
    """Answers like a session's process routes, over plain HTTP: ``POST …/processes`` starts pid 7
    (201), ``GET …/processes/7`` lists it, ``GET …/processes/7:connect`` sends ``script`` (byte
    chunks, each flushed as one HTTP chunk, ``pause`` seconds apart) and then — with ``hang`` —
    keepalives every 20 ms until the client goes away (``gone`` is set then); other pids are 404;
    the other routes answer 204. Records each request's method, path and JSON body in ``seen``."""

    def __init__(self, script: List[bytes], *, hang: bool = False, pause: float = 0.01) -> None:
        self.script = script
        self.hang = hang
        self.pause = pause
        self.seen: List[Tuple[str, str, object]] = []
        self.gone = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _send(self, code: int, doc: Optional[dict] = None) -> None:
                body = json.dumps(doc).encode() if doc is not None else b""
                self.send_response(code)
                if doc is not None:
                    self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _chunk(self, data: bytes) -> None:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()

            def _route(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                server.seen.append((method, self.path, json.loads(raw) if raw else None))
                base = SESSION_PATH + "/processes"
                if method == "POST" and self.path == base:
                    return self._send(201, {"pid": 7})
                if not self.path.startswith(base + "/7"):
                    return self._send(404, {"error": {"code": "NotFound", "message": "no process 8"}})
                if self.path == base + "/7":
                    return self._send(200, {"pid": 7, "command": {"argv": ["top"]}, "running": True})
                if self.path != base + "/7:connect":
                    return self._send(204)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-ndjson")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                try:
                    for data in server.script:
                        self._chunk(data)
                        time.sleep(server.pause)
                    while server.hang:
                        self._chunk(b'{"type":"keepalive"}\n')
                        time.sleep(0.02)
                    self.wfile.write(b"0\r\n\r\n")
                except (BrokenPipeError, ConnectionResetError):
                    server.gone.set()
                    self.close_connection = True

            def do_GET(self):  # noqa: N802 - the http.server API
                self._route("GET")

            def do_POST(self):  # noqa: N802
                self._route("POST")

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    @property
    def endpoint(self) -> str:
        return self.url + SESSION_PATH

    def __enter__(self) -> "ProcessServer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.hang = False
        self.httpd.shutdown()
        self.httpd.server_close()


class WatchServer:
    """Answers like a session's ``GET …/files:watch``, over plain HTTP: ``ERRORS`` maps a ``path``
    to its error answer (status, code); any other path gets ``script`` (byte chunks, each flushed
    as one HTTP chunk, ``pause`` seconds apart; a ``threading.Event`` among them waits until it
    is set) and then — with ``hang`` — silence, until the client goes away (``gone`` is set
    then). Records each request's path and query in ``seen``."""

    ERRORS = {"missing": (404, "NotFound"), "a.txt": (409, "Conflict"), "../etc": (400, "InvalidPath"),
              "busy": (429, "Busy")}

    def __init__(self, script: List[bytes], *, hang: bool = True, pause: float = 0.01) -> None:
        self.script = script
        self.hang = hang
        self.pause = pause
        self.seen: List[Tuple[str, Dict[str, List[str]]]] = []
        self.gone = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _chunk(self, data: bytes) -> None:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()

            def do_GET(self):  # noqa: N802 - the http.server API
                url = urlsplit(self.path)
                query = parse_qs(url.query, keep_blank_values=True)
                server.seen.append((url.path, query))
                failure = WatchServer.ERRORS.get((query.get("path") or [""])[0])
                if url.path != SESSION_PATH + "/files:watch":
                    failure = (404, "NotFound")
                if failure is not None:
                    body = json.dumps({"error": {"code": failure[1], "message": f"{failure[1]} here"}}).encode()
                    self.send_response(failure[0])
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/x-ndjson")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                try:
                    for data in server.script:
                        if isinstance(data, threading.Event):
                            data.wait(10)
                            continue
                        self._chunk(data)
                        time.sleep(server.pause)
                    # Silent (the session's keepalive comes after 20 s): only the client's
                    # going away — its end of the connection readable, at end of file — ends it.
                    while server.hang:
                        readable, _, _ = select.select([self.connection], [], [], 0.02)
                        if readable and self.connection.recv(1, socket.MSG_PEEK) == b"":
                            raise ConnectionResetError
                    self.wfile.write(b"0\r\n\r\n")
                except (BrokenPipeError, ConnectionResetError):
                    server.gone.set()
                    self.close_connection = True

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    @property
    def endpoint(self) -> str:
        return self.url + SESSION_PATH

    def __enter__(self) -> "WatchServer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.hang = False
        self.httpd.shutdown()
        self.httpd.server_close()
