"""Room routes: ``POST /v1/rooms`` (a join link), ``GET /v1/rooms/{room}`` (who is in it) and
``GET /v1/rooms/{room}/transcript.vtt`` / ``.json``.

Join links. ``POST /v1/rooms {room?, ttl_s?}`` (an API key, a page sign-in, or open mode) answers 201
``{room, meeting_id, join_token, expires_at, url}``. The join token (``rj_...``) is bound to one meeting of that
room (:mod:`rtc_agent.apps.call.meetings`): the current one (live, idle, or pending when nobody has joined yet, made
by this call if the room has none). It admits its holders to that meeting only, until it expires
(``room_link_ttl_s``, shorter with ``ttl_s``) or the meeting ends (then 410 ``meeting_ended``); it is not used up,
since everyone who got the link joins with it, but it creates no session by itself: a page exchanges it for a
single-use client token of one participant with ``POST /v1/tokens {app: "call", config: {...}}`` and
``Authorization: Bearer rj_...``, and that client token's config fixes ``room`` (its scope names the room and
the meeting; the room is checked again when the session is created, and the meeting stays current while the
client token lives). ``url`` is ``/call?room=NAME#join=rj_...``: the token travels in the fragment, which browsers
never send to a server (no logs, no ``Referer``).

Transcripts. ``GET /v1/rooms/{room}/transcript.vtt|json[?meeting=mtg_...]``: a join token reads its own meeting's
transcript only (while live or idle, then for ``room_transcript_ttl_s`` after it ended; 403 ``token_scope`` for
another meeting or room). An API key, a page sign-in or open mode reads the meeting named by ``?meeting=``, or
without it the room's current meeting (once someone joined), else its latest ended one. 404 when there is none
(``room_not_found`` / ``meeting_not_found``), expired ones included; 400 ``invalid_meeting`` for a malformed id.
The VTT carries each line's translations as extra cue lines (``[en] Hello``); ``?language=xx`` gives one language
instead: each line's translation into it where there is one, its source text otherwise (400 ``invalid_language``
for a malformed code; :mod:`rtc_agent.apps.call.transcript_vtt`).

Presence. ``GET /v1/rooms/{room}`` (the same readers as the transcript; a join token for its own room only, else
403 ``token_scope``) answers ``{room, participants: [{name}], count, max_participants}``: who is in the room now,
names only (no ids, languages or tokens), for the call page's pre-join screen. A room nobody is in answers
``count: 0``. With replicas, a room another node hosts is answered by that node (the request is forwarded there:
:func:`~rtc_agent.server.forwarding.presence_elsewhere`).

The rooms are the server's :class:`~rtc_agent.apps.call.RoomRegistry` (``app[ROOMS]``), which its ``call``
sessions join.
"""

from __future__ import annotations

import secrets
import time
from typing import Any

from aiohttp import web

from rtc_agent.apps.call import MeetingEnded, RoomRegistry, check_meeting_id, check_room_name
from rtc_agent.apps.call.sfu.rooms import link_mode
from rtc_agent.apps.call.transcript_vtt import check_transcript_language
from rtc_agent.auth.access import AUTH, CLIENT_TOKEN, PRINCIPAL, ROOM_JOIN_APP, Forbidden, Principal
from rtc_agent.errors import InvalidRequest
from rtc_agent.server.forwarding import presence_elsewhere
from rtc_agent.server.http_errors import read_json_object
from rtc_agent.server.keys import ROOMS, SETTINGS

MIN_LINK_TTL_S = 60


def _meeting_to_read(request: web.Request, room: str) -> str | None:
    """The meeting whose transcript this request reads: a join token's own, else ``?meeting=`` (or None)."""
    raw = request.query.get("meeting")
    asked = check_meeting_id(raw) if raw is not None else None
    principal = request[PRINCIPAL]
    if principal.kind != CLIENT_TOKEN:
        return asked
    scope = principal.token.scope if principal.token is not None else {}
    if scope.get("room") != room:
        raise Forbidden("this join token is for another room", code="token_scope")
    own = scope.get("meeting")
    if not isinstance(own, str) or asked not in (None, own):
        raise Forbidden("a join token reads the transcript of its own meeting only", code="token_scope")
    return own


async def create_room(request: web.Request) -> web.Response:
    """``POST /v1/rooms {room?, ttl_s?, mode?, size?}`` -> 201 ``{room, meeting_id, join_token, expires_at, url,
    mode, participants, max_participants}`` (see the module; ``mode``/``size``: :func:`link_mode`)."""
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
    registry = request.app[ROOMS]
    mode = link_mode(registry, data, room, float(ttl))  # "sfu": through Janus (rtc_agent.apps.call.sfu)
    await registry.meetings.load(room)  # the state store's current meeting of the name (a restart, another node)
    meeting = registry.meetings.for_link(room)
    # the link counts against its creator's quota; its holders are limited per link (``link:...`` principals)
    value, token = await control.tokens.mint(ROOM_JOIN_APP, {"room": room}, float(ttl),
                                             client=request[PRINCIPAL].client,
                                             scope={"room": room, "meeting": meeting.id}, prefix="rj_")
    registry.meetings.linked(meeting, float(ttl))
    live = registry.rooms.get(room)
    return web.json_response(
        {"room": room, "meeting_id": meeting.id, "join_token": value, "expires_at": int(token.expires_at),
         "url": f"/call?room={room}{'&mode=sfu' if mode == 'sfu' else ''}#join={value}", "mode": mode,
         "participants": len(live.participants) if live else 0,
         "max_participants": settings.sfu_max_speakers + settings.sfu_max_listeners if mode == "sfu"
         else settings.max_room_participants},
        status=201, headers={"Cache-Control": "no-store"})


async def get_transcript(request: web.Request) -> web.Response:
    """``GET /v1/rooms/{room}/transcript.vtt|json[?meeting=mtg_...][&language=xx]`` (see the module)."""
    room = check_room_name(request.match_info["room"])
    meeting_id = _meeting_to_read(request, room)
    raw_language = request.query.get("language")
    language = check_transcript_language(raw_language) if raw_language is not None else None
    transcript = await request.app[ROOMS].meetings.read_transcript(room, meeting_id)  # the state store's
    fmt = request.match_info["fmt"]
    name = f"{room}.{language}" if language and fmt == "vtt" else room
    disposition = {"Content-Disposition": f'inline; filename="{name}.{fmt}"', "Cache-Control": "no-store"}
    if fmt == "vtt":
        return web.Response(text=transcript.to_vtt(language), content_type="text/vtt", charset="utf-8",
                            headers=disposition)
    return web.json_response(transcript.to_json(), headers=disposition)


async def get_presence(request: web.Request) -> web.Response:
    """``GET /v1/rooms/{room}`` -> ``{room, participants: [{name}], count, max_participants}`` (see the module)."""
    room = check_room_name(request.match_info["room"])
    principal = request[PRINCIPAL]
    if principal.kind == CLIENT_TOKEN:
        scope = principal.token.scope if principal.token is not None else {}
        if scope.get("room") != room:
            raise Forbidden("this join token is for another room", code="token_scope")
    live = request.app[ROOMS].rooms.get(room)
    if live is None and (elsewhere := await presence_elsewhere(request, room)) is not None:
        return elsewhere  # another node hosts the room: its participants are there
    names = [{"name": p.name} for p in live.participants.values()] if live is not None else []
    return web.json_response({"room": room, "participants": names, "count": len(names),
                              "max_participants": request.app[SETTINGS].max_room_participants},
                             headers={"Cache-Control": "no-store"})


async def exchange_join_token(rooms: RoomRegistry, principal: Principal, app_name: Any,
                              config: dict[str, Any]) -> tuple[dict, dict, float]:
    """``POST /v1/tokens`` with a join token: ``(config, scope, seconds left)`` for a client token of one
    participant of the token's room (the ``call`` app only; never outliving the join token), while the token's
    meeting is current in ``rooms`` (else 410 ``meeting_ended``); that meeting then stays current while the client
    token lives."""
    join = principal.token
    if app_name != "call":
        raise Forbidden("a room join token mints client tokens of the 'call' app only", code="token_scope")
    room, meeting_id = join.scope.get("room"), join.scope.get("meeting")
    if config.get("room", room) != room:
        raise Forbidden("this join token is for another room", code="token_scope")
    book, meeting = rooms.meetings, None
    if isinstance(meeting_id, str) and isinstance(room, str):  # found here, in the state store, or restored
        meeting = await book.load_link(meeting_id, room, join.expires_at)  # (a link from before a restart)
    if meeting is None or meeting.name != room:
        raise MeetingEnded(f"the meeting of this join link (room {room!r}) has ended; ask for a new link")
    left = max(1.0, join.expires_at - time.time())
    book.exchanged(meeting, min(left, float(getattr(book.settings, "client_token_ttl_s", left))))
    return {**config, "room": room}, {"room": room, "meeting": meeting_id}, left


def add_routes(app: web.Application) -> None:
    app.router.add_post("/v1/rooms", create_room)
    app.router.add_get(r"/v1/rooms/{room}/transcript.{fmt:vtt|json}", get_transcript)
    app.router.add_get("/v1/rooms/{room}", get_presence)
