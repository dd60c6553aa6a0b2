"""TLS client contexts: which CA to trust and, for the Kubernetes API, which
client certificate to present."""

from __future__ import annotations

import os
import ssl
import tempfile
from typing import Optional, Tuple

from .errors import ConfigError

#: A client certificate and its key, both PEM.
Identity = Tuple[bytes, bytes]


def context(
    *,
    ca_pem: Optional[str] = None,
    ca_file: Optional[str] = None,
    insecure: bool = False,
    identity: Optional[Identity] = None,
) -> ssl.SSLContext:
    """A client context trusting ``ca_pem`` / ``ca_file`` (else the system's CAs)."""
    try:
        ctx = ssl.create_default_context(cafile=ca_file, cadata=ca_pem)
    except (OSError, ssl.SSLError) as e:
        raise ConfigError(f"load CA {ca_file or 'bundle'}: {e}") from e
    if insecure:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if identity is not None:
        _load_identity(ctx, identity)
    return ctx


def _load_identity(ctx: ssl.SSLContext, identity: Identity) -> None:
    # ssl loads certificates from files only: write them to a private
    # directory for the moment it takes, then remove them.
    cert, key = identity
    with tempfile.TemporaryDirectory(prefix="kruntimes-tls-") as d:
        cert_path, key_path = os.path.join(d, "tls.crt"), os.path.join(d, "tls.key")
        for path, data in ((cert_path, cert), (key_path, key)):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
        try:
            ctx.load_cert_chain(cert_path, key_path)
        except ssl.SSLError as e:
            raise ConfigError(f"load client certificate: {e}") from e
