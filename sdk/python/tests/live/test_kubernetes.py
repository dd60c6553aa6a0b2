"""Against the API server harness only: Runs created through the Kubernetes
API, an exec credential plugin, a bad kubeconfig token, and a revoked
RoleBinding taking effect within the gateway's allowed TTL (30 s)."""

import time
from pathlib import Path

import pytest

import kruntimes
from kruntimes import Client, Sandbox
from kruntimes._wire import KUBERNETES, Call

from .conftest import env

pytestmark = pytest.mark.kubernetes


def test_a_sandbox_is_a_run_created_through_the_api(client, runtime, namespace):
    with Sandbox.create(client, runtime=runtime, idle_timeout=600, queue_size=4, operation_timeout=60,
                        timeout=3600) as sb:
        reply = client._transport.send(Call(KUBERNETES, "GET",
                                            f"/apis/kruntimes.io/v1alpha1/namespaces/{namespace}/runs/{sb.name}"))
        run = reply.json()
        assert run["metadata"]["uid"] == sb.uid
        assert run["spec"]["mode"]["session"] == {"idleTimeoutSeconds": 600, "queueSize": 4, "operationTimeout": 60}
        assert run["spec"]["timeout"] == 3600
        assert run["status"]["phase"] == "Ready"
        assert sb.run_info.ca_pem and "BEGIN CERTIFICATE" in sb.run_info.ca_pem
        assert sb.endpoint.startswith(env("KRT_TEST_GATEWAY"))
    run = client._transport.send(Call(KUBERNETES, "GET",
                                      f"/apis/kruntimes.io/v1alpha1/namespaces/{namespace}/runs/{sb.name}")).json()
    assert run["spec"]["termination"] == {"mode": "Drain"}
    assert (run["status"]["phase"], run["status"]["reason"]) == ("Succeeded", "Drained")


def test_an_exec_credential_plugin_authenticates_to_the_api_and_the_gateway(runtime, namespace):
    count = Path(env("KRT_TEST_EXEC_COUNT"))
    before = int(count.read_text()) if count.exists() else 0
    with Client.from_kubeconfig(env("KRT_TEST_KUBECONFIG_EXEC"), namespace=namespace) as c:
        fn = c.function(env("KRT_TEST_FUNCTION"))
        for _ in range(3):
            assert fn.invoke({"name": "exec"})["message"] == "hello exec"
        with Sandbox.create(c, runtime=runtime) as sb:
            assert sb.commands.run("echo via-exec").stdout == "via-exec\n"
    runs = int(count.read_text()) - before
    assert runs == 1, f"the plugin ran {runs} times: its credential is cached"


def test_a_kubeconfig_token_the_api_server_rejects_is_unauthenticated(tmp_path, namespace):
    text = Path(env("KRT_TEST_KUBECONFIG")).read_text()
    bad = tmp_path / "bad.kubeconfig"
    bad.write_text("\n".join("    token: kt-not-a-token" if line.startswith("    token:") else line
                             for line in text.splitlines()))
    with Client.from_kubeconfig(str(bad), namespace=namespace) as c:
        with pytest.raises(kruntimes.UnauthenticatedError) as e:
            c.function(env("KRT_TEST_FUNCTION")).invoke({})
    assert (e.value.status, e.value.source) == (401, "kubernetes")


def test_a_deleted_rolebinding_is_refused_within_the_allowed_ttl(namespace):
    with Client.from_kubeconfig(env("KRT_TEST_KUBECONFIG_CAROL"), namespace=namespace) as carol:
        fn = carol.function(env("KRT_TEST_FUNCTION"))
        assert fn.invoke({"name": "carol"})["message"] == "hello carol"
        binding = env("KRT_TEST_REVOKE_BINDING")
        with Client.from_kubeconfig(env("KRT_TEST_KUBECONFIG_ADMIN")) as admin:
            admin._transport.send(Call(KUBERNETES, "DELETE",
                                       f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings/{binding}"))
        revoked = time.monotonic()
        while True:
            try:
                fn.invoke({"name": "carol"})
            except kruntimes.PermissionDeniedError as e:
                assert (e.status, e.code) == (403, "Forbidden")
                break
            assert time.monotonic() - revoked < 30 + 10, "still allowed past the allowed TTL (30 s)"
            time.sleep(0.5)
