"""A local HTTP(S) server on loopback that answers like the Kubernetes API
for one Run and records what each request carried."""

import json
import ssl
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Callable, List, Optional

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
