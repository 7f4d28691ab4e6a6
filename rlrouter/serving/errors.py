"""The one error type of the HTTP API: what a role raises, what ``rlrouter.serving.api`` reports."""

from __future__ import annotations


class ApiError(Exception):
    """An error the API reports as ``{"error": {...}}`` with ``status``."""

    def __init__(self, status: int, message: str, field: str | None = None, type_: str | None = None):
        self.status = status
        self.message = message
        self.field = field
        self.type = type_ or ("invalid_request_error" if 400 <= status < 500 else "server_error")
        super().__init__(message)
