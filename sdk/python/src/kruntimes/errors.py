"""Typed errors: one class per code of the gateway's error table
(``docs/api.md``), grouped by status, plus the few the client raises itself.

Every error carries ``status`` (the HTTP status of the answer that raised it,
from the gateway or the Kubernetes API — or, when the client read it from
``krt up``'s ``runs.json``, the status the gateway would answer: 404 for no
such Run; 0 for the client's own errors: network, configuration, waiting),
``code`` (the stable error code, e.g. ``NotFound``), ``message``,
``invocation_id`` (the gateway's ``X-Kruntimes-Invocation-Id``),
``retry_after`` (seconds, from ``Retry-After`` on 429 and 503), ``source``
(``"gateway"``, ``"kubernetes"`` or ``"client"``) and, when the answer is about
the Run's state, its ``phase`` and ``reason`` ("" otherwise).

Nothing is retried implicitly. The retry contract (``docs/api.md``): a 429 or
503 did not run and may be retried after ``retry_after``; 4xx answers did not
run and will not as they are — ``RunEndedError`` and ``RunFailedError`` (410,
409) never on that Run; a ``ServerError`` (500, and 504) ran or may have run
(``OutcomeUnknownError``), so retrying may run the call twice.
"""

from __future__ import annotations

import email.utils
import json
import time
from typing import Any, Dict, Mapping, Optional, Type

__all__ = [
    "KruntimesError",
    "InvalidRequestError",
    "InvalidPathError",
    "InvalidJsonError",
    "InvalidInvocationIdError",
    "BadRequestError",
    "UnauthenticatedError",
    "PermissionDeniedError",
    "NotFoundError",
    "MethodNotAllowedError",
    "ConflictError",
    "PayloadTooLargeError",
    "HeadersTooLargeError",
    "RangeNotSatisfiableError",
    "BusyError",
    "UnavailableError",
    "NotReadyError",
    "OwnerUnavailableError",
    "StaleOwnerError",
    "OverloadedError",
    "AuthUnavailableError",
    "ArtifactStoreUnavailableError",
    "ServerError",
    "FunctionError",
    "WorkerCrashedError",
    "InvalidOutputError",
    "InternalError",
    "DeadlineExceededError",
    "OutcomeUnknownError",
    "NetworkError",
    "WaitTimeoutError",
    "RunEndedError",
    "RunFailedError",
    "RunTimeoutError",
    "RunCancelledError",
    "RunLostError",
    "TaskStartFailedError",
    "InvalidSpecError",
    "OperationFailedError",
    "CommandExitError",
    "ArtifactIntegrityError",
    "UnsupportedError",
    "ConfigError",
]


class KruntimesError(Exception):
    """An error answered by the gateway or the Kubernetes API, or raised by the client."""

    #: HTTP status this class stands for (0: not an HTTP answer).
    default_status = 0
    #: Error code this class stands for ("" for the group classes).
    default_code = ""

    def __init__(
        self,
        message: str,
        *,
        status: Optional[int] = None,
        code: Optional[str] = None,
        invocation_id: Optional[str] = None,
        retry_after: Optional[float] = None,
        source: str = "client",
        phase: str = "",
        reason: str = "",
    ) -> None:
        self.status: int = self.default_status if status is None else status
        self.code: str = code or self.default_code or "Unknown"
        self.message = message
        self.invocation_id = invocation_id
        self.retry_after = retry_after
        self.source = source
        #: The Run's phase, when the error is about its state (``RunEnded``, ``RunFailed``, a
        #: pending ``NotReady``, a wait's errors); "" otherwise.
        self.phase = phase
        #: The Run's reason, with ``phase``.
        self.reason = reason
        where = f" (invocation {invocation_id})" if invocation_id else ""
        super().__init__(f"{self.status} {self.code}: {message}{where}")


class InvalidRequestError(KruntimesError):
    """400: the request was malformed; it did not run."""

    default_status = 400


class InvalidPathError(InvalidRequestError):
    """400 ``InvalidPath``: not an API route, or a workspace path that is absolute, has ``..`` or escapes."""

    default_code = "InvalidPath"


class InvalidJsonError(InvalidRequestError):
    """400 ``InvalidJson``: the body is not JSON."""

    default_code = "InvalidJson"


class InvalidInvocationIdError(InvalidRequestError):
    """400 ``InvalidInvocationId``: empty, over 128 bytes or not visible ASCII."""

    default_code = "InvalidInvocationId"


class BadRequestError(InvalidRequestError):
    """400 ``BadRequest``: any other malformed request (or a file that is not of the right kind)."""

    default_code = "BadRequest"


class UnauthenticatedError(KruntimesError):
    """401 ``Unauthenticated``: missing, invalid or expired token."""

    default_status = 401
    default_code = "Unauthenticated"


class PermissionDeniedError(KruntimesError):
    """403 ``Forbidden``: authenticated, but RBAC (``runs/invoke``, ``runs/session``) or the policy says no."""

    default_status = 403
    default_code = "Forbidden"


class NotFoundError(KruntimesError):
    """404 ``NotFound``: no such Run (or Run UID, or workspace file)."""

    default_status = 404
    default_code = "NotFound"


class MethodNotAllowedError(KruntimesError):
    """405 ``MethodNotAllowed``."""

    default_status = 405
    default_code = "MethodNotAllowed"


class ConflictError(KruntimesError):
    """409: a Run of that name exists, or the object changed meanwhile (the Kubernetes API's
    ``AlreadyExists``, ``Conflict``); the gateway's ``Conflict``: a background process's stdin is
    closed or it has ended (``send_stdin``), or it has no terminal (``resize``)."""

    default_status = 409
    default_code = "AlreadyExists"


class PayloadTooLargeError(KruntimesError):
    """413 ``PayloadTooLarge``: body over 1 MiB (invoke) or a file over 32 MiB."""

    default_status = 413
    default_code = "PayloadTooLarge"


class HeadersTooLargeError(KruntimesError):
    """431 ``HeadersTooLarge``: request headers over 16 KiB."""

    default_status = 431
    default_code = "HeadersTooLarge"


class RangeNotSatisfiableError(KruntimesError):
    """416 ``RangeNotSatisfiable``: an artifact's byte range starts at or past its end (any range
    of an empty artifact); the message gives the artifact's size."""

    default_status = 416
    default_code = "RangeNotSatisfiable"


class BusyError(KruntimesError):
    """429 ``Busy``: the function has an in-flight invocation, or the session queue is full.

    The call did not run; it may be retried after ``retry_after`` seconds.
    """

    default_status = 429
    default_code = "Busy"


class UnavailableError(KruntimesError):
    """503: the call did not run; it may be retried after ``retry_after`` seconds."""

    default_status = 503


class NotReadyError(UnavailableError):
    """503 ``NotReady``: the Run exists but is not Ready yet (pending — ``phase`` and ``reason``
    say why —, registering, between owners)."""

    default_code = "NotReady"


class OwnerUnavailableError(UnavailableError):
    """503 ``OwnerUnavailable``: the owner is unreachable or its table entry is stale."""

    default_code = "OwnerUnavailable"


class StaleOwnerError(UnavailableError):
    """503 ``StaleOwner``: the owner no longer holds this registration."""

    default_code = "StaleOwner"


class OverloadedError(UnavailableError):
    """503 ``Overloaded``: the gateway's in-flight limit is reached."""

    default_code = "Overloaded"


class AuthUnavailableError(UnavailableError):
    """503 ``AuthUnavailable``: the authentication backend failed on a cache miss."""

    default_code = "AuthUnavailable"


class ArtifactStoreUnavailableError(UnavailableError):
    """503 ``ArtifactStoreUnavailable``: the artifact store failed (or refused runtimed's
    credentials) while listing or reading; nothing was lost: ask again after ``retry_after``."""

    default_code = "ArtifactStoreUnavailable"


class ServerError(KruntimesError):
    """500: the call ran (or started) and failed; retrying may run it twice."""

    default_status = 500


class FunctionError(ServerError):
    """500 ``FunctionError``: the handler raised (Python) or exited non-zero (Bash)."""

    default_code = "FunctionError"


class WorkerCrashedError(ServerError):
    """500 ``WorkerCrashed``: the worker died during the call."""

    default_code = "WorkerCrashed"


class InvalidOutputError(ServerError):
    """500 ``InvalidOutput``: the output is over 1 MiB or not JSON."""

    default_code = "InvalidOutput"


class OutcomeUnknownError(ServerError):
    """500 ``OutcomeUnknown``: the call reached the owner and may have run, but no outcome came
    back (the Run was deleted, terminated or moved while it ran, or the owner's connection broke)."""

    default_code = "OutcomeUnknown"


class InternalError(ServerError):
    """500 ``Internal``: an unexpected failure in the gateway or runtimed."""

    default_code = "Internal"


class DeadlineExceededError(KruntimesError):
    """504 ``DeadlineExceeded``: the invocation timeout passed; the handler was killed."""

    default_status = 504
    default_code = "DeadlineExceeded"


class NetworkError(KruntimesError):
    """The connection failed or broke, or the client's own timeout passed.

    Whether the call ran is unknown.
    """

    default_code = "NetworkError"


class WaitTimeoutError(KruntimesError):
    """A Run did not reach the awaited phase in time.

    ``phase`` and ``reason`` are the Run's when last seen (empty if it was not listed); the
    message adds the status message, which says why a ``Pending`` Run waits.
    """

    default_code = "WaitTimeout"


class RunEndedError(KruntimesError):
    """The Run has ended and will not serve again: ``phase`` and ``reason`` are its own.

    Answered by the gateway as 410 ``RunEnded`` (``Succeeded``, ``Timeout``, ``Cancelled``,
    ``Finalizing``) to a call on a Run that ended; the call did not run. Raised by the client
    (status 0, ``code`` the phase) when an awaited Run ends before the awaited phase, or when a
    task Run ends without an exit of its own (:meth:`kruntimes.Tasks.run`); then the subclass
    says how: :class:`RunTimeoutError`, :class:`RunCancelledError`, :class:`RunLostError`,
    :class:`TaskStartFailedError`, :class:`InvalidSpecError`.
    """

    default_status = 410
    default_code = "RunEnded"

    def __init__(self, message: str, *, result: Any = None, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        #: Raised by :meth:`kruntimes.Tasks.run`: the task's :class:`kruntimes.TaskResult` as its
        #: Run ended (output tails and exit code when its process ran). None otherwise.
        self.result = result


class RunFailedError(RunEndedError):
    """409 ``RunFailed``: the Run has failed (``RegistrationFailed``, ``RuntimeFailed``, …);
    the message says why. Also raised by a wait whose Run ended ``Failed`` (status 0)."""

    default_status = 409
    default_code = "RunFailed"


# Raised by the client only, from the phase and reason an awaited Run ended with (status 0,
# ``code`` the phase); the gateway answers such Runs with RunEnded or RunFailed.


class RunTimeoutError(RunEndedError):
    """An awaited Run ended ``Timeout``: its ``spec.timeout`` passed (reason ``RunTimeout``; its
    processes were killed) or it was idle too long (``IdleTimeout``)."""

    default_status = 0
    default_code = "Timeout"


class RunCancelledError(RunEndedError):
    """An awaited Run ended ``Cancelled``: ``spec.termination: Immediate`` (reason
    ``Terminated``), or its owner was lost while it was being ended (``OwnerLost``)."""

    default_status = 0
    default_code = "Cancelled"


class RunLostError(RunFailedError):
    """An awaited Run failed because its owner Pod was lost past ``retryPolicy.maxRetries``
    (reason ``OwnerLost``): a new Run may succeed."""

    default_status = 0
    default_code = "Failed"


class TaskStartFailedError(RunFailedError):
    """A task Run's process could not be started on any attempt (reason ``StartFailed``; the
    message says why, e.g. a script Runtime given shell commands); it did not run."""

    default_status = 0
    default_code = "Failed"


class InvalidSpecError(RunFailedError, InvalidRequestError):
    """An awaited Run failed because its control plane refused its spec (reason ``InvalidSpec``;
    the message names the field). Also an :class:`InvalidRequestError`, as the Kubernetes API's
    422 for a spec its schema refuses at creation: ``except InvalidRequestError`` catches both."""

    default_status = 0
    default_code = "Failed"


def ended_error(phase: str, reason: str, message: str, *, result: Any = None) -> RunEndedError:
    """The error for an awaited Run that ended ``phase`` (with ``reason``) otherwise than awaited."""
    cls: Type[RunEndedError] = RunEndedError
    if phase == "Timeout":
        cls = RunTimeoutError
    elif phase == "Cancelled":
        cls = RunCancelledError
    elif phase == "Failed":
        cls = {"StartFailed": TaskStartFailedError, "OwnerLost": RunLostError,
               "InvalidSpec": InvalidSpecError}.get(reason, RunFailedError)
    return cls(message, status=0, code=phase, phase=phase, reason=reason, result=result)


class OperationFailedError(KruntimesError):
    """A session file operation ran and failed (its result's state is ``Failed``)."""

    default_status = 200
    default_code = "OperationFailed"

    def __init__(self, message: str, *, result: Any = None, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        #: The :class:`kruntimes.CommandResult` of the operation.
        self.result = result


class CommandExitError(OperationFailedError):
    """Raised by :meth:`kruntimes.CommandResult.check` for a command that did not succeed, and by
    :meth:`kruntimes.ProcessResult.check` for a background process that did not exit 0 (then
    ``result`` is the :class:`kruntimes.ProcessResult`)."""

    default_code = "CommandFailed"


class ArtifactIntegrityError(KruntimesError):
    """A downloaded or read artifact is not what the gateway said it is: its SHA-256 (or size)
    differs from ``X-Kruntimes-Artifact-Sha256`` (``X-Kruntimes-Artifact-Size``). Nothing was
    written under the target path; the download may be tried again."""

    default_code = "ArtifactIntegrity"

    def __init__(self, message: str, *, name: str = "", expected_sha256: str = "", actual_sha256: str = "",
                 expected_size: Optional[int] = None, actual_size: Optional[int] = None, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        #: The artifact's name.
        self.name = name
        #: What the gateway announced, and what arrived.
        self.expected_sha256 = expected_sha256
        self.actual_sha256 = actual_sha256
        self.expected_size = expected_size
        self.actual_size = actual_size


class UnsupportedError(KruntimesError):
    """This client cannot do that (e.g. create a sandbox without a control plane)."""

    default_code = "Unsupported"


class ConfigError(KruntimesError):
    """A kubeconfig, state directory or argument that the client cannot use."""

    default_code = "InvalidConfig"


def _subclasses(cls: Type[KruntimesError]) -> "list[Type[KruntimesError]]":
    out = []
    for sub in cls.__subclasses__():
        out.append(sub)
        out.extend(_subclasses(sub))
    return out


# The gateway's codes; the client-side classes (status 0 or 200) never come from an answer.
_BY_CODE: Dict[str, Type[KruntimesError]] = {
    c.default_code: c for c in _subclasses(KruntimesError) if c.default_code and c.default_status not in (0, 200)
}
# ConflictError stands for two codes: Kubernetes' AlreadyExists and the gateway's Conflict.
_BY_CODE["Conflict"] = ConflictError
_BY_STATUS: Dict[int, Type[KruntimesError]] = {
    400: InvalidRequestError,
    401: UnauthenticatedError,
    403: PermissionDeniedError,
    404: NotFoundError,
    405: MethodNotAllowedError,
    409: ConflictError,
    410: RunEndedError,
    413: PayloadTooLargeError,
    416: RangeNotSatisfiableError,
    422: InvalidRequestError,
    429: BusyError,
    431: HeadersTooLargeError,
    500: ServerError,
    503: UnavailableError,
    504: DeadlineExceededError,
}


def error_class(status: int, code: str) -> Type[KruntimesError]:
    """The class for an answer: by code first (the gateway's table), else by status."""
    cls = _BY_CODE.get(code)
    if cls is not None and cls.default_status == status:
        return cls
    if status in _BY_STATUS:
        return _BY_STATUS[status]
    if 500 <= status < 600:
        return ServerError if status != 502 else UnavailableError
    return KruntimesError


def parse_retry_after(value: Optional[str]) -> Optional[float]:
    """``Retry-After`` as seconds (delta-seconds or an HTTP date)."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def from_answer(source: str, status: int, headers: Mapping[str, str], body: bytes) -> KruntimesError:
    """The typed error for an HTTP answer of the gateway (``{"error": {…}}``) or the
    Kubernetes API (a ``Status`` object)."""
    code, message, invocation_id = "", "", headers.get("x-kruntimes-invocation-id")
    phase = reason = ""
    try:
        doc = json.loads(body)
    except ValueError:
        doc = None
    if isinstance(doc, dict) and isinstance(doc.get("error"), dict):
        err = doc["error"]
        code = str(err.get("code") or "")
        message = str(err.get("message") or "")
        invocation_id = err.get("invocationId") or invocation_id
        phase = str(err.get("phase") or "")
        reason = str(err.get("reason") or "")
    elif isinstance(doc, dict) and doc.get("kind") == "Status":
        code = str(doc.get("reason") or "")
        message = str(doc.get("message") or "")
    else:
        message = body[:2048].decode("utf-8", "replace")
    cls = error_class(status, code)
    return cls(
        message or f"HTTP {status}",
        status=status,
        code=code or None,
        invocation_id=invocation_id,
        retry_after=parse_retry_after(headers.get("retry-after")),
        source=source,
        phase=phase,
        reason=reason,
    )


def from_event(error: Any, invocation_id: Optional[str] = None) -> KruntimesError:
    """The typed error of a stream's ``failed`` event (its ``error`` field)."""
    err = error.get("error", error) if isinstance(error, dict) else {}
    code = str(err.get("code") or "Internal") if isinstance(err, dict) else "Internal"
    message = str(err.get("message") or "the stream failed") if isinstance(err, dict) else str(error)
    status = _BY_CODE[code].default_status if code in _BY_CODE else 500
    cls = error_class(status, code)
    return cls(message, status=status, code=code,
               invocation_id=(err.get("invocationId") if isinstance(err, dict) else None) or invocation_id,
               source="gateway",
               phase=str(err.get("phase") or "") if isinstance(err, dict) else "",
               reason=str(err.get("reason") or "") if isinstance(err, dict) else "")
