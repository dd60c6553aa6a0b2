"""Reads a kubeconfig (or the in-cluster service account) into what the
client needs to reach the Kubernetes API: the server, its CA, and the user's
credentials — a token, a token file, a client certificate, basic auth or an
exec credential plugin.

Files are merged as kubectl does: ``$KUBECONFIG`` may list several, the first
file to name a cluster, user or context wins, and relative paths are relative
to the file that holds them.
"""

from __future__ import annotations

import base64
import os
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import yaml

from . import _tls
from ._credentials import ExecPlugin, FileToken, StaticToken, TokenSource
from .errors import ConfigError

_SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


@dataclass
class KubeTarget:
    """A Kubernetes API server and how to authenticate to it."""

    server: str
    namespace: str
    ca_pem: Optional[str] = None
    insecure: bool = False
    tls_server_name: Optional[str] = None
    #: The user's client certificate (from the kubeconfig).
    identity: Optional[_tls.Identity] = None
    #: The user's bearer token (token, token file or exec plugin), also used for the gateway.
    token: Optional[TokenSource] = None
    basic: Optional[Tuple[str, str]] = None
    #: The exec plugin, when the user has one (it may return a certificate instead of a token).
    exec_plugin: Optional[ExecPlugin] = None

    def current_identity(self) -> Optional[_tls.Identity]:
        """The client certificate to present now (an exec plugin's may change when it expires)."""
        if self.identity is not None:
            return self.identity
        if self.exec_plugin is not None:
            cred = self.exec_plugin.credential()
            if cred.client_certificate_data and cred.client_key_data:
                return (cred.client_certificate_data.encode(), cred.client_key_data.encode())
        return None

    def ssl_context(self, identity: Optional[_tls.Identity]) -> ssl.SSLContext:
        return _tls.context(ca_pem=self.ca_pem, insecure=self.insecure, identity=identity)


@dataclass
class _Entry:
    body: Dict[str, Any]
    base: Path


def _files(path: Optional[str]) -> List[Path]:
    if path:
        return [Path(path).expanduser()]
    env = os.environ.get("KUBECONFIG")
    if env:
        return [Path(p).expanduser() for p in env.split(os.pathsep) if p]
    default = Path.home() / ".kube" / "config"
    return [default] if default.exists() else []


def _merge(files: List[Path]) -> Tuple[Dict[str, Dict[str, _Entry]], str]:
    merged: Dict[str, Dict[str, _Entry]] = {"clusters": {}, "users": {}, "contexts": {}}
    current = ""
    for f in files:
        if not f.exists():
            continue
        try:
            doc = yaml.safe_load(f.read_text()) or {}
        except (OSError, yaml.YAMLError) as e:
            raise ConfigError(f"read kubeconfig {f}: {e}") from e
        current = current or str(doc.get("current-context") or "")
        for kind, field in (("clusters", "cluster"), ("users", "user"), ("contexts", "context")):
            for item in doc.get(kind) or []:
                name = str(item.get("name", ""))
                if name and name not in merged[kind]:
                    merged[kind][name] = _Entry(item.get(field) or {}, f.parent)
    return merged, current


def _data(entry: _Entry, key: str) -> Optional[bytes]:
    """``key-data`` (base64) or ``key`` (a file relative to the kubeconfig)."""
    if entry.body.get(f"{key}-data"):
        try:
            return base64.b64decode(entry.body[f"{key}-data"])
        except ValueError as e:
            raise ConfigError(f"kubeconfig {key}-data is not base64") from e
    if entry.body.get(key):
        p = Path(os.path.expanduser(str(entry.body[key])))
        p = p if p.is_absolute() else entry.base / p
        try:
            return p.read_bytes()
        except OSError as e:
            raise ConfigError(f"read {key} {p}: {e}") from e
    return None


def _user(target: KubeTarget, user: _Entry, cluster: Dict[str, Any]) -> None:
    body = user.body
    if body.get("auth-provider"):
        raise ConfigError("kubeconfig auth-provider is not supported; use an exec credential plugin")
    cert, key = _data(user, "client-certificate"), _data(user, "client-key")
    if cert and key:
        target.identity = (cert, key)
    elif cert or key:
        raise ConfigError("kubeconfig user has a client certificate without its key (or the reverse)")
    if body.get("token"):
        target.token = StaticToken(str(body["token"]))
    elif body.get("tokenFile"):
        p = Path(str(body["tokenFile"]))
        target.token = FileToken(p if p.is_absolute() else user.base / p)
    elif body.get("exec"):
        target.exec_plugin = ExecPlugin(body["exec"], user.base, cluster)
        target.token = target.exec_plugin
    if body.get("username"):
        target.basic = (str(body["username"]), str(body.get("password", "")))


def _in_cluster(namespace: Optional[str]) -> KubeTarget:
    host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    if not host or not (_SA_DIR / "token").exists():
        raise ConfigError("no kubeconfig ($KUBECONFIG, ~/.kube/config) and not in a Pod")
    ns_file = _SA_DIR / "namespace"
    host = f"[{host}]" if ":" in host else host
    return KubeTarget(
        server=f"https://{host}:{port}",
        namespace=namespace or (ns_file.read_text().strip() if ns_file.exists() else "default"),
        ca_pem=(_SA_DIR / "ca.crt").read_text(),
        token=FileToken(_SA_DIR / "token"),
    )


def load(path: Optional[str] = None, context: Optional[str] = None, namespace: Optional[str] = None) -> KubeTarget:
    """The target of ``context`` (default: the current context) of the kubeconfig at
    ``path`` (default: ``$KUBECONFIG``, then ``~/.kube/config``, then the in-cluster
    service account)."""
    files = _files(path)
    if not files:
        return _in_cluster(namespace)
    merged, current = _merge(files)
    name = context or current
    if not name or name not in merged["contexts"]:
        raise ConfigError(f"kubeconfig {os.pathsep.join(map(str, files))}: no context {name!r}")
    ctx = merged["contexts"][name].body
    cluster = merged["clusters"].get(str(ctx.get("cluster", "")))
    if cluster is None or not cluster.body.get("server"):
        raise ConfigError(f"kubeconfig context {name!r}: no cluster {ctx.get('cluster')!r} with a server")
    ca = _data(cluster, "certificate-authority")
    target = KubeTarget(
        server=str(cluster.body["server"]).rstrip("/"),
        namespace=namespace or str(ctx.get("namespace") or "default"),
        ca_pem=ca.decode() if ca else None,
        insecure=bool(cluster.body.get("insecure-skip-tls-verify")),
        tls_server_name=cluster.body.get("tls-server-name"),
    )
    user = merged["users"].get(str(ctx.get("user", "")))
    if user is not None:
        # ExecCredential.spec.cluster, for plugins with provideClusterInfo.
        info: Dict[str, Any] = {"server": target.server, "insecure-skip-tls-verify": target.insecure}
        if ca:
            info["certificate-authority-data"] = base64.b64encode(ca).decode()
        if target.tls_server_name:
            info["tls-server-name"] = target.tls_server_name
        _user(target, user, info)
    return target
