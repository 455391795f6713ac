"""Session routes: create (JSON or WHIP-style SDP), trickle ICE, describe, end, and the ICE servers."""

from __future__ import annotations

import contextlib
from typing import Any

from aiohttp import web

from rtc_agent.auth import AUTH, PRINCIPAL, Principal, secret_hash
from rtc_agent.auth.access import ROOM_JOIN_APP, Forbidden, client_ip
from rtc_agent.auth.secrets import new_secret
from rtc_agent.errors import InvalidRequest, UnsupportedMediaType
from rtc_agent.rtc.candidates import CandidateFilter
from rtc_agent.rtc.offer import check_offer
from rtc_agent.server.forwarding import offer_elsewhere
from rtc_agent.server.http_errors import decode_text, parse_json, read_body
from rtc_agent.server.ice import ice_servers_response
from rtc_agent.server.keys import ADMISSION, METRICS, REGISTRY, ROOMS, SETTINGS, WORKER, app_class
from rtc_agent.server.session import SESSION_CANDIDATES_FACTOR, Session

SDP_TYPE = "application/sdp"
TRICKLE_TYPE = "application/trickle-ice-sdpfrag"


async def create_session(request: web.Request) -> web.Response:
    """``POST /v1/sessions``: JSON ``{app, sdp, type: "offer", config}`` or WHIP-style ``application/sdp``.

    The answer carries the session's own token (``session_token`` in JSON, ``X-Session-Token`` for WHIP): it
    authorises ``GET``/``PATCH``/``DELETE`` and the exports of this session. A client token fixes the app, the
    session id and any config keys it was minted with; it is used up only by an offer that passed
    :func:`~rtc_agent.rtc.offer.check_offer` and a session the registry admitted (a refused one leaves it valid).
    """
    app = request.app
    settings, registry = app[SETTINGS], app[REGISTRY]
    principal: Principal = request[PRINCIPAL]
    content_type = request.content_type
    if content_type not in ("application/json", SDP_TYPE):
        raise UnsupportedMediaType(
            f"POST /v1/sessions takes application/json or {SDP_TYPE}, not {content_type or 'no content type'}"
        )
    peer = client_ip(request)
    registry.check_capacity(principal.client, peer=peer)  # before reading the body; start() checks again
    app[ADMISSION].check()
    body = await read_body(request, settings.max_body_bytes)
    whip = content_type == SDP_TYPE
    if whip:
        sdp = decode_text(body, "the SDP offer")
        app_name: Any = request.query.get("app")
        raw_config = request.query.get("config")
        config: Any = parse_json(raw_config.encode(), settings, "config") if raw_config is not None else {}
    else:
        data = parse_json(body, settings)
        if not isinstance(data, dict):
            raise InvalidRequest("the body must be a JSON object", code="invalid_request")
        if data.get("type", "offer") != "offer":
            raise InvalidRequest("'type' must be 'offer'", code="invalid_sdp_type")
        sdp = data.get("sdp")
        if not isinstance(sdp, str) or not sdp.strip():
            raise InvalidRequest("'sdp' must be a non-empty SDP offer string", code="invalid_sdp")
        app_name, config = data.get("app"), data.get("config") or {}
    token = principal.token
    if token is not None and token.app == ROOM_JOIN_APP:
        raise Forbidden("a room join token creates no session; exchange it at POST /v1/tokens", code="token_scope")
    if token is not None:
        if app_name not in (None, token.app):
            raise InvalidRequest(f"this client token creates {token.app!r} sessions, not {app_name!r}",
                                 code="token_scope")
        app_name = token.app
    app_cls = app_class(app, app_name)
    # this app's measured capacity, before any engine work; an SFU room's listener (no media to this server)
    # costs only its event channel: the load signals alone
    listener = app_cls.name == "call" and isinstance(config, dict) and config.get("role") == "listener"
    app[ADMISSION].check(None if listener else app_cls.name)
    if not isinstance(config, dict):
        raise InvalidRequest("'config' must be a JSON object", code="invalid_config")
    if token is not None:
        config = {**config, **token.config}
    if token is not None and token.scope.get("room") not in (None, config.get("room")):
        raise Forbidden("this client token admits its holder to another room", code="token_scope")
    config = app_cls.validate_config(config, settings)
    forwarded = await offer_elsewhere(request, app_cls.name, config, body)
    if forwarded is not None:  # another node hosts this call room: its answer, unchanged (server/forwarding.py)
        return forwarded
    app_cls.admit(config, app[ROOMS])
    claim: Any = contextlib.nullcontext()  # yields no on_admit
    if token is not None:  # a malformed offer gets its 400 here, with the token still valid
        sdp = check_offer(sdp, CandidateFilter(allow_loopback=settings.ice_allow_loopback_candidates),
                          max_candidates=settings.max_candidates_per_patch * SESSION_CANDIDATES_FACTOR)
        # the token is used up first (atomic in the state store: one session per token); start() marks it
        # admitted between its last capacity check and registering the session: a refused offer gets it back
        claim = app[AUTH].token_claim(request)
    async with claim as on_admit:
        session_token = new_secret("st_")
        session = Session(app_cls, config, settings=settings, worker=app[WORKER], metrics=app[METRICS],
                          rooms=app[ROOMS], on_closed=registry.closed,
                          session_id=token.session_id if token else None, token_hash=secret_hash(session_token))
        answer = await registry.start(session, sdp, client=principal.client, peer=peer, on_admit=on_admit)
    headers = {"Location": f"/v1/sessions/{session.id}", "X-Session-Token": session_token,
               "Cache-Control": "no-store"}
    if whip:
        return web.Response(status=201, text=answer, content_type=SDP_TYPE, headers=headers)
    return web.json_response({"session_id": session.id, "sdp": answer, "type": "answer",
                              "session_token": session_token}, status=201, headers=headers)


def _parse_sdpfrag(text: str) -> tuple[list[dict[str, Any]], bool]:
    """Candidates and end-of-candidates from a WHIP ``application/trickle-ice-sdpfrag`` body."""
    candidates: list[dict[str, Any]] = []
    end = False
    mid: str | None = None
    mline = -1
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("m="):
            mline += 1
            mid = None
        elif line.startswith("a=mid:"):
            mid = line[6:]
        elif line.startswith("a=candidate:"):
            candidates.append({"candidate": line[2:], "sdpMid": mid, "sdpMLineIndex": max(mline, 0)})
        elif line == "a=end-of-candidates":
            end = True
    return candidates, end


async def patch_session(request: web.Request) -> web.Response:
    """``PATCH /v1/sessions/{id}``: trickle ICE, as JSON ``{candidates, end_of_candidates}`` or an SDP fragment."""
    settings, registry = request.app[SETTINGS], request.app[REGISTRY]
    session = registry.get(request.match_info["session_id"], include_ended=False)
    body = await read_body(request, settings.max_body_bytes)
    if request.content_type == "application/json":
        data = parse_json(body, settings)
        if not isinstance(data, dict):
            raise InvalidRequest("the body must be a JSON object", code="invalid_request")
        candidates = data.get("candidates", [])
        if "candidate" in data:  # a single RTCIceCandidateInit
            candidates = [data]
        if not isinstance(candidates, list) or not all(isinstance(c, dict) for c in candidates):
            raise InvalidRequest("'candidates' must be a list of RTCIceCandidateInit objects",
                                 code="invalid_candidate")
        end = bool(data.get("end_of_candidates", False))
    elif request.content_type == TRICKLE_TYPE:
        candidates, end = _parse_sdpfrag(decode_text(body, "the SDP fragment"))
    else:
        raise UnsupportedMediaType(f"PATCH takes application/json or {TRICKLE_TYPE}")
    await session.add_candidates(candidates, end)
    return web.Response(status=204)


async def get_session(request: web.Request) -> web.Response:
    session = request.app[REGISTRY].get(request.match_info["session_id"])
    return web.json_response(session.describe())


async def list_sessions(request: web.Request) -> web.Response:
    registry = request.app[REGISTRY]
    return web.json_response({
        "sessions": [{"session_id": s.id, "app": s.app_name, "state": s.state} for s in registry.active.values()],
        "max_sessions": registry.max_sessions,
    })


async def delete_session(request: web.Request) -> web.Response:
    session = request.app[REGISTRY].get(request.match_info["session_id"])
    await session.close("deleted")
    return web.Response(status=204)


async def get_ice_servers(request: web.Request) -> web.Response:
    """``GET /v1/ice-servers`` and ``GET /v1/sessions/{id}/ice-servers`` (fresh credentials for a running
    session, with its own token): STUN/TURN for the browser (:func:`ice_servers_response`). TURN usernames name
    the session (``expiry:sess_...``), so a TURN allocation can be traced to its session."""
    token = request[PRINCIPAL].token
    user = request.match_info.get("session_id") or (token.session_id if token is not None else None)
    return web.json_response(ice_servers_response(request.app[SETTINGS], user=user))


def add_routes(app: web.Application) -> None:
    app.router.add_post("/v1/sessions", create_session)
    app.router.add_get("/v1/sessions", list_sessions)
    app.router.add_patch("/v1/sessions/{session_id}", patch_session)
    app.router.add_get("/v1/sessions/{session_id}", get_session)
    app.router.add_delete("/v1/sessions/{session_id}", delete_session)
    app.router.add_get("/v1/ice-servers", get_ice_servers)
    app.router.add_get("/v1/sessions/{session_id}/ice-servers", get_ice_servers)
