"""Where Runs live, as flows (:mod:`kruntimes._wire`): the Kubernetes API
(``kruntimes.io/v1alpha1`` ``runs``) or the state directory of ``krt up``
(``runs.json`` for status, manifests in its runs directory). Both offer the
same three verbs — get, create, terminate — and waiting for a phase is
written once above them."""

from __future__ import annotations

import base64
import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional

import yaml

from ._wire import KUBERNETES, Call, Flow, Sleep, done
from .errors import (ConfigError, ConflictError, NotFoundError, RunEndedError, RunFailedError, UnsupportedError,
                     WaitTimeoutError)

GROUP_VERSION = "kruntimes.io/v1alpha1"
TERMINAL = frozenset({"Succeeded", "Failed", "Timeout", "Cancelled"})


@dataclass(frozen=True)
class RunInfo:
    """A Run as its control plane reports it."""

    name: str
    namespace: str
    uid: str
    runtime: str
    #: ``function``, ``session`` or ``task``.
    mode: str
    #: ``Pending``, ``Scheduled``, ``Running``, ``Ready``, ``Finalizing`` or a terminal phase.
    phase: str
    reason: str = ""
    message: str = ""
    attempt: int = 0
    #: The gateway URL of the Run (``…:invoke`` or ``…/sessions/{uid}``), once assigned.
    endpoint: Optional[str] = None
    #: The CA (PEM) the endpoint's certificate chains to, when the status publishes one.
    ca_pem: Optional[str] = None

    @property
    def ended(self) -> bool:
        """Whether the phase is terminal (``Succeeded``, ``Failed``, ``Timeout``, ``Cancelled``)."""
        return self.phase in TERMINAL

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> "RunInfo":
        """From a Kubernetes ``Run`` object."""
        meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
        endpoint = status.get("endpoint") or {}
        bundle = endpoint.get("caBundle")
        return cls(
            name=str(meta.get("name", "")),
            namespace=str(meta.get("namespace", "")),
            uid=str(meta.get("uid", "")),
            runtime=str(spec.get("runtime", "")),
            mode=next(iter(spec.get("mode") or {}), ""),
            phase=str(status.get("phase") or "Pending"),
            reason=str(status.get("reason") or ""),
            message=str(status.get("message") or ""),
            attempt=int(status.get("attempt") or 0),
            endpoint=endpoint.get("url") or None,
            ca_pem=base64.b64decode(bundle).decode() if bundle else None,
        )


def session_manifest(name: str, namespace: str, runtime: str, env: Mapping[str, str], *,
                     idle_timeout: Optional[int] = None, queue_size: Optional[int] = None,
                     operation_timeout: Optional[int] = None, timeout: Optional[int] = None) -> Dict[str, Any]:
    """A session Run (``docs/sessions.md``)."""
    session: Dict[str, Any] = {}
    for key, value in (("idleTimeoutSeconds", idle_timeout), ("queueSize", queue_size),
                       ("operationTimeout", operation_timeout)):
        if value is not None:
            session[key] = int(value)
    spec: Dict[str, Any] = {
        "runtime": runtime,
        "env": [{"name": k, "value": str(v)} for k, v in sorted(env.items())],
        "mode": {"session": session},
    }
    if timeout is not None:
        spec["timeout"] = int(timeout)
    return {"apiVersion": GROUP_VERSION, "kind": "Run", "metadata": {"name": name, "namespace": namespace}, "spec": spec}


class RunStore:
    """The control plane's Runs."""

    #: The ``source`` of the errors it answers.
    source = "client"

    def get(self, namespace: str, name: str) -> Flow[Optional[RunInfo]]:
        raise NotImplementedError

    def create(self, manifest: Dict[str, Any]) -> Flow[Optional[RunInfo]]:
        raise NotImplementedError

    def terminate(self, namespace: str, name: str, mode: str) -> Flow[None]:
        """Sets ``spec.termination.mode`` (``Drain`` or ``Immediate``)."""
        raise NotImplementedError

    def delete(self, namespace: str, name: str) -> Flow[None]:
        """Deletes the Run (its owner releases whatever it held); a Run already gone is no error."""
        raise NotImplementedError


class KubernetesRuns(RunStore):
    """Runs in the Kubernetes API."""

    source = KUBERNETES

    @staticmethod
    def _path(namespace: str, name: str = "") -> str:
        base = f"/apis/{GROUP_VERSION}/namespaces/{namespace}/runs"
        return f"{base}/{name}" if name else base

    def get(self, namespace: str, name: str) -> Flow[Optional[RunInfo]]:
        try:
            reply = yield Call(KUBERNETES, "GET", self._path(namespace, name))
        except NotFoundError:
            return None
        assert reply is not None
        return RunInfo.from_object(reply.json())

    def create(self, manifest: Dict[str, Any]) -> Flow[Optional[RunInfo]]:
        ns = manifest["metadata"]["namespace"]
        reply = yield Call(KUBERNETES, "POST", self._path(ns), json=manifest)
        assert reply is not None
        return RunInfo.from_object(reply.json())

    def terminate(self, namespace: str, name: str, mode: str) -> Flow[None]:
        patch = json.dumps({"spec": {"termination": {"mode": mode}}}).encode()
        yield Call(KUBERNETES, "PATCH", self._path(namespace, name), content=patch,
                   headers={"Content-Type": "application/merge-patch+json"})

    def delete(self, namespace: str, name: str) -> Flow[None]:
        try:
            yield Call(KUBERNETES, "DELETE", self._path(namespace, name))
        except NotFoundError:
            pass


class StateDirRuns(RunStore):
    """Runs of ``krt up``: status from ``runs.json``, manifests written to its runs directory."""

    def __init__(self, state_dir: Path, runs_dir: Optional[str]) -> None:
        self._state_dir = state_dir
        self._runs_dir = Path(runs_dir) if runs_dir else None

    def _rows(self) -> List[Dict[str, Any]]:
        path = self._state_dir / "runs.json"
        try:
            return list(json.loads(path.read_text()).get("runs") or [])
        except FileNotFoundError as e:
            raise ConfigError(f"{path} is missing: is `krt up` running with this state directory?") from e
        except ValueError as e:
            raise ConfigError(f"parse {path}: {e}") from e

    def get(self, namespace: str, name: str) -> Flow[Optional[RunInfo]]:
        for r in self._rows():
            if r.get("namespace") == namespace and r.get("name") == name:
                return done(RunInfo(
                    name=name, namespace=namespace, uid=str(r.get("uid", "")), runtime=str(r.get("runtime", "")),
                    mode=str(r.get("mode", "")), phase=str(r.get("phase") or "Pending"),
                    reason=str(r.get("reason") or ""), message=str(r.get("message") or ""),
                    attempt=int(r.get("attempt") or 0), endpoint=r.get("endpoint") or None))
        return done(None)

    def manifest_path(self, namespace: str, name: str) -> Path:
        """The file `krt session create` and this SDK keep a session's manifest in."""
        if self._runs_dir is None:
            raise UnsupportedError("this krt up does not publish its runs directory (client.json has no runsDir)")
        return self._runs_dir / f"session-{namespace}-{name}.yaml"

    def _write(self, path: Path, doc: Mapping[str, Any]) -> None:
        # JSON is YAML; write then rename so the store never reads half a file.
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(doc, indent=2) + "\n")
        tmp.rename(path)

    def create(self, manifest: Dict[str, Any]) -> Flow[Optional[RunInfo]]:
        meta = manifest["metadata"]
        path = self.manifest_path(meta["namespace"], meta["name"])
        if path.exists():
            raise ConflictError(f"run {meta['namespace']}/{meta['name']} exists ({path})")
        self._write(path, manifest)
        return done(None)

    def terminate(self, namespace: str, name: str, mode: str) -> Flow[None]:
        path = self.manifest_path(namespace, name)
        try:
            doc = yaml.safe_load(path.read_text())
        except FileNotFoundError as e:
            raise UnsupportedError(f"run {namespace}/{name} has no manifest at {path}: end it by editing its own "
                                   "manifest (spec.termination)") from e
        doc.setdefault("spec", {})["termination"] = {"mode": mode}
        self._write(path, doc)
        return done(None)

    def delete(self, namespace: str, name: str) -> Flow[None]:
        self.manifest_path(namespace, name).unlink(missing_ok=True)
        return done(None)


#: Long waits (a sandbox coming up or ending) are logged here at INFO, once a second has passed
#: and at each change of where the Run stands: ``logging.basicConfig(level=logging.INFO)`` shows them.
log = logging.getLogger("kruntimes")

#: How long a wait logs nothing: a quick one stays silent.
QUIET_WAIT = 1.0


def wait_for(store: RunStore, namespace: str, name: str, want: Callable[[RunInfo], bool], what: str,
             timeout: float) -> Flow[RunInfo]:
    """Polls the Run until ``want`` holds; raises :class:`RunEndedError` (:class:`RunFailedError`
    for ``Failed``) if it ends otherwise,
    :class:`WaitTimeoutError` after ``timeout`` seconds. A Run not listed yet is waited for
    (the control plane may not have read it)."""
    started = time.monotonic()
    deadline = started + timeout
    delay = 0.05
    said = ""
    while True:
        run = yield from store.get(namespace, name)
        if run is not None and want(run):
            return run
        if run is not None and run.ended:
            detail = f" ({run.reason}: {run.message})" if run.reason or run.message else ""
            cls = RunFailedError if run.phase == "Failed" else RunEndedError
            raise cls(f"run {namespace}/{name} ended {run.phase}{detail} before {what}",
                      status=0, code=run.phase, phase=run.phase, reason=run.reason)
        now = _last_seen(run)
        if now != said and time.monotonic() - started >= QUIET_WAIT:
            log.info("waiting for run %s/%s (%s): %s", namespace, name, what, now)
            said = now
        if time.monotonic() > deadline:
            raise WaitTimeoutError(f"run {namespace}/{name}: {what} not reached within {timeout:g}s "
                                   f"({_last_seen(run)})",
                                   phase=run.phase if run else "", reason=run.reason if run else "")
        yield Sleep(delay)
        delay = min(delay * 2, 0.5)


def _last_seen(run: Optional[RunInfo]) -> str:
    """What a wait saw last: the phase, and why the Run waits when its status says."""
    if run is None:
        return "not listed"
    why = ": ".join(part for part in (run.reason, run.message) if part)
    return f"phase {run.phase}, {why}" if why else f"phase {run.phase}"
