"""Room routes: ``POST /v1/rooms`` (a join link) and ``GET /v1/rooms/{room}/transcript.vtt`` / ``.json``.

Join links. ``POST /v1/rooms {room?, ttl_s?}`` (an API key, a page sign-in, or open mode) answers 201
``{room, join_token, expires_at, url}``. The join token (``rj_...``) admits its holders to that room only, until it
expires (``room_link_ttl_s``, shorter with ``ttl_s``); it is not used up, since everyone who got the link joins
with it, but it creates no session by itself: a page exchanges it for a single-use client token of one
participant with ``POST /v1/tokens {app: "call", config: {...}}`` and ``Authorization: Bearer rj_...``, and that
client token's config fixes ``room`` (and its scope names the room, checked again when the session is created).
``url`` is ``/call?room=NAME#join=rj_...``: the token travels in the fragment, which browsers never send to a
server (no logs, no ``Referer``). The same join token reads the room's transcript.
"""

from __future__ import annotations

import secrets
import time
from typing import Any

from aiohttp import web

from rtc_agent.auth.access import AUTH, CLIENT_TOKEN, PRINCIPAL, ROOM_JOIN_APP, Forbidden
from rtc_agent.errors import InvalidRequest
from rtc_agent.rooms.room import check_room_name, registry_for
from rtc_agent.server.http_errors import read_json_object
from rtc_agent.server.keys import SETTINGS

MIN_LINK_TTL_S = 60


def _check_room_access(request: web.Request, room: str) -> None:
    """A join token reads only its own room."""
    principal = request[PRINCIPAL]
    if principal.kind == CLIENT_TOKEN and (principal.token is None or principal.token.scope.get("room") != room):
        raise Forbidden("this join token is for another room", code="token_scope")


async def create_room(request: web.Request) -> web.Response:
    settings, control = request.app[SETTINGS], request.app[AUTH]
    data: dict[str, Any] = {}
    if request.can_read_body:
        data = await read_json_object(request, settings)
    room = data.get("room")
    room = check_room_name(room) if room is not None else "room-" + secrets.token_hex(6)
    ttl = data.get("ttl_s", settings.room_link_ttl_s)
    valid = isinstance(ttl, int | float) and not isinstance(ttl, bool)
    if not valid or not MIN_LINK_TTL_S <= ttl <= settings.room_link_ttl_s:
        raise InvalidRequest(f"'ttl_s' must be {MIN_LINK_TTL_S}-{settings.room_link_ttl_s} seconds", code="invalid_ttl")
    # client "": whoever holds the link is rate-limited by its own address, not by the link's creator
    value, token = control.tokens.mint(ROOM_JOIN_APP, {"room": room}, float(ttl), client="",
                                       scope={"room": room}, prefix="rj_")
    live = registry_for(settings).rooms.get(room)
    return web.json_response(
        {"room": room, "join_token": value, "expires_at": int(token.expires_at),
         "url": f"/call?room={room}#join={value}", "participants": len(live.participants) if live else 0,
         "max_participants": settings.max_room_participants},
        status=201, headers={"Cache-Control": "no-store"})


async def get_transcript(request: web.Request) -> web.Response:
    room = check_room_name(request.match_info["room"])
    _check_room_access(request, room)
    transcript = registry_for(request.app[SETTINGS]).transcript(room)
    fmt = request.match_info["fmt"]
    disposition = {"Content-Disposition": f'inline; filename="{room}.{fmt}"', "Cache-Control": "no-store"}
    if fmt == "vtt":
        return web.Response(text=transcript.to_vtt(), content_type="text/vtt", charset="utf-8", headers=disposition)
    return web.json_response(transcript.to_json(), headers=disposition)


def exchange_join_token(principal: Any, app_name: Any, config: dict[str, Any]) -> tuple[dict, dict, float]:
    """``POST /v1/tokens`` with a join token: ``(config, scope, seconds left)`` for a client token of one
    participant of the token's room (the ``call`` app only; never outliving the join token)."""
    join = principal.token
    if app_name != "call":
        raise Forbidden("a room join token mints client tokens of the 'call' app only", code="token_scope")
    room = join.scope.get("room")
    if config.get("room", room) != room:
        raise Forbidden("this join token is for another room", code="token_scope")
    left = join.expires_at - time.time()
    return {**config, "room": room}, {"room": room}, max(1.0, left)


def add_routes(app: web.Application) -> None:
    registry_for(app[SETTINGS])
    app.router.add_post("/v1/rooms", create_room)
    app.router.add_get(r"/v1/rooms/{room}/transcript.{fmt:vtt|json}", get_transcript)
