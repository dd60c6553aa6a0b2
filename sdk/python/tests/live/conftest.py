"""Clients of a live stack, named by the environment the Rust drivers set
(``krt/tests/sdk_python.rs``): ``KRT_TEST_MODE`` is ``embedded`` (a ``krt up``
whose state directory is ``KRT_TEST_STATE_DIR``) or ``kubernetes`` (the API
server harness: Runs created through the API, kubeconfigs per user).

Common to both: ``KRT_TEST_NAMESPACE``, ``KRT_TEST_FUNCTION`` (a Python function
Run with ``invocationTimeoutSeconds: 2`` whose handler greets, sleeps, raises
or writes ``report.txt`` into ``$KRUNTIME_ARTIFACTS_DIR`` on request),
``KRT_TEST_SESSION_RUNTIME``, ``KRT_TEST_GATEWAY``, ``KRT_TEST_GATEWAY_CA`` and
``KRT_TEST_TOKEN`` (a token that may do everything).
"""

import os
from typing import Iterator

import pytest

from kruntimes import Client, Sandbox


def env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        pytest.fail(f"{name} is not set: run this suite through krt/tests/sdk_python.rs")
    return value


MODE = os.environ.get("KRT_TEST_MODE", "")


def pytest_collection_modifyitems(config, items):
    if not MODE:
        pytest.exit("KRT_TEST_MODE is not set: the live suite runs through krt/tests/sdk_python.rs", returncode=4)


def make_client(cls=Client, who: str = "", token=None):
    """A client of the stack: the default user, or ``bob`` (no permission to invoke or use sessions)."""
    if MODE == "embedded":
        if who == "bob":
            token = env("KRT_TEST_FORBIDDEN_TOKEN")
        return cls.from_state_dir(env("KRT_TEST_STATE_DIR"), token=token, namespace=env("KRT_TEST_NAMESPACE"))
    kubeconfig = env("KRT_TEST_KUBECONFIG_BOB" if who == "bob" else "KRT_TEST_KUBECONFIG")
    return cls.from_kubeconfig(kubeconfig, namespace=env("KRT_TEST_NAMESPACE"), token=token)


def explicit_client() -> Client:
    """A client of the gateway alone (no control plane), with a token that may do everything."""
    return Client(gateway=env("KRT_TEST_GATEWAY"), token=env("KRT_TEST_TOKEN"), ca_file=env("KRT_TEST_GATEWAY_CA"))


@pytest.fixture
def client() -> Iterator[Client]:
    with make_client() as c:
        yield c


@pytest.fixture
def function_name() -> str:
    return env("KRT_TEST_FUNCTION")


@pytest.fixture
def runtime() -> str:
    return env("KRT_TEST_SESSION_RUNTIME")


@pytest.fixture
def namespace() -> str:
    return env("KRT_TEST_NAMESPACE")


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    """One sandbox shared by a module's tests, closed at its end."""
    with make_client() as c, Sandbox.create(c, runtime=env("KRT_TEST_SESSION_RUNTIME"), env={"GREETING": "hi"}) as sb:
        yield sb
