"""Session (sandbox) Runs: create or open one, run commands and file
operations through its FIFO queue, stream output, close it."""

from __future__ import annotations

import base64
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional

import httpx

from .errors import KruntimesError

_TERMINAL = {"Succeeded", "Failed", "Timeout", "Cancelled"}


@dataclass
class OperationResult:
    """The result of one command or file mutation."""

    operation_id: str
    state: str
    exit_code: Optional[int]
    stdout: str
    stderr: str
    stdout_truncated: bool
    stderr_truncated: bool
    duration_ms: int
    error: Optional[str] = None

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "OperationResult":
        return cls(
            operation_id=d["operationId"],
            state=d["state"],
            exit_code=d.get("exitCode"),
            stdout=d.get("stdout", ""),
            stderr=d.get("stderr", ""),
            stdout_truncated=d.get("stdoutTruncated", False),
            stderr_truncated=d.get("stderrTruncated", False),
            duration_ms=d.get("durationMs", 0),
            error=d.get("error"),
        )


class _Embedded:
    """The embedded stack's state directory written by ``krt up``."""

    def __init__(self, state_dir: str):
        self.dir = Path(state_dir)
        self.client = json.loads((self.dir / "client.json").read_text())

    def runs(self) -> List[Dict[str, Any]]:
        return json.loads((self.dir / "runs.json").read_text())["runs"]

    def run(self, namespace: str, name: str) -> Optional[Dict[str, Any]]:
        for r in self.runs():
            if r["namespace"] == namespace and r["name"] == name:
                return r
        return None

    def runs_dir(self) -> Path:
        runs_dir = self.client.get("runsDir")
        if not runs_dir:
            raise KruntimesError(0, "Unsupported", "this krt up does not publish its runs directory")
        return Path(runs_dir)


def _manifest(name: str, namespace: str, runtime: str, env: Dict[str, str], idle_timeout_seconds: Optional[int],
              queue_size: Optional[int], operation_timeout: Optional[int], termination: Optional[str]) -> str:
    session: Dict[str, Any] = {}
    if idle_timeout_seconds is not None:
        session["idleTimeoutSeconds"] = idle_timeout_seconds
    if queue_size is not None:
        session["queueSize"] = queue_size
    if operation_timeout is not None:
        session["operationTimeout"] = operation_timeout
    spec: Dict[str, Any] = {
        "runtime": runtime,
        "env": [{"name": k, "value": v} for k, v in sorted(env.items())],
        "mode": {"session": session},
    }
    if termination:
        spec["termination"] = {"mode": termination}
    doc = {
        "apiVersion": "kruntimes.io/v1alpha1",
        "kind": "Run",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }
    # JSON is valid YAML.
    return json.dumps(doc, indent=2) + "\n"


class Sandbox:
    """A session Run reached through the gateway."""

    def __init__(self, name: str, namespace: str = "default", state_dir: str = ".kruntimes", timeout: float = 330.0):
        self.name = name
        self.namespace = namespace
        self._stack = _Embedded(state_dir)
        cfg = self._stack.client
        self._http = httpx.Client(
            verify=str(cfg["caFile"]),
            headers={"Authorization": f"Bearer {cfg['token']}"},
            timeout=timeout,
        )
        self._spec: Optional[Dict[str, Any]] = None

    # -- lifecycle -----------------------------------------------------

    @classmethod
    def create(cls, name: str, namespace: str = "default", runtime: str = "bash", env: Optional[Dict[str, str]] = None,
               idle_timeout_seconds: Optional[int] = None, queue_size: Optional[int] = None,
               operation_timeout: Optional[int] = None, state_dir: str = ".kruntimes",
               wait_timeout: float = 60.0) -> "Sandbox":
        """Creates the session Run (a manifest in the embedded store) and waits until it is Ready."""
        sb = cls(name, namespace, state_dir)
        sb._spec = dict(runtime=runtime, env=dict(env or {}), idle_timeout_seconds=idle_timeout_seconds,
                        queue_size=queue_size, operation_timeout=operation_timeout)
        sb._write_manifest(None)
        sb.wait(timeout=wait_timeout)
        return sb

    @classmethod
    def open(cls, name: str, namespace: str = "default", state_dir: str = ".kruntimes") -> "Sandbox":
        """Opens an existing session Run."""
        sb = cls(name, namespace, state_dir)
        run = sb._status()
        if run is None or run["mode"] != "session":
            raise KruntimesError(404, "NotFound", f"no session run {namespace}/{name}")
        return sb

    def _manifest_path(self) -> Path:
        return self._stack.runs_dir() / f"session-{self.namespace}-{self.name}.yaml"

    def _write_manifest(self, termination: Optional[str]) -> None:
        if self._spec is None:
            raise KruntimesError(0, "Unsupported", "only sandboxes created by this client can be closed by it")
        path = self._manifest_path()
        tmp = path.with_suffix(".tmp")
        tmp.write_text(_manifest(self.name, self.namespace, termination=termination, **self._spec))
        tmp.rename(path)

    def _status(self) -> Optional[Dict[str, Any]]:
        return self._stack.run(self.namespace, self.name)

    def wait(self, phase: str = "Ready", timeout: float = 60.0) -> Dict[str, Any]:
        """Waits until the Run reaches ``phase`` (raises when it ends otherwise)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            run = self._status()
            if run is not None:
                if run["phase"] == phase:
                    return run
                if run["phase"] in _TERMINAL:
                    raise KruntimesError(0, run.get("reason") or run["phase"], run.get("message") or f"run is {run['phase']}")
            time.sleep(0.05)
        raise KruntimesError(0, "Timeout", f"run {self.namespace}/{self.name} did not reach {phase} in {timeout}s")

    def close(self, timeout: float = 120.0) -> Dict[str, Any]:
        """Ends the session after its accepted operations finish (Succeeded)."""
        self._write_manifest("Drain")
        return self.wait("Succeeded", timeout)

    def cancel(self, timeout: float = 60.0) -> Dict[str, Any]:
        """Ends the session now, cancelling queued and running work (Cancelled)."""
        self._write_manifest("Immediate")
        return self.wait("Cancelled", timeout)

    # -- operations ----------------------------------------------------

    @property
    def endpoint(self) -> str:
        run = self._status()
        if run is None or not run.get("endpoint"):
            raise KruntimesError(404, "NotFound", f"no session run {self.namespace}/{self.name}")
        return run["endpoint"]

    def _check(self, r: httpx.Response) -> httpx.Response:
        if r.status_code >= 400:
            raise KruntimesError.from_response(r)
        return r

    @staticmethod
    def _command(argv: Optional[List[str]], shell: Optional[str], stdin: Optional[str], cwd: Optional[str],
                 env: Optional[Dict[str, str]], timeout_seconds: Optional[int]) -> Dict[str, Any]:
        if (argv is None) == (shell is None):
            raise ValueError("pass exactly one of argv or shell")
        body: Dict[str, Any] = {"command": {"argv": argv} if argv is not None else {"shell": shell}}
        for key, value in (("stdin", stdin), ("cwd", cwd), ("env", env), ("timeoutSeconds", timeout_seconds)):
            if value is not None:
                body[key] = value
        return body

    def _execute(self, body: Dict[str, Any]) -> OperationResult:
        r = self._check(self._http.post(f"{self.endpoint}/operations:execute", json=body))
        return OperationResult.from_json(r.json())

    def exec(self, argv: Optional[List[str]] = None, shell: Optional[str] = None, stdin: Optional[str] = None,
             cwd: Optional[str] = None, env: Optional[Dict[str, str]] = None,
             timeout_seconds: Optional[int] = None) -> OperationResult:
        """Runs one command (argv or shell) and returns its result."""
        return self._execute(self._command(argv, shell, stdin, cwd, env, timeout_seconds))

    def stream(self, argv: Optional[List[str]] = None, shell: Optional[str] = None, stdin: Optional[str] = None,
               cwd: Optional[str] = None, env: Optional[Dict[str, str]] = None,
               timeout_seconds: Optional[int] = None) -> Iterator[Dict[str, Any]]:
        """Runs one command, yielding ``accepted``, ``output`` and ``completed`` events."""
        body = self._command(argv, shell, stdin, cwd, env, timeout_seconds)
        with self._http.stream("POST", f"{self.endpoint}/operations:stream", json=body) as r:
            if r.status_code >= 400:
                r.read()
                raise KruntimesError.from_response(r)
            for line in r.iter_lines():
                if line:
                    yield json.loads(line)

    def write_file(self, path: str, data: bytes) -> OperationResult:
        return self._mutate({"writeFile": {"path": path, "contentBase64": base64.b64encode(data).decode()}})

    def mkdir(self, path: str) -> OperationResult:
        return self._mutate({"mkdir": {"path": path}})

    def delete(self, path: str) -> OperationResult:
        return self._mutate({"delete": {"path": path}})

    def rename(self, src: str, dst: str) -> OperationResult:
        return self._mutate({"rename": {"from": src, "to": dst}})

    def _mutate(self, body: Dict[str, Any]) -> OperationResult:
        result = self._execute(body)
        if result.state != "Succeeded":
            raise KruntimesError(200, "OperationFailed", result.error or result.state)
        return result

    def read_file(self, path: str) -> bytes:
        r = self._check(self._http.get(f"{self.endpoint}/files:content", params={"path": path}))
        return r.content

    def list_files(self, path: str = "", limit: Optional[int] = None, page_token: Optional[str] = None) -> Dict[str, Any]:
        params: Dict[str, Any] = {"path": path}
        if limit is not None:
            params["limit"] = limit
        if page_token:
            params["pageToken"] = page_token
        return self._check(self._http.get(f"{self.endpoint}/files", params=params)).json()
