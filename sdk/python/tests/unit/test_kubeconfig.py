"""Kubeconfig users as a Run lookup presents them to an API server: a token,
a token file, a client certificate, an exec credential plugin (cached until it
expires, run again after a 401); contexts, namespaces, merged files and
relative paths."""

import base64
import json
import os
import ssl
import sys
import textwrap
import time
from pathlib import Path

import pytest

import kruntimes
from kruntimes import Client
from kruntimes._kubeconfig import load

from .servers import KubeServer


def kubeconfig(path: Path, server: str, user: dict, *, namespace=None, cluster_extra=None, name="test") -> Path:
    ctx = {"cluster": "c", "user": "u"}
    if namespace:
        ctx["namespace"] = namespace
    doc = {
        "apiVersion": "v1", "kind": "Config", "current-context": name,
        "clusters": [{"name": "c", "cluster": {"server": server, **(cluster_extra or {})}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": name, "context": ctx}],
    }
    path.write_text(json.dumps(doc))  # JSON is YAML
    return path


def lookup(path: Path, **kw):
    with Client.from_kubeconfig(str(path), **kw) as c:
        return c.get_run("hello", namespace="a")


def test_a_token_user_sends_its_token_and_the_context_namespace_is_the_default(tmp_path):
    with KubeServer() as srv:
        cfg = kubeconfig(tmp_path / "config", srv.url, {"token": "tok-1"}, namespace="team")
        assert lookup(cfg).uid == "u-1"
        assert srv.seen.authorization == ["Bearer tok-1"]
        assert Client.from_kubeconfig(str(cfg)).namespace == "team"
        assert Client.from_kubeconfig(str(cfg), namespace="other").namespace == "other"


def test_a_token_file_is_relative_to_the_kubeconfig_and_reread_when_it_changes(tmp_path):
    (tmp_path / "token").write_text("file-1\n")
    with KubeServer() as srv:
        cfg = kubeconfig(tmp_path / "config", srv.url, {"tokenFile": "token"})
        with Client.from_kubeconfig(str(cfg)) as c:
            c.get_run("hello", namespace="a")
            (tmp_path / "token").write_text("file-2\n")
            os.utime(tmp_path / "token", (1, 1))
            c.get_run("hello", namespace="a")
        assert srv.seen.authorization == ["Bearer file-1", "Bearer file-2"]


def test_kubeconfig_lists_merge_first_file_wins(tmp_path, monkeypatch):
    with KubeServer() as srv:
        first = kubeconfig(tmp_path / "a", srv.url, {"token": "first"}, name="one")
        second = kubeconfig(tmp_path / "b", "https://unused.invalid", {"token": "second"}, name="two")
        monkeypatch.setenv("KUBECONFIG", f"{first}{os.pathsep}{second}")
        assert load().server == srv.url
        with Client.from_kubeconfig(context="two") as c:
            # context "two" names cluster "c" and user "u": the first file's.
            c.get_run("hello", namespace="a")
        assert srv.seen.authorization == ["Bearer first"]
    with pytest.raises(kruntimes.ConfigError):
        load(str(first), context="missing")


def plugin(tmp_path: Path, body: str) -> Path:
    script = tmp_path / "plugin.py"
    script.write_text(f"#!{sys.executable}\n" + textwrap.dedent(body))
    script.chmod(0o755)
    return script


def exec_user(script: Path, **extra) -> dict:
    return {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": str(script),
                     "interactiveMode": "Never", **extra}}


COUNTING = """
    import json, os, pathlib, sys
    count = pathlib.Path(sys.argv[1])
    n = int(count.read_text()) + 1 if count.exists() else 1
    count.write_text(str(n))
    info = json.loads(os.environ["KUBERNETES_EXEC_INFO"])
    assert info["kind"] == "ExecCredential" and info["spec"]["interactive"] is False, info
    status = {"token": f"exec-{n}"}
    if os.environ.get("EXPIRED"):
        status["expirationTimestamp"] = "2000-01-01T00:00:00Z"
    print(json.dumps({"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential", "status": status}))
"""


def test_an_exec_plugin_token_is_cached_until_it_expires(tmp_path):
    script = plugin(tmp_path, COUNTING)
    count = tmp_path / "count"
    with KubeServer() as srv:
        cfg = kubeconfig(tmp_path / "config", srv.url, exec_user(script, args=[str(count)]))
        with Client.from_kubeconfig(str(cfg)) as c:
            for _ in range(3):
                c.get_run("hello", namespace="a")
        assert srv.seen.authorization == ["Bearer exec-1"] * 3
        expired = kubeconfig(tmp_path / "expired", srv.url,
                             exec_user(script, args=[str(count)], env=[{"name": "EXPIRED", "value": "1"}]))
        with Client.from_kubeconfig(str(expired)) as c:
            c.get_run("hello", namespace="a")
            time.sleep(1.1)  # a credential is reused for a second, whatever its expiry
            c.get_run("hello", namespace="a")
        assert srv.seen.authorization[3:] == ["Bearer exec-2", "Bearer exec-3"]


def test_an_exec_plugin_runs_again_after_a_401_and_the_call_is_sent_once_more(tmp_path):
    script = plugin(tmp_path, COUNTING)
    with KubeServer(status=lambda auth: 401 if auth == "Bearer exec-1" else 200) as srv:
        cfg = kubeconfig(tmp_path / "config", srv.url, exec_user(script, args=[str(tmp_path / "count")]))
        assert lookup(cfg).name == "hello"
        assert srv.seen.authorization == ["Bearer exec-1", "Bearer exec-2"]


def test_a_static_token_is_not_retried_after_a_401(tmp_path):
    with KubeServer(status=lambda auth: 401) as srv:
        cfg = kubeconfig(tmp_path / "config", srv.url, {"token": "bad"})
        with pytest.raises(kruntimes.UnauthenticatedError) as e:
            lookup(cfg)
        assert e.value.source == "kubernetes"
        assert srv.seen.authorization == ["Bearer bad"]


def test_a_failing_exec_plugin_is_an_authentication_error(tmp_path):
    script = plugin(tmp_path, "import sys\nprint('no credentials', file=sys.stderr)\nsys.exit(3)\n")
    with KubeServer() as srv:
        cfg = kubeconfig(tmp_path / "config", srv.url, exec_user(script))
        with pytest.raises(kruntimes.UnauthenticatedError) as e:
            lookup(cfg)
        assert "exited 3" in str(e.value) and "no credentials" in str(e.value)
        assert srv.seen.authorization == []
    with pytest.raises(kruntimes.ConfigError):
        load(str(kubeconfig(tmp_path / "always", "https://x", exec_user(script, interactiveMode="Always"))))


def tls_dir() -> Path:
    d = os.environ.get("KRT_TEST_TLS_DIR")
    if not d:
        pytest.skip("needs KRT_TEST_TLS_DIR: a CA, server and client certificate (krt/tests/sdk_python.rs makes them)")
    return Path(d)


def mtls_server(d: Path) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(d / "ca.crt"))
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.load_cert_chain(str(d / "server.crt"), str(d / "server.key"))
    return ctx


def test_a_client_certificate_user_presents_its_certificate(tmp_path):
    d = tls_dir()
    data = {name: base64.b64encode((d / name).read_bytes()).decode() for name in ("ca.crt", "client.crt", "client.key")}
    with KubeServer(tls=mtls_server(d)) as srv:
        inline = kubeconfig(tmp_path / "inline", srv.url,
                            {"client-certificate-data": data["client.crt"], "client-key-data": data["client.key"]},
                            cluster_extra={"certificate-authority-data": data["ca.crt"]})
        assert lookup(inline).uid == "u-1"
        # The same as files, relative to the kubeconfig.
        for name in ("ca.crt", "client.crt", "client.key"):
            (tmp_path / name).write_bytes((d / name).read_bytes())
        files = kubeconfig(tmp_path / "files", srv.url, {"client-certificate": "client.crt", "client-key": "client.key"},
                           cluster_extra={"certificate-authority": "ca.crt"})
        assert lookup(files).uid == "u-1"
        assert srv.seen.peer_cn == ["kruntimes-sdk-test-user"] * 2
        assert srv.seen.authorization == [None, None]


def test_an_exec_plugin_may_return_a_client_certificate(tmp_path):
    d = tls_dir()
    cert, key = (d / "client.crt").read_text(), (d / "client.key").read_text()
    script = plugin(tmp_path, f"""
        import json
        print(json.dumps({{"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
                           "status": {{"clientCertificateData": {cert!r}, "clientKeyData": {key!r}}}}}))
    """)
    ca = base64.b64encode((d / "ca.crt").read_bytes()).decode()
    with KubeServer(tls=mtls_server(d)) as srv:
        cfg = kubeconfig(tmp_path / "config", srv.url, exec_user(script),
                         cluster_extra={"certificate-authority-data": ca})
        assert lookup(cfg).uid == "u-1"
        assert srv.seen.peer_cn == ["kruntimes-sdk-test-user"]


def test_a_server_outside_the_kubeconfigs_ca_is_refused(tmp_path):
    d = tls_dir()
    with KubeServer(tls=mtls_server(d)) as srv:
        cfg = kubeconfig(tmp_path / "config", srv.url, {"token": "t"})
        with pytest.raises(kruntimes.NetworkError):
            lookup(cfg)
