"""Function Runs through the gateway: invoke, and every error the SDK can
provoke, typed by code with status, invocation id and Retry-After; call, and
the artifacts an invocation leaves."""

import hashlib
import threading
import time
import uuid

import pytest

import kruntimes

from .conftest import MODE, env, explicit_client, make_client


def test_invoke_returns_the_handlers_json_output(client, function_name):
    fn = client.function(function_name)
    out = fn.invoke({"name": "X"})
    assert out["message"] == "hello X" and isinstance(out["pid"], int)
    assert fn.invoke()["message"] == "hello world"
    assert fn.endpoint is not None and fn.endpoint.endswith(":invoke")
    assert fn.invoke({"name": "ünïcødé ✓"})["message"] == "hello ünïcødé ✓"


def test_an_invocations_artifacts_come_back_with_its_answer(client, function_name):
    """On ``krt up`` (every Runtime has a store) the handler's report comes back as a ref named under
    the invocation id and is read by name through ``client.artifacts``; ``invoke`` gives the value
    alone. On the API server harness (no store) the handler has no directory: no refs."""
    fn = client.function(function_name)
    inv = fn.call({"report": "hello report"}, invocation_id="sdk-1")
    assert inv.invocation_id == "sdk-1"
    if MODE != "embedded":
        assert (inv.output, inv.artifacts) == ({"reported": 12, "stored": False}, [])
        assert fn.invoke({"report": "again"}) == {"reported": 5, "stored": False}
        return
    assert inv.output == {"reported": 12, "stored": True}
    [ref] = inv.artifacts
    assert (ref.name, ref.size, ref.sha256) == ("invocations/sdk-1/report.txt", 12,
                                                hashlib.sha256(b"hello report").hexdigest())
    assert ref.uri.startswith("file://") and ref.uri.endswith("/invocations/sdk-1/report.txt"), ref.uri
    assert client.artifacts.read(function_name, ref) == b"hello report"
    assert client.artifacts.read(function_name, ref.name, offset=6) == b"report"
    # invoke: the same kind of answer, unwrapped to the handler's value.
    assert fn.invoke({"report": "again"}, invocation_id="sdk-2") == {"reported": 5, "stored": True}
    assert client.artifacts.read(function_name, "invocations/sdk-2/report.txt") == b"again"
    # Nothing written: the value as it is, no refs, and the id the gateway made up.
    plain = fn.call({"name": "plain"})
    assert plain.output["message"] == "hello plain" and plain.artifacts == [] and plain.invocation_id


def test_a_raising_handler_is_a_function_error_with_the_invocation_id(client, function_name):
    with pytest.raises(kruntimes.FunctionError) as e:
        client.function(function_name).invoke({"raise": "boom"}, invocation_id="sdk-raise-1")
    assert (e.value.status, e.value.code, e.value.invocation_id) == (500, "FunctionError", "sdk-raise-1")
    assert "ValueError" in e.value.message and "bad boom" in e.value.message
    assert isinstance(e.value, kruntimes.ServerError)


def test_a_crashing_worker_and_an_oversized_output_are_their_own_errors(client, function_name):
    fn = client.function(function_name)
    with pytest.raises(kruntimes.WorkerCrashedError) as e:
        fn.invoke({"crash": True})
    assert e.value.status == 500
    with pytest.raises(kruntimes.InvalidOutputError):
        fn.invoke({"big": True})
    assert fn.invoke({"name": "again"})["message"] == "hello again"


def test_a_function_that_cannot_load_has_failed_for_good(client):
    # The retry contract: 409 RunFailed, with the Run's phase and reason, never retryable.
    with pytest.raises(kruntimes.RunFailedError) as e:
        client.function(env("KRT_TEST_BROKEN_FUNCTION")).invoke({})
    assert (e.value.status, e.value.code, e.value.phase, e.value.reason) == (409, "RunFailed", "Failed",
                                                                             "RegistrationFailed")
    assert "SyntaxError" in e.value.message and e.value.retry_after is None
    assert isinstance(e.value, kruntimes.RunEndedError)
    assert not isinstance(e.value, (kruntimes.UnavailableError, kruntimes.ServerError))


def test_a_bad_token_is_unauthenticated(function_name):
    with make_client(token="not-a-valid-token") as c:
        with pytest.raises(kruntimes.UnauthenticatedError) as e:
            c.function(function_name).invoke({})
    assert (e.value.status, e.value.code, e.value.source) == (401, "Unauthenticated", "gateway")
    assert e.value.invocation_id


def test_a_caller_without_the_permission_is_denied(function_name):
    with make_client(who="bob") as bob:
        with pytest.raises(kruntimes.PermissionDeniedError) as e:
            bob.function(function_name).invoke({})
    assert (e.value.status, e.value.code, e.value.source) == (403, "Forbidden", "gateway")


def test_unknown_runs_are_not_found(client, namespace):
    with pytest.raises(kruntimes.NotFoundError) as e:
        client.function("no-such-function").invoke({})
    # The control plane's answer: the Kubernetes API, or krt up's runs.json.
    assert (e.value.status, e.value.source) == (404, "kubernetes" if MODE == "kubernetes" else "client")
    made_up = f"{env('KRT_TEST_GATEWAY')}/v1/namespaces/{namespace}/runtimes/python/runs/{uuid.uuid4()}:invoke"
    with explicit_client() as c, pytest.raises(kruntimes.NotFoundError) as e:
        c.function(endpoint=made_up).invoke({})
    assert (e.value.status, e.value.code, e.value.source) == (404, "NotFound", "gateway")


def test_an_oversized_input_is_refused_before_it_runs(client, function_name):
    with pytest.raises(kruntimes.PayloadTooLargeError) as e:
        client.function(function_name).invoke({"name": "x" * (1 << 20)})
    assert (e.value.status, e.value.code) == (413, "PayloadTooLarge")


def test_an_invalid_invocation_id_is_refused(client, function_name):
    with pytest.raises(kruntimes.InvalidInvocationIdError) as e:
        client.function(function_name).invoke({}, invocation_id="x" * 200)
    assert e.value.status == 400 and isinstance(e.value, kruntimes.InvalidRequestError)


def test_a_busy_function_says_when_to_retry_and_is_not_retried(client, function_name):
    fn = client.function(function_name)
    slow = {}
    t = threading.Thread(target=lambda: slow.setdefault("out", fn.invoke({"sleep": 1.5, "name": "slow"})))
    t.start()
    time.sleep(0.3)  # let the slow call reach its worker first
    busy = None
    deadline = time.monotonic() + 1.1
    while busy is None and time.monotonic() < deadline:
        try:
            fn.invoke({"name": "probe"})
        except kruntimes.BusyError as e:
            busy = e
        time.sleep(0.02)
    t.join()
    assert busy is not None, "no 429 while an invocation was in flight"
    assert (busy.status, busy.code) == (429, "Busy")
    assert busy.retry_after is not None and busy.retry_after > 0
    assert slow["out"]["message"] == "hello slow"


def test_a_slow_handler_hits_its_deadline(client, function_name):
    fn = client.function(function_name)
    start = time.monotonic()
    with pytest.raises(kruntimes.DeadlineExceededError) as e:
        fn.invoke({"sleep": 10})
    assert (e.value.status, e.value.code) == (504, "DeadlineExceeded")
    assert time.monotonic() - start < 8, "the Run's invocationTimeoutSeconds is 2"
    assert fn.invoke({"name": "after"})["message"] == "hello after"


def test_an_explicit_client_invokes_by_endpoint(client, function_name):
    endpoint = client.function(function_name)
    endpoint.invoke({})
    with explicit_client() as c:
        assert c.function(endpoint=endpoint.endpoint).invoke({"name": "direct"})["message"] == "hello direct"
        with pytest.raises(kruntimes.UnsupportedError):
            c.function(function_name).invoke({})
