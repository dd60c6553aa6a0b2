"""Python client for kruntimes session (sandbox) Runs."""

from .errors import KruntimesError
from .sandbox import OperationResult, Sandbox

__all__ = ["KruntimesError", "OperationResult", "Sandbox"]
