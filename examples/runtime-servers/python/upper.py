"""The toy runtime `upper`: a Run's handler names a field of its JSON input,
and each invocation answers the input with that field upper-cased.

It runs no process, so it has no process tree to kill and no environment to
pass on; a real runtime starts the user's code here, in a process group of
its own with exactly the registration's environment. Pure: no gRPC, no files.
"""

from __future__ import annotations

import json
import re

NAME = "upper"
_FIELD = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
# The contract bounds a FunctionError's message to 1 KiB.
_MESSAGE_BYTES = 1024


class BadHandler(ValueError):
    """The handler is not a field name (INVALID_ARGUMENT at registration)."""


class BadInput(ValueError):
    """The input is not a JSON document (INVALID_ARGUMENT at invocation)."""


class HandlerError(Exception):
    """The handler failed on a valid document: a FunctionError."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = bound(message)


def bound(message: str) -> str:
    """`message` cut to the contract's 1 KiB, on a character boundary."""
    data = message.encode()
    if len(data) <= _MESSAGE_BYTES:
        return message
    return data[:_MESSAGE_BYTES].decode(errors="ignore")


def check_handler(handler: str) -> str:
    """The field a handler names."""
    if not _FIELD.match(handler):
        raise BadHandler(
            f"handler {handler!r} is not a field name (letters, digits, _)"
        )
    return handler


def invoke(field: str, data: bytes) -> bytes:
    """Runs the handler once over the JSON document `data`."""
    try:
        doc = json.loads(data)
    except (UnicodeDecodeError, ValueError) as e:
        raise BadInput(f"input is not a JSON document: {e}") from None
    if not isinstance(doc, dict):
        raise HandlerError("TypeError", "input must be a JSON object")
    value = doc.get(field)
    if not isinstance(value, str):
        raise HandlerError("KeyError", f"field {field!r} is missing or not a string")
    doc[field] = value.upper()
    return json.dumps(doc, ensure_ascii=False).encode()
