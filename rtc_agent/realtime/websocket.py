"""``GET /v1/realtime``: the OpenAI Realtime API over a WebSocket.

``?model=...`` names the model the client asked for (echoed in the session; the server's engines answer);
``?intent=transcription`` opens a ``type: transcription`` session (the captions app) instead of a ``realtime`` one
(the agent app); a client secret's own session type wins. Authorization (checked by the access middleware before
this handler): ``Authorization: Bearer <API key | ek_ client secret>``, or for browsers the subprotocol
``openai-insecure-api-key.<key>`` next to ``realtime``; the server answers with the ``realtime`` subprotocol when
it was offered. Joining a WebRTC call (``?call_id=``) is not supported.

Refusals before the upgrade are HTTP errors in OpenAI's shape: 401 (credentials), 400 (a session configuration
that cannot start), 503/429 (capacity).
"""

from __future__ import annotations

import logging
import secrets

from aiohttp import web

from rtc_agent.auth import PRINCIPAL
from rtc_agent.auth.access import client_ip
from rtc_agent.errors import InvalidRequest
from rtc_agent.realtime.adapter import MAX_EVENT_BYTES, serving_app
from rtc_agent.realtime.events import RealtimeError
from rtc_agent.realtime.secrets import session_for
from rtc_agent.realtime.session import RealtimeSocketSession
from rtc_agent.server.keys import ADMISSION, METRICS, REGISTRY, SETTINGS, WORKER

__all__ = ["realtime_socket"]

log = logging.getLogger(__name__)

HEARTBEAT_S = 30.0  # WebSocket pings: a dead peer is noticed within about twice this


async def realtime_socket(request: web.Request) -> web.StreamResponse:
    app = request.app
    settings, registry = app[SETTINGS], app[REGISTRY]
    if request.headers.get("Upgrade", "").lower() != "websocket":
        raise InvalidRequest("GET /v1/realtime is a WebSocket endpoint (Upgrade: websocket)", code="not_websocket")
    if "call_id" in request.query:
        raise RealtimeError("joining a WebRTC call over a WebSocket is not supported", code="unsupported_parameter",
                            param="call_id")
    intent = request.query.get("intent")
    if intent not in (None, "transcription", "realtime"):
        raise RealtimeError("intent must be 'transcription' (or absent)", param="intent")
    principal = request[PRINCIPAL]
    config = session_for(principal, settings, kind=intent, model=request.query.get("model"))
    app_cls, app_config = serving_app(config, settings)
    registry.check_capacity(principal.client, peer=client_ip(request), pending=False)  # connected at once
    app[ADMISSION].check(app_cls.name)  # before any engine work: load, and this app's measured capacity
    ws = web.WebSocketResponse(protocols=("realtime",), heartbeat=HEARTBEAT_S, max_msg_size=2 * MAX_EVENT_BYTES)
    await ws.prepare(request)
    token = principal.token
    session_id = token.session_id if token is not None else "sess_" + secrets.token_hex(8)
    session = RealtimeSocketSession(ws, app_cls, app_config, config, settings=settings, worker=app[WORKER],
                                    metrics=app[METRICS], on_closed=registry.closed, session_id=session_id,
                                    client=principal.client)
    try:
        registry.add(session)
    except Exception as exc:  # capacity taken meanwhile: say so on the socket, then close it
        await ws.send_json(session.adapter.error(exc))
        await ws.close()
        return ws
    log.info("session %s: OpenAI Realtime %s session over WebSocket", session.id, config.kind)
    await session.run()
    return ws
