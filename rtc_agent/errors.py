"""Errors that reach a client, each with a stable ``type``/``code`` pair and an HTTP status.

The same error travels as an HTTP JSON body (``{"error": {...}}``) or as an ``error`` event on the data channel.
"""

from __future__ import annotations

from typing import Any

from rtc_agent.redact import redact_text


class AgentError(Exception):
    """An error a client can act on. ``code`` is stable and machine-readable; ``message`` is for humans.

    ``message`` is redacted on the way in (:func:`rtc_agent.redact.redact_text`: URL user-info and query values,
    bearer tokens, registered secrets), so no error that reaches a client or a log carries a credential.
    ``param`` names the request field at fault when there is one (OpenAI's error shape), else None.
    """

    type: str = "server_error"
    code: str = "internal_error"
    status: int = 500

    def __init__(self, message: str, *, code: str | None = None, status: int | None = None,
                 retry_after: float | None = None, param: str | None = None) -> None:
        message = redact_text(message)
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        if status is not None:
            self.status = status
        self.retry_after = retry_after
        self.param = param

    def to_dict(self) -> dict[str, Any]:
        """``{type, code, message, param}``: the ``error`` object of an HTTP error body."""
        return {"type": self.type, "code": self.code, "message": self.message, "param": self.param}


class InvalidRequest(AgentError):
    """The client sent something malformed (HTTP 400)."""

    type = "invalid_request_error"
    code = "invalid_request"
    status = 400


class Unauthorized(AgentError):
    """No credential, or one that is wrong, expired or used up (HTTP 401)."""

    type = "authentication_error"
    code = "unauthorized"
    status = 401


class Forbidden(AgentError):
    """A valid request that this credential, origin or host may not make (HTTP 403)."""

    type = "permission_error"
    code = "forbidden"
    status = 403


class RateLimited(AgentError):
    """Too many requests from one client; retry after ``retry_after`` seconds (HTTP 429)."""

    type = "rate_limit_error"
    code = "rate_limited"
    status = 429


class NotFound(AgentError):
    type = "invalid_request_error"
    code = "not_found"
    status = 404


class PayloadTooLarge(AgentError):
    type = "invalid_request_error"
    code = "payload_too_large"
    status = 413


class UnsupportedMediaType(AgentError):
    type = "invalid_request_error"
    code = "unsupported_media_type"
    status = 415


class AtCapacity(AgentError):
    """The server or an engine has no room now; retry later (HTTP 503 with ``Retry-After``)."""

    type = "capacity_error"
    code = "at_capacity"
    status = 503


class EngineError(AgentError):
    """A model call failed; the request fails, the session and the server go on."""

    type = "engine_error"
    code = "engine_error"
    status = 502
