"""Where Runs live, as flows (:mod:`kruntimes._wire`): the Kubernetes API
(``kruntimes.io/v1alpha1`` ``runs``) or the state directory of ``krt up``
(``runs.json`` for status, manifests in its runs directory). Both offer the
same verbs — get, create, terminate, delete — and waiting for a phase is
written once above them."""

from __future__ import annotations

import base64
import json
import logging
import os
import re
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import yaml

from ._wire import KUBERNETES, Call, Flow, Sleep, done
from .errors import ConfigError, ConflictError, NotFoundError, UnsupportedError, WaitTimeoutError, ended_error

GROUP_VERSION = "kruntimes.io/v1alpha1"
TERMINAL = frozenset({"Succeeded", "Failed", "Timeout", "Cancelled"})


@dataclass(frozen=True)
class TaskStatus:
    """``status.task``: how a task Run's process ended (the last 4 KiB of each stream, UTF-8)."""

    #: The attempt that ran.
    attempt: int
    #: Its exit code (``128 + N`` when signal N ended it).
    exit_code: int
    stdout_tail: str = ""
    stderr_tail: str = ""
    #: More was written than the tail holds.
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    started_at: Optional[datetime] = None
    finished_at: Optional[datetime] = None

    @classmethod
    def from_json(cls, d: Any) -> "Optional[TaskStatus]":
        """From ``status.task`` (or a ``runs.json`` row's ``task``); None when absent."""
        if not isinstance(d, Mapping):
            return None
        return cls(
            attempt=int(d.get("attempt") or 0),
            exit_code=int(d.get("exitCode") or 0),
            stdout_tail=str(d.get("stdoutTail") or ""),
            stderr_tail=str(d.get("stderrTail") or ""),
            stdout_truncated=bool(d.get("stdoutTruncated")),
            stderr_truncated=bool(d.get("stderrTruncated")),
            started_at=parse_time(d.get("startedAt")),
            finished_at=parse_time(d.get("finishedAt")),
        )


@dataclass(frozen=True)
class ArtifactRef:
    """One file a task left in ``$KRUNTIME_ARTIFACTS_DIR`` (``status.artifacts``, or the gateway's
    artifact list): read it with ``client.artifacts``."""

    #: Its path relative to the artifacts directory (``report.txt``, ``out/deep/blob.bin``).
    name: str
    #: Where the store keeps it (``s3://BUCKET/KEY``, ``file:///DIR/KEY``): for an operator;
    #: callers read through the gateway.
    uri: str
    #: Size in bytes.
    size: int
    #: Lowercase hex SHA-256 of the content.
    sha256: str

    @classmethod
    def from_json(cls, d: Any) -> "ArtifactRef":
        if not isinstance(d, Mapping):
            raise ValueError(f"an artifact ref is an object, not {type(d).__name__}")
        return cls(name=str(d.get("name") or ""), uri=str(d.get("uri") or ""), size=int(d.get("size") or 0),
                   sha256=str(d.get("sha256") or "").lower())

    @classmethod
    def list_from_json(cls, refs: Any) -> "Tuple[ArtifactRef, ...]":
        """From ``status.artifacts`` (or a ``runs.json`` row's ``artifacts``); () when absent."""
        if not isinstance(refs, list):
            return ()
        return tuple(cls.from_json(r) for r in refs if isinstance(r, Mapping))


_RFC3339 = re.compile(r"(\d{4}-\d{2}-\d{2})T(\d{2}:\d{2}:\d{2})(?:\.(\d+))?(Z|[+-]\d{2}:\d{2})$")


def parse_time(value: Any) -> Optional[datetime]:
    """An RFC 3339 time of a Kubernetes status (``2026-01-02T03:04:05Z``, fractions allowed), or None."""
    m = _RFC3339.match(value) if isinstance(value, str) else None
    if m is None:
        return None
    date, clock, fraction, zone = m.groups()
    when = datetime.fromisoformat(f"{date}T{clock}+00:00" if zone == "Z" else f"{date}T{clock}{zone}")
    if fraction:
        when += timedelta(microseconds=int(fraction[:6].ljust(6, "0")))
    return when.astimezone(timezone.utc)


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
    #: ``status.task``: how a task Run's process ended (task Runs, once it has).
    task: Optional[TaskStatus] = None
    #: ``status.artifacts``: what a task left in its artifacts directory (at most 100 listed;
    #: ``client.artifacts.list`` has them all).
    artifacts: Tuple[ArtifactRef, ...] = ()

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
            task=TaskStatus.from_json(status.get("task")),
            artifacts=ArtifactRef.list_from_json(status.get("artifacts")),
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


def task_manifest(name: str, namespace: str, runtime: str, env: Mapping[str, str], *, inline: Optional[str] = None,
                  entrypoint: Optional[str] = None, args: Sequence[str] = (), timeout: Optional[int] = None,
                  max_retries: Optional[int] = None, retry_on_exit_codes: Sequence[int] = ()) -> Dict[str, Any]:
    """A task Run (``spec.mode.task``), as ``krt run`` writes one from its flags."""
    task: Dict[str, Any] = {}
    if entrypoint is not None:
        task["entrypoint"] = entrypoint
    if args:
        task["args"] = list(args)
    spec: Dict[str, Any] = {
        "runtime": runtime,
        "env": [{"name": k, "value": str(v)} for k, v in sorted(env.items())],
        "mode": {"task": task},
    }
    if inline is not None:
        spec["source"] = {"inline": inline}
    if timeout is not None:
        spec["timeout"] = int(timeout)
    if max_retries is not None or retry_on_exit_codes:
        policy: Dict[str, Any] = {}
        if max_retries is not None:
            policy["maxRetries"] = int(max_retries)
        if retry_on_exit_codes:
            policy["onExitCodes"] = [int(c) for c in retry_on_exit_codes]
        spec["retryPolicy"] = policy
    return {"apiVersion": GROUP_VERSION, "kind": "Run", "metadata": {"name": name, "namespace": namespace}, "spec": spec}


class RunStore:
    """The control plane's Runs."""

    #: The ``source`` of the errors it answers.
    source = "client"

    def get(self, namespace: str, name: str) -> Flow[Optional[RunInfo]]:
        raise NotImplementedError

    def create(self, manifest: Dict[str, Any]) -> Flow[Optional[RunInfo]]:
        """Creates the Run; a :class:`ConflictError` when one of that name exists."""
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
                    attempt=int(r.get("attempt") or 0), endpoint=r.get("endpoint") or None,
                    task=TaskStatus.from_json(r.get("task")),
                    artifacts=ArtifactRef.list_from_json(r.get("artifacts"))))
        return done(None)

    #: The files krt and the SDKs write Runs into, by prefix: ``session`` for sessions (``krt session
    #: create``), ``apply`` for the rest (``krt apply``, and ``krt run`` for tasks). ``krt delete`` and
    #: ``krt session close`` find a Run's file by these names, as this store does.
    PREFIXES = ("apply", "session")

    def manifest_path(self, namespace: str, name: str, prefix: str = "session") -> Path:
        """The file krt and this SDK keep a Run's manifest in (``PREFIX-NS-NAME.yaml``)."""
        if self._runs_dir is None:
            raise UnsupportedError("this krt up does not publish its runs directory (client.json has no runsDir)")
        return self._runs_dir / f"{prefix}-{namespace}-{name}.yaml"

    def _own_file(self, namespace: str, name: str) -> Optional[Path]:
        """The file krt or an SDK wrote for the Run, if any."""
        for prefix in self.PREFIXES:
            path = self.manifest_path(namespace, name, prefix)
            if path.exists():
                return path
        return None

    def _write(self, path: Path, doc: Mapping[str, Any]) -> None:
        # JSON is YAML; write then rename so the store never reads half a file.
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(doc, indent=2) + "\n")
        tmp.rename(path)

    def create(self, manifest: Dict[str, Any]) -> Flow[Optional[RunInfo]]:
        meta = manifest["metadata"]
        ns, name = meta["namespace"], meta["name"]
        prefix = "session" if "session" in (manifest.get("spec") or {}).get("mode", {}) else "apply"
        path = self.manifest_path(ns, name, prefix)
        existing = self._own_file(ns, name)
        if existing is not None:
            raise ConflictError(f"run {ns}/{name} exists ({existing})")
        # A Run of that name from another file (krt up --runs): a second one would be skipped as a
        # duplicate, and waiting on the name would wait on the other.
        listed = yield from self.get(ns, name)
        if listed is not None:
            raise ConflictError(f"run {ns}/{name} exists (phase {listed.phase}; delete it, or choose another name)")
        self._write(path, manifest)
        return None

    def terminate(self, namespace: str, name: str, mode: str) -> Flow[None]:
        path = self._own_file(namespace, name)
        if path is None:
            raise UnsupportedError(f"run {namespace}/{name} has no manifest of this SDK or krt in {self._runs_dir}: "
                                   "end it by editing its own manifest (spec.termination)")
        doc = yaml.safe_load(path.read_text())
        doc.setdefault("spec", {})["termination"] = {"mode": mode}
        self._write(path, doc)
        return done(None)

    def delete(self, namespace: str, name: str) -> Flow[None]:
        path = self._own_file(namespace, name)
        if path is not None:
            path.unlink(missing_ok=True)
        return done(None)


#: Long waits (a sandbox coming up or ending) are logged here at INFO, once a second has passed
#: and at each change of where the Run stands: ``logging.basicConfig(level=logging.INFO)`` shows them.
log = logging.getLogger("kruntimes")

#: How long a wait logs nothing: a quick one stays silent.
QUIET_WAIT = 1.0


def wait_for(store: RunStore, namespace: str, name: str, want: Callable[[RunInfo], bool], what: str,
             timeout: float) -> Flow[RunInfo]:
    """Polls the Run until ``want`` holds; raises :class:`RunEndedError` (the subclass of its
    phase and reason: :func:`~kruntimes.errors.ended_error`) if it ends otherwise,
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
            raise ended_error(run.phase, run.reason,
                              f"run {namespace}/{name} ended {run.phase}{_why(run)} before {what}")
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


def _why(run: RunInfo) -> str:
    """`` (reason: message)``, or "" when the status says neither."""
    return f" ({run.reason}: {run.message})" if run.reason or run.message else ""


def _last_seen(run: Optional[RunInfo]) -> str:
    """What a wait saw last: the phase, and why the Run waits when its status says."""
    if run is None:
        return "not listed"
    why = ": ".join(part for part in (run.reason, run.message) if part)
    return f"phase {run.phase}, {why}" if why else f"phase {run.phase}"
