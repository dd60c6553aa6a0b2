"""Bearer-token sources (a fixed token, a token file that rotates, a kubeconfig
exec credential plugin) and the httpx auth that sends them.

A 401 answer means the request was refused before anything ran, so a source
that can be refreshed (a file, an exec plugin) is refreshed and the request
sent once more; a fixed token never is.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import os
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, AsyncGenerator, Dict, Generator, List, Optional

import httpx

from .errors import ConfigError, UnauthenticatedError


class TokenSource:
    """Where a bearer token comes from."""

    #: Whether a 401 is worth a refresh and one more try.
    refreshable = False
    #: Whether getting the token may block (read a file, run a plugin).
    blocking = True

    def token(self) -> Optional[str]:
        """The token, or None when there is none to send."""
        raise NotImplementedError

    def invalidate(self) -> None:
        """Forgets a cached token (after a 401)."""


class StaticToken(TokenSource):
    blocking = False

    def __init__(self, token: str) -> None:
        self._token = token

    def token(self) -> str:
        return self._token


class FileToken(TokenSource):
    """A token file (``tokenFile``, a projected service-account token), re-read when it changes."""

    refreshable = True

    def __init__(self, path: Path) -> None:
        self._path = path
        self._cached: Optional[str] = None
        self._mtime = -1.0

    def token(self) -> str:
        try:
            mtime = self._path.stat().st_mtime
            if self._cached is None or mtime != self._mtime:
                self._cached = self._path.read_text().strip()
                self._mtime = mtime
        except OSError as e:
            raise ConfigError(f"read token file {self._path}: {e}") from e
        return self._cached

    def invalidate(self) -> None:
        self._cached = None


@dataclass(frozen=True)
class ExecCredential:
    """What an exec plugin printed (``client.authentication.k8s.io`` ``ExecCredential.status``)."""

    token: Optional[str]
    client_certificate_data: Optional[str]
    client_key_data: Optional[str]
    expires: Optional[datetime.datetime]
    obtained: float = 0.0

    def expired(self) -> bool:
        """Whether to run the plugin again: 10 s before the expiry, but never within a
        second of the last run (one request asks twice: for its certificate and its token)."""
        if self.expires is None or time.monotonic() - self.obtained < 1.0:
            return False
        now = datetime.datetime.now(datetime.timezone.utc)
        return now >= self.expires - datetime.timedelta(seconds=10)


def _parse_time(value: Optional[str]) -> Optional[datetime.datetime]:
    if not value:
        return None
    try:
        return datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as e:
        raise ConfigError(f"exec plugin: bad expirationTimestamp {value!r}") from e


class ExecPlugin(TokenSource):
    """A kubeconfig ``users[].user.exec`` plugin, run again when its credential expires."""

    refreshable = True

    def __init__(self, spec: Dict[str, Any], base_dir: Path, cluster: Optional[Dict[str, Any]]) -> None:
        if not spec.get("command"):
            raise ConfigError("exec plugin without a command")
        if spec.get("interactiveMode") == "Always":
            raise ConfigError("exec plugin needs interactiveMode Always; this client runs plugins non-interactively")
        self._spec = spec
        self._base_dir = base_dir
        self._cluster = cluster
        self._lock = threading.Lock()
        self._current: Optional[ExecCredential] = None

    def _argv(self) -> List[str]:
        command = str(self._spec["command"])
        # A relative command with a slash is relative to the kubeconfig (as kubectl does).
        if "/" in command and not os.path.isabs(command):
            command = str(self._base_dir / command)
        return [command, *[str(a) for a in self._spec.get("args") or []]]

    def _env(self) -> Dict[str, str]:
        env = dict(os.environ)
        for item in self._spec.get("env") or []:
            env[str(item["name"])] = str(item.get("value", ""))
        api_version = self._spec.get("apiVersion", "client.authentication.k8s.io/v1")
        info: Dict[str, Any] = {"apiVersion": api_version, "kind": "ExecCredential", "spec": {"interactive": False}}
        if self._spec.get("provideClusterInfo") and self._cluster is not None:
            info["spec"]["cluster"] = self._cluster
        env["KUBERNETES_EXEC_INFO"] = json.dumps(info)
        return env

    def run(self) -> ExecCredential:
        """Runs the plugin (blocking) and returns what it printed."""
        try:
            out = subprocess.run(self._argv(), env=self._env(), stdin=subprocess.DEVNULL,
                                 capture_output=True, timeout=60, check=False)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise ConfigError(f"exec plugin {self._spec['command']}: {e}") from e
        if out.returncode != 0:
            tail = out.stderr.decode("utf-8", "replace").strip()[-500:]
            raise UnauthenticatedError(f"exec plugin {self._spec['command']} exited {out.returncode}: {tail}",
                                       status=0, source="client")
        try:
            status = json.loads(out.stdout).get("status") or {}
        except ValueError as e:
            raise ConfigError(f"exec plugin {self._spec['command']} did not print an ExecCredential") from e
        cred = ExecCredential(
            token=status.get("token"),
            client_certificate_data=status.get("clientCertificateData"),
            client_key_data=status.get("clientKeyData"),
            expires=_parse_time(status.get("expirationTimestamp")),
            obtained=time.monotonic(),
        )
        if not cred.token and not cred.client_certificate_data:
            raise ConfigError(f"exec plugin {self._spec['command']} returned neither a token nor a certificate")
        return cred

    def credential(self) -> ExecCredential:
        """The current credential, running the plugin when there is none or it expired."""
        with self._lock:
            if self._current is None or self._current.expired():
                self._current = self.run()
            return self._current

    def token(self) -> Optional[str]:
        # None for a plugin that returns a client certificate instead.
        return self.credential().token

    def invalidate(self) -> None:
        with self._lock:
            self._current = None


class BearerAuth(httpx.Auth):
    """Sends ``Authorization: Bearer`` from a :class:`TokenSource`; one refresh after a 401."""

    def __init__(self, source: TokenSource) -> None:
        self._source = source

    @staticmethod
    def _set(request: httpx.Request, token: Optional[str]) -> None:
        if token:
            request.headers["Authorization"] = f"Bearer {token}"

    def sync_auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        self._set(request, self._source.token())
        response = yield request
        if response.status_code == 401 and self._source.refreshable:
            self._source.invalidate()
            self._set(request, self._source.token())
            yield request

    async def _token(self) -> Optional[str]:
        # A plugin run or a file read blocks: off the event loop.
        if self._source.blocking:
            return await asyncio.to_thread(self._source.token)
        return self._source.token()

    async def async_auth_flow(self, request: httpx.Request) -> AsyncGenerator[httpx.Request, httpx.Response]:
        self._set(request, await self._token())
        response = yield request
        if response.status_code == 401 and self._source.refreshable:
            self._source.invalidate()
            self._set(request, await self._token())
            yield request
