"""OpenAI Realtime API (GA) compatibility: an adapter over the same apps, not a second agent.

``type: realtime`` sessions are served by the ``agent`` app, ``type: transcription`` sessions by ``captions``;
the same engines, tools, turn taking and barge-in answer both our own pages and OpenAI clients.

Routes (authorization rules in :mod:`rtc_agent.auth.access`):

- ``GET /v1/realtime`` (WebSocket): :mod:`rtc_agent.realtime.websocket`
- ``POST /v1/realtime/calls`` (WebRTC, ``oai-events`` data channel), ``POST /v1/realtime/calls/{id}/hangup``:
  :mod:`rtc_agent.realtime.calls`
- ``POST /v1/realtime/client_secrets`` (``ek_`` keys): :mod:`rtc_agent.realtime.secrets`
- ``GET /realtime-demo``: a small page following OpenAI's WebRTC browser flow against this server

Modules: :mod:`~rtc_agent.realtime.events` (GA client events, errors), :mod:`~rtc_agent.realtime.session_config`
(the session object), :mod:`~rtc_agent.realtime.mapping` (native -> GA events), :mod:`~rtc_agent.realtime.adapter`
(both directions), :mod:`~rtc_agent.realtime.audio` (formats), :mod:`~rtc_agent.realtime.speech` and
:mod:`~rtc_agent.realtime.session` (the WebSocket transport), :mod:`~rtc_agent.realtime.channel` (the WebRTC one).
"""

from __future__ import annotations

import logging

from aiohttp import web

__all__ = ["add_routes"]

log = logging.getLogger(__name__)


async def demo_page(request: web.Request) -> web.Response:
    """``GET /realtime-demo``: OpenAI's browser flow (ephemeral key, ``/v1/realtime/calls``, ``oai-events``)."""
    from rtc_agent.server.credentials import page_auth
    from rtc_agent.server.pages import PAGES_KEY

    html = request.app[PAGES_KEY].get_template("realtime.html").render(auth=page_auth(request))
    return web.Response(text=html, content_type="text/html",
                        headers={"Cache-Control": "no-store", "X-Frame-Options": "DENY",
                                 "Referrer-Policy": "same-origin", "X-Content-Type-Options": "nosniff"})


def add_routes(app: web.Application) -> None:
    """Register the OpenAI Realtime routes (after ``pages.add_routes``: the demo page uses its templates)."""
    from rtc_agent.auth import AUTH
    from rtc_agent.realtime.calls import create_call, hangup_call
    from rtc_agent.realtime.secrets import create_client_secret
    from rtc_agent.realtime.websocket import realtime_socket

    app.router.add_get("/v1/realtime", realtime_socket)
    app.router.add_post("/v1/realtime/calls", create_call)
    app.router.add_post("/v1/realtime/calls/{call_id}/hangup", hangup_call)
    app.router.add_post("/v1/realtime/client_secrets", create_client_secret)
    app.router.add_get("/realtime-demo", demo_page)
    if app[AUTH].open:
        log.info("OpenAI Realtime API at /v1/realtime: open mode, any API key is accepted (loopback only); "
                 "ek_ client secrets are still checked")
