"""Typed errors of the kruntimes API."""

from __future__ import annotations

from typing import Optional


class KruntimesError(Exception):
    """An error answered by the gateway (or raised by the client).

    ``status`` is the HTTP status (0 for client-side errors), ``code`` the
    stable error code (``NotFound``, ``Busy``, ``InvalidPath`` …).
    """

    def __init__(self, status: int, code: str, message: str, invocation_id: Optional[str] = None):
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.invocation_id = invocation_id

    @classmethod
    def from_response(cls, response) -> "KruntimesError":
        try:
            err = response.json()["error"]
            return cls(response.status_code, err.get("code", "Unknown"), err.get("message", ""), err.get("invocationId"))
        except Exception:  # noqa: BLE001 - any non-JSON body
            return cls(response.status_code, "Unknown", response.text[:2048])
