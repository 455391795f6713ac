"""The browser pages: one jinja2 base template, one page per app, and the index."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import jinja2
from aiohttp import web

from rtc_agent import __version__
from rtc_agent.server.keys import SETTINGS


@dataclass(frozen=True)
class Page:
    name: str
    title: str
    path: str
    description: str
    app: str | None
    video: bool = False


PAGES = (
    Page("captions", "Live captions", "/captions",
         "Live captions of your speech, with commentary on what the camera shows.", "captions", video=True),
    Page("interpret", "Interpretation", "/interpret",
         "Simultaneous interpretation: translated captions and translated speech while you talk.", "interpret"),
    Page("agent", "Voice agent", "/agent",
         "A spoken assistant that answers, calls tools and stops when you talk over it.", "agent"),
    Page("echo", "Echo (diagnostic)", "/echo",
         "Plays your microphone back after one second: checks the audio path both ways.", "echo"),
)
INDEX = Page("index", "rtc-agent", "/", "Realtime media agent over WebRTC.", None)

PAGES_KEY = web.AppKey("pages_env", jinja2.Environment)


def make_environment(templates_dir: str) -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(templates_dir),
        autoescape=jinja2.select_autoescape(("html",)),
        undefined=jinja2.StrictUndefined,
        auto_reload=False,
    )


def render(app: web.Application, page: Page) -> str:
    settings = app[SETTINGS]
    context: dict[str, Any] = {
        "page": asdict(page),
        "apps": [asdict(p) for p in PAGES],
        "client_config": {
            "app": page.app,
            "heartbeat_interval_ms": int(min(2000, settings.heartbeat_timeout_s * 1000 / 4)),
            "media": {"audio": True, "video": page.video},
            "session_config": {},
        },
        "version": __version__,
    }
    template = app[PAGES_KEY].get_template(f"{page.name}.html")
    return template.render(**context)


def page_handler(page: Page):
    async def handler(request: web.Request) -> web.Response:
        return web.Response(text=render(request.app, page), content_type="text/html")

    return handler


def add_routes(app: web.Application, templates_dir: str, static_dir: str) -> None:
    app[PAGES_KEY] = make_environment(templates_dir)
    app.router.add_get("/", page_handler(INDEX))
    for page in PAGES:
        app.router.add_get(page.path, page_handler(page))
    app.router.add_static("/static", static_dir, append_version=False)
