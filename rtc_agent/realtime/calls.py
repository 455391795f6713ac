"""``POST /v1/realtime/calls``: the OpenAI Realtime WebRTC flow, served by the same sessions as ``/v1/sessions``.

Request: the SDP offer as ``application/sdp`` (OpenAI's browser flow), or ``multipart/form-data`` with an ``sdp``
part and an optional ``session`` part (JSON session configuration). ``?model=`` is echoed in the session.
Authorization: an API key, an ``ek_`` client secret (whose session it opens; used up only by an offer that is
valid, so a malformed one can be retried with the same secret), or open mode on loopback.
Answer: ``201`` with the SDP answer (``application/sdp``) and ``Location: /v1/realtime/calls/{call_id}``.

The call is a :class:`RealtimeCall`, a :class:`~rtc_agent.server.session.Session` (the same media edges, worker,
lifecycle and registry) whose event channel is the client's ``oai-events`` data channel speaking GA events
(:class:`~rtc_agent.realtime.channel.OaiEventChannel`); audio travels on the tracks. Trickle ICE is not part of
this flow: the server learns the browser's addresses from its connectivity checks. ``POST
/v1/realtime/calls/{call_id}/hangup`` ends a call.
"""

from __future__ import annotations

import contextlib
import secrets
from typing import Any

from aiohttp import web

from rtc_agent.auth import AUTH, PRINCIPAL
from rtc_agent.auth.access import client_ip
from rtc_agent.errors import AgentError, UnsupportedMediaType
from rtc_agent.protocol import json_limits
from rtc_agent.realtime.adapter import RealtimeAdapter, serving_app
from rtc_agent.realtime.channel import LABEL, OaiEventChannel
from rtc_agent.realtime.events import RealtimeError
from rtc_agent.realtime.secrets import session_for
from rtc_agent.realtime.session_config import SessionConfig
from rtc_agent.rtc.candidates import CandidateFilter
from rtc_agent.rtc.offer import check_offer
from rtc_agent.server.http_errors import decode_text, read_body
from rtc_agent.server.keys import ADMISSION, METRICS, REGISTRY, SETTINGS, WORKER
from rtc_agent.server.multipart_form import FORM_TYPE, FormLimits, FormReader, answer_and_close
from rtc_agent.server.session import SESSION_CANDIDATES_FACTOR, Session

__all__ = ["RealtimeCall", "create_call", "hangup_call"]

SDP_TYPE = "application/sdp"


class RealtimeCall(Session):
    """A WebRTC session whose events are OpenAI's, on the ``oai-events`` channel (see the module docstring)."""

    channel_label = LABEL

    def __init__(self, app_cls: type, config: dict[str, Any], realtime: SessionConfig, **kwargs: Any) -> None:
        super().__init__(app_cls, config, **kwargs)
        settings = self.settings
        self.adapter = RealtimeAdapter(realtime, session_id=self.id, settings=settings, transport="webrtc")
        self.channel = OaiEventChannel(
            self.clock.ms, self.adapter, max_event_bytes=max(settings.max_event_bytes, 256 * 1024),
            on_event=self._queue_event, on_error=lambda code: self.metrics.errors.labels(code=code).inc(),
            on_close=lambda: self.close_soon("peer_closed"), on_clear_output=self._clear_output,
            on_overload=self.close_soon)

    def _clear_output(self) -> None:
        if self.speech is not None:
            self.speech.clear()

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "transport": "webrtc", "protocol": "openai-realtime"}


async def _read_offer(request: web.Request, settings: Any) -> tuple[str, dict[str, Any] | None]:
    """``(sdp, session or None)`` from an ``application/sdp`` or ``multipart/form-data`` body (400
    ``invalid_multipart`` for a malformed form, see :mod:`rtc_agent.server.multipart_form`; parts other than
    ``sdp`` and ``session`` are read and ignored)."""
    limit = settings.max_body_bytes
    if request.content_type == SDP_TYPE:
        return decode_text(await read_body(request, limit), "the SDP offer"), None
    if request.content_type != FORM_TYPE:
        raise UnsupportedMediaType(f"POST /v1/realtime/calls takes {SDP_TYPE} or {FORM_TYPE} (sdp, session), "
                                   f"not {request.content_type or 'no content type'}")
    form = await FormReader.open(request, FormLimits.for_bodies(settings))
    parts: dict[str, str] = {}
    async for part in form.parts():
        if part.name in ("sdp", "session"):
            parts[part.name] = await form.text(part, limit)
    if "sdp" not in parts:
        raise RealtimeError("the multipart body needs an 'sdp' part", code="missing_required_parameter",
                            param="sdp")
    session = None
    if parts.get("session", "").strip():
        try:
            session = json_limits.loads(parts["session"], max_depth=settings.json_max_depth,
                                        max_number_chars=settings.json_max_number_chars)
        except ValueError:
            raise RealtimeError("the 'session' part is not acceptable JSON", code="invalid_json",
                                param="session") from None
        if not isinstance(session, dict):
            raise RealtimeError("the 'session' part must be a JSON object", code="invalid_type", param="session")
    return parts["sdp"], session


async def create_call(request: web.Request) -> web.StreamResponse:
    """See the module docstring. An ``ek_`` client secret is used up only once the offer is valid: the body
    read, the session configuration accepted and the SDP's structure checked; a refused offer leaves it live."""
    app = request.app
    settings, registry = app[SETTINGS], app[REGISTRY]
    principal = request[PRINCIPAL]
    try:
        sdp, session = await _read_offer(request, settings)
    except AgentError as exc:
        if exc.status != 408:
            raise
        return await answer_and_close(request, exc)  # a stalled body: answer now, drop the connection
    config = session_for(principal, settings, model=request.query.get("model"), request=session)
    app_cls, app_config = serving_app(config, settings)
    check_offer(sdp, CandidateFilter(allow_loopback=settings.ice_allow_loopback_candidates),
                max_candidates=settings.max_candidates_per_patch * SESSION_CANDIDATES_FACTOR)
    registry.check_capacity(principal.client, peer=client_ip(request))
    app[ADMISSION].check(app_cls.name)  # before any engine work: load, and this app's measured capacity
    token = principal.token
    # the secret is used up first (atomic in the state store: one call per secret); start() marks it admitted
    # between its last capacity check and registering the call: an offer refused for capacity gets it back
    claim: Any = app[AUTH].token_claim(request) if token is not None else contextlib.nullcontext()
    async with claim as on_admit:
        call = RealtimeCall(app_cls, app_config, config, settings=settings, worker=app[WORKER],
                            metrics=app[METRICS], on_closed=registry.closed,
                            session_id=token.session_id if token is not None else "rtc_" + secrets.token_hex(12))
        answer = await registry.start(call, sdp, client=principal.client, peer=client_ip(request), on_admit=on_admit)
    return web.Response(status=201, text=answer, content_type=SDP_TYPE,
                        headers={"Location": f"/v1/realtime/calls/{call.id}", "Cache-Control": "no-store"})


async def hangup_call(request: web.Request) -> web.Response:
    call = request.app[REGISTRY].get(request.match_info["call_id"], include_ended=False)
    if not isinstance(call, RealtimeCall):
        raise RealtimeError("no such call", code="not_found", param="call_id")
    await call.close("deleted")
    return web.json_response({})
