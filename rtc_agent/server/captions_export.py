"""``GET /v1/sessions/{id}/captions.vtt`` and ``.srt``: a session's final captions as subtitle files."""

from __future__ import annotations

from aiohttp import web

from rtc_agent.apps.captions.export import to_srt, to_vtt
from rtc_agent.errors import InvalidRequest
from rtc_agent.server.keys import REGISTRY

FORMATS = {"vtt": ("text/vtt", to_vtt), "srt": ("application/x-subrip", to_srt)}


async def export_captions(request: web.Request) -> web.Response:
    session = request.app[REGISTRY].get(request.match_info["session_id"])
    captions = getattr(session.app, "captions", None)
    if captions is None:
        raise InvalidRequest(f"session {session.id} runs the {session.app_name!r} app, which has no captions",
                             code="no_captions")
    content_type, render = FORMATS[request.match_info["fmt"]]
    return web.Response(text=render(captions()), content_type=content_type, charset="utf-8",
                        headers={"Content-Disposition": f'inline; filename="{session.id}.{request.match_info["fmt"]}"'})


def add_routes(app: web.Application) -> None:
    app.router.add_get(r"/v1/sessions/{session_id}/captions.{fmt:vtt|srt}", export_captions)
