"""JSON errors for the HTTP API: ``{"error": {"type", "code", "message"}}`` with a fitting status."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from rtc_agent.errors import AgentError, InvalidRequest, PayloadTooLarge
from rtc_agent.metrics import Metrics
from rtc_agent.protocol import json_limits
from rtc_agent.server.keys import SETTINGS

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def error_response(exc: AgentError) -> web.Response:
    headers = {}
    if exc.retry_after is not None:
        headers["Retry-After"] = str(max(1, round(exc.retry_after)))
    return web.json_response({"error": exc.to_dict()}, status=exc.status, headers=headers)


def error_middleware(metrics: Metrics) -> Callable:
    """Turn :class:`AgentError`, aiohttp's HTTP errors under ``/v1/`` and crashes into JSON error bodies."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except AgentError as exc:
            metrics.errors.labels(code=exc.code).inc()
            return error_response(exc)
        except web.HTTPException as exc:
            if not request.path.startswith("/v1/") or exc.status < 400:
                raise
            code = {404: "not_found", 405: "method_not_allowed", 413: "payload_too_large"}.get(
                exc.status, "http_error")
            metrics.errors.labels(code=code).inc()
            err = AgentError(exc.reason or "error", code=code, status=exc.status)
            err.type = "invalid_request_error"
            return error_response(err)
        except Exception:
            log.exception("unhandled error on %s %s", request.method, request.path)
            metrics.errors.labels(code="internal_error").inc()
            return error_response(AgentError("internal server error"))

    return middleware


DEFAULT_READ_TIMEOUT_S = 10.0  # for an app without settings (the setting is request_read_timeout_s)


async def read_body(request: web.Request, limit: int, *, timeout_s: float | None = None) -> bytes:
    """The request body, refusing more than ``limit`` bytes with 413 before reading it all, and a body not all
    read within ``timeout_s`` (default: the server's ``request_read_timeout_s``) with 408 ``request_timeout``:
    a client that sends headers and then trickles the body holds a handler for that long at most."""
    if request.content_length is not None and request.content_length > limit:
        raise PayloadTooLarge(f"request body of {request.content_length} bytes exceeds the limit of {limit}")
    if timeout_s is None:
        settings = request.app.get(SETTINGS)
        timeout_s = settings.request_read_timeout_s if settings is not None else DEFAULT_READ_TIMEOUT_S
    body = bytearray()
    try:
        async with asyncio.timeout(timeout_s):
            async for chunk in request.content.iter_chunked(64 * 1024):
                body += chunk
                if len(body) > limit:
                    raise PayloadTooLarge(f"request body exceeds the limit of {limit} bytes")
    except TimeoutError:
        raise InvalidRequest(f"the request body did not arrive within {timeout_s:g} s (request_read_timeout_s)",
                             code="request_timeout", status=408) from None
    return bytes(body)


def decode_text(body: bytes, what: str) -> str:
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidRequest(f"{what} is not valid UTF-8", code="invalid_encoding") from None


def parse_json(body: bytes, settings: Any, what: str = "the body") -> Any:
    """Parse a JSON request body within ``settings.json_max_depth`` nesting and ``json_max_number_chars`` digits
    per number (400 ``invalid_json`` otherwise: a hostile body never reaches the recursion or int limits)."""
    try:
        return json_limits.loads(decode_text(body, what), max_depth=settings.json_max_depth,
                                 max_number_chars=settings.json_max_number_chars)
    except ValueError as exc:
        raise InvalidRequest(f"{what} is not acceptable JSON: {exc}", code="invalid_json") from None


async def read_json_object(request: web.Request, settings: Any) -> dict[str, Any]:
    """A JSON object request body of at most ``settings.max_body_bytes`` (400 when it is not an object)."""
    data = parse_json(await read_body(request, settings.max_body_bytes), settings)
    if not isinstance(data, dict):
        raise InvalidRequest("the body must be a JSON object", code="invalid_request")
    return data
