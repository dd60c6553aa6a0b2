"""Every code of the gateway's error table maps to its class, with status,
code, invocation id and Retry-After; Kubernetes Status objects map by status."""

import json

import pytest

import kruntimes
from kruntimes import errors

# docs/api.md, the error table: (status, code, class).
TABLE = [
    (400, "InvalidPath", kruntimes.InvalidPathError),
    (400, "InvalidJson", kruntimes.InvalidJsonError),
    (400, "InvalidInvocationId", kruntimes.InvalidInvocationIdError),
    (400, "BadRequest", kruntimes.BadRequestError),
    (401, "Unauthenticated", kruntimes.UnauthenticatedError),
    (403, "Forbidden", kruntimes.PermissionDeniedError),
    (404, "NotFound", kruntimes.NotFoundError),
    (405, "MethodNotAllowed", kruntimes.MethodNotAllowedError),
    (413, "PayloadTooLarge", kruntimes.PayloadTooLargeError),
    (431, "HeadersTooLarge", kruntimes.HeadersTooLargeError),
    (416, "RangeNotSatisfiable", kruntimes.RangeNotSatisfiableError),
    (429, "Busy", kruntimes.BusyError),
    (503, "NotReady", kruntimes.NotReadyError),
    (409, "RunFailed", kruntimes.RunFailedError),
    (409, "Conflict", kruntimes.ConflictError),
    (410, "RunEnded", kruntimes.RunEndedError),
    (503, "OwnerUnavailable", kruntimes.OwnerUnavailableError),
    (503, "StaleOwner", kruntimes.StaleOwnerError),
    (503, "Overloaded", kruntimes.OverloadedError),
    (503, "AuthUnavailable", kruntimes.AuthUnavailableError),
    (503, "ArtifactStoreUnavailable", kruntimes.ArtifactStoreUnavailableError),
    (500, "FunctionError", kruntimes.FunctionError),
    (500, "WorkerCrashed", kruntimes.WorkerCrashedError),
    (500, "InvalidOutput", kruntimes.InvalidOutputError),
    (500, "Internal", kruntimes.InternalError),
    (500, "OutcomeUnknown", kruntimes.OutcomeUnknownError),
    (504, "DeadlineExceeded", kruntimes.DeadlineExceededError),
]


def gateway_body(code, message="m", invocation_id="inv-1"):
    return json.dumps({"error": {"code": code, "message": message, "invocationId": invocation_id}}).encode()


@pytest.mark.parametrize("status,code,cls", TABLE)
def test_every_code_of_the_table_has_its_class(status, code, cls):
    headers = {"retry-after": "2"} if status in (429, 503) else {}
    e = errors.from_answer("gateway", status, headers, gateway_body(code))
    assert type(e) is cls
    assert isinstance(e, kruntimes.KruntimesError)
    assert (e.status, e.code, e.message, e.invocation_id, e.source) == (status, code, "m", "inv-1", "gateway")
    assert e.retry_after == (2.0 if status in (429, 503) else None)
    assert code in str(e) and "inv-1" in str(e)


def test_groups_catch_their_codes():
    for code in ("NotReady", "OwnerUnavailable", "StaleOwner", "Overloaded", "AuthUnavailable",
                 "ArtifactStoreUnavailable"):
        assert isinstance(errors.from_answer("gateway", 503, {}, gateway_body(code)), kruntimes.UnavailableError)
    for code in ("FunctionError", "WorkerCrashed", "InvalidOutput", "OutcomeUnknown", "Internal"):
        assert isinstance(errors.from_answer("gateway", 500, {}, gateway_body(code)), kruntimes.ServerError)
    for code in ("InvalidPath", "InvalidJson", "InvalidInvocationId", "BadRequest"):
        assert isinstance(errors.from_answer("gateway", 400, {}, gateway_body(code)), kruntimes.InvalidRequestError)


def test_unknown_codes_fall_back_to_their_status_class():
    e = errors.from_answer("gateway", 503, {}, gateway_body("SomethingNew"))
    assert type(e) is kruntimes.UnavailableError and e.code == "SomethingNew"
    # A known code with another status is classed by the status it came with.
    e = errors.from_answer("gateway", 500, {}, gateway_body("NotFound"))
    assert type(e) is kruntimes.ServerError
    e = errors.from_answer("gateway", 418, {}, b"teapot")
    assert type(e) is kruntimes.KruntimesError and e.message == "teapot" and e.code == "Unknown"


def test_the_invocation_id_header_is_used_when_the_body_has_none():
    e = errors.from_answer("gateway", 502, {"x-kruntimes-invocation-id": "h-1"}, b"<html>bad gateway</html>")
    assert isinstance(e, kruntimes.UnavailableError) and e.invocation_id == "h-1"


def test_kubernetes_status_objects_map_by_status():
    def status(code, reason):
        return json.dumps({"kind": "Status", "status": "Failure", "reason": reason, "message": "msg", "code": code}).encode()

    cases = [(401, "Unauthorized", kruntimes.UnauthenticatedError), (403, "Forbidden", kruntimes.PermissionDeniedError),
             (404, "NotFound", kruntimes.NotFoundError), (409, "AlreadyExists", kruntimes.ConflictError),
             (409, "Conflict", kruntimes.ConflictError), (422, "Invalid", kruntimes.InvalidRequestError),
             (429, "TooManyRequests", kruntimes.BusyError), (500, "InternalError", kruntimes.ServerError),
             (503, "ServiceUnavailable", kruntimes.UnavailableError), (504, "Timeout", kruntimes.DeadlineExceededError)]
    for code, reason, cls in cases:
        e = errors.from_answer("kubernetes", code, {}, status(code, reason))
        assert isinstance(e, cls), (code, reason, type(e))
        assert (e.status, e.code, e.message, e.source) == (code, reason, "msg", "kubernetes")


def test_retry_after_accepts_seconds_and_http_dates():
    assert errors.parse_retry_after("3") == 3.0
    assert errors.parse_retry_after(None) is None
    assert errors.parse_retry_after("soon") is None
    assert errors.parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0


def test_a_failed_stream_event_raises_its_code():
    e = errors.from_event({"code": "Internal", "message": "operation was dropped", "invocationId": "i"})
    assert type(e) is kruntimes.InternalError and e.status == 500 and e.invocation_id == "i"
    assert type(errors.from_event({"code": "Busy", "message": "full"})) is kruntimes.BusyError
    e = errors.from_event({"code": "Conflict", "message": "stdin is closed"})
    assert type(e) is kruntimes.ConflictError and (e.status, e.code) == (409, "Conflict")


def test_client_side_errors_say_so():
    e = kruntimes.WaitTimeoutError("slow")
    assert (e.status, e.code, e.source) == (0, "WaitTimeout", "client")
    e = kruntimes.RunFailedError("ended", status=0, code="Failed", phase="Failed", reason="RegistrationFailed")
    assert (e.status, e.code, e.phase, e.reason) == (0, "Failed", "Failed", "RegistrationFailed")
    assert isinstance(e, kruntimes.RunEndedError)
    # How an awaited Run ended, by phase and reason; the classes are the client's, never an answer's.
    for phase, reason, cls in [("Timeout", "RunTimeout", kruntimes.RunTimeoutError),
                               ("Cancelled", "Terminated", kruntimes.RunCancelledError),
                               ("Failed", "StartFailed", kruntimes.TaskStartFailedError),
                               ("Failed", "OwnerLost", kruntimes.RunLostError),
                               ("Failed", "InvalidSpec", kruntimes.InvalidSpecError),
                               ("Failed", "RegistrationFailed", kruntimes.RunFailedError),
                               ("Succeeded", "Drained", kruntimes.RunEndedError)]:
        e = errors.ended_error(phase, reason, "m", result="r")
        assert type(e) is cls and (e.status, e.code, e.phase, e.reason, e.result) == (0, phase, phase, reason, "r")
        assert isinstance(e, kruntimes.RunFailedError) == (phase == "Failed")
    for code in ("Timeout", "Cancelled", "Failed"):
        assert type(errors.from_answer("gateway", 410, {}, gateway_body(code))) is kruntimes.RunEndedError


def test_ended_and_failed_runs_carry_their_phase_and_reason_and_are_not_retryable():
    body = json.dumps({"error": {"code": "RunFailed", "message": "run x failed (RegistrationFailed): SyntaxError",
                                 "phase": "Failed", "reason": "RegistrationFailed"}}).encode()
    e = errors.from_answer("gateway", 409, {}, body)
    assert type(e) is kruntimes.RunFailedError and isinstance(e, kruntimes.RunEndedError)
    assert (e.phase, e.reason, e.retry_after) == ("Failed", "RegistrationFailed", None)
    assert not isinstance(e, (kruntimes.UnavailableError, kruntimes.ServerError, kruntimes.ConflictError))
    body = json.dumps({"error": {"code": "RunEnded", "message": "m", "phase": "Timeout",
                                 "reason": "IdleTimeout"}}).encode()
    e = errors.from_answer("gateway", 410, {}, body)
    assert type(e) is kruntimes.RunEndedError and (e.phase, e.reason) == ("Timeout", "IdleTimeout")
    # A pending Run's NotReady says why it waits; other answers carry no phase.
    body = json.dumps({"error": {"code": "NotReady", "message": "m", "phase": "Pending",
                                 "reason": "NoIdlePod"}}).encode()
    e = errors.from_answer("gateway", 503, {"retry-after": "1"}, body)
    assert type(e) is kruntimes.NotReadyError and (e.phase, e.reason, e.retry_after) == ("Pending", "NoIdlePod", 1.0)
    assert errors.from_answer("gateway", 404, {}, gateway_body("NotFound")).phase == ""
    e = errors.from_event({"code": "RunEnded", "message": "closed", "phase": "Succeeded", "reason": "Drained"})
    assert type(e) is kruntimes.RunEndedError and (e.status, e.phase) == (410, "Succeeded")


def test_a_state_dir_no_krt_up_holds_is_refused_in_words(tmp_path):
    import fcntl
    import json as _json

    (tmp_path / "client.json").write_text(_json.dumps({"gateway": "https://127.0.0.1:1", "token": "t"}))
    # No lock file, then a lock file nobody holds: the stack is gone.
    for _ in range(2):
        with pytest.raises(kruntimes.ConfigError) as e:
            kruntimes.Client.from_state_dir(str(tmp_path))
        assert f"no krt up running for {tmp_path}" in e.value.message
        (tmp_path / "krt-up.lock").write_text("{}")
    # Held (as krt up holds it for its life): the client is made.
    with open(tmp_path / "krt-up.lock") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        kruntimes.Client.from_state_dir(str(tmp_path)).close()
