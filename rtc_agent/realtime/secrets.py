"""``POST /v1/realtime/client_secrets``: short-lived keys (``ek_...``) for one OpenAI Realtime connection.

Request (OpenAI's shape): ``{"expires_after": {"anchor": "created_at", "seconds": 10-7200}, "session": {...}}``,
both optional (600 s; a default ``realtime`` session). Answer: ``{"value": "ek_...", "expires_at", "session"}``
where ``session`` is the full session object the key will open.

A key authorises exactly one ``/v1/realtime`` WebSocket or ``/v1/realtime/calls`` call (it is used up when that
connection is accepted), carries its session configuration (the client may still ``session.update`` it), and
expires; the route rules in :mod:`rtc_agent.auth.access` check it. Keys live in the server's token store as
digests (app ``realtime``), so the server's bound on live tokens applies.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from rtc_agent.auth import AUTH, PRINCIPAL
from rtc_agent.auth.access import CLIENT_SECRET_PREFIX, REALTIME_TOKEN_APP, Principal
from rtc_agent.realtime.adapter import serving_app
from rtc_agent.realtime.events import RealtimeError
from rtc_agent.realtime.session_config import SessionConfig
from rtc_agent.server.http_errors import parse_json, read_body
from rtc_agent.server.keys import SETTINGS

__all__ = ["create_client_secret", "session_for"]

DEFAULT_TTL_S = 600
MIN_TTL_S, MAX_TTL_S = 10, 7200


def session_for(principal: Principal, settings: Any, *, kind: str | None = None, model: str | None = None,
                request: dict[str, Any] | None = None) -> SessionConfig:
    """The session a connection opens: the client secret's session when it came with one, else ``kind`` (default
    ``realtime``) with ``request`` applied (a call's ``session`` part). Raises :class:`RealtimeError`."""
    token = principal.token
    if token is not None and token.app == REALTIME_TOKEN_APP:
        stored = token.config.get("session") or {}
        config = SessionConfig.new(stored.get("type", "realtime"), settings, stored, model=model)
        return config.updated(request) if request else config
    request = request or {}
    return SessionConfig.new(request.get("type", kind or "realtime"), settings, request, model=model)


async def create_client_secret(request: web.Request) -> web.Response:
    """See the module docstring. 400 with ``param`` for a bad request, as OpenAI answers."""
    settings, control = request.app[SETTINGS], request.app[AUTH]
    body = await read_body(request, settings.max_body_bytes)
    data = parse_json(body, settings) if body.strip() else {}
    if not isinstance(data, dict):
        raise RealtimeError("the body must be a JSON object", code="invalid_type")
    for key in data:
        if key not in ("expires_after", "session"):
            raise RealtimeError(f"Unknown parameter: '{key}'.", code="unknown_parameter", param=key)
    expires = data.get("expires_after") or {}
    if not isinstance(expires, dict) or expires.get("anchor", "created_at") != "created_at":
        raise RealtimeError("expires_after.anchor must be 'created_at'", param="expires_after.anchor")
    ttl = expires.get("seconds", DEFAULT_TTL_S)
    if isinstance(ttl, bool) or not isinstance(ttl, int) or not MIN_TTL_S <= ttl <= MAX_TTL_S:
        raise RealtimeError(f"expires_after.seconds must be an integer from {MIN_TTL_S} to {MAX_TTL_S}",
                            param="expires_after.seconds")
    session = data.get("session") or {"type": "realtime"}
    if not isinstance(session, dict):
        raise RealtimeError("session must be an object", code="invalid_type", param="session")
    config = SessionConfig.new(session.get("type", "realtime"), settings, session, model=session.get("model"))
    serving_app(config, settings)  # a configuration no connection could start with is refused now
    value, token = await control.tokens.mint(REALTIME_TOKEN_APP, {"session": session}, float(ttl),
                                       client=request[PRINCIPAL].client, prefix=CLIENT_SECRET_PREFIX)
    expires_at = int(token.expires_at)
    answer = {"value": value, "expires_at": expires_at, "session": config.render(token.session_id, expires_at)}
    return web.json_response(answer, headers={"Cache-Control": "no-store"})
